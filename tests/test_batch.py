"""`grade batch` end to end on the CPU backend: a row per student whatever happens, and --resume after kill -9."""
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS, left_in, owners_of, wait_until_gone
from hardware import needs_cxx
from junitparser import JUnitXml

pytestmark = needs_cxx
CLASS = ["good_basic", "missing_use_barrier", "trap", "compile_error", "good_tile8_renamed", "truncated_phases"]


def write_config(folder, cases: str, changes: dict[str, str] | None = None):
    """The project's config with these cases (YAML list items), its own paths, and `changes` (old: new)."""
    (folder / "cases").mkdir(parents=True)
    (folder / "cases" / "small.yaml").write_text("cases:\n" + cases)
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {folder / 'cases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    for old, new in (changes or {}).items():
        text = text.replace(old, new)
    (folder / "config.yaml").write_text(text)
    return folder / "config.yaml"


@pytest.fixture(scope="module")
def small_config(tmp_path_factory):
    """Three small cases, so a batch of several students takes seconds; timing held for a GPU (the speed model's
    verdicts are test_speed_model_cpu.py's), so that a class's totals without a GPU are out of 90."""
    return write_config(tmp_path_factory.mktemp("batch-config"),
                        "  - {name: square_32, m: 32, n: 32, k: 32, seed: 1, points: 30}\n"
                        "  - {name: ragged, m: 37, n: 21, k: 45, seed: 2, points: 30}\n"
                        "  - {name: hidden_one, m: 19, n: 40, k: 33, seed: 3, points: 20, visibility: hidden}\n",
                        {"without_gpu: model": "without_gpu: hold"})


def class_folder(tmp_path):
    folder = tmp_path / "class"
    for name in CLASS:
        (folder / name).mkdir(parents=True)
        (folder / name / "kernel.cu").write_bytes((SUBMISSIONS / name / "kernel.cu").read_bytes())
    return folder


def batch(config, *args, **popen):
    command = [sys.executable, "-m", "grader", "batch", *map(str, args), "--config", str(config), "--backend", "cpu"]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def grades(outdir) -> dict:
    rows = list(csv.DictReader(io.StringIO((outdir / "grades.csv").read_text())))
    return {row["submission"]: row for row in rows}


def test_a_canvas_zip_yields_a_row_per_student_with_refusals_kept(small_config, tmp_path):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("archer_1001_5000_kernel.cu", "// an older upload, replaced\n")
        # Canvas renames a second upload of kernel.cu to kernel-1.cu: the newest (highest id) is graded.
        z.writestr("archer_1001_5001_kernel-1.cu", (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
        z.writestr("builder_1002_5002_kernel.cu", (SUBMISSIONS / "missing_load_barrier" / "kernel.cu").read_text())
        z.writestr("chen_1003_5003_kernel.cu", "")
        z.writestr("../../evil_1004_5004_kernel.cu", "int x;")
    out = tmp_path / "out"
    finished = batch(small_config, archive, "-o", out)
    stdout, stderr = finished.communicate(timeout=120)
    assert finished.returncode == 0, stderr
    rows = grades(out)
    # Without a GPU, timing (10 points) is not checked: every total is out of the 90 that are, and says so.
    possible = rows["points possible"]
    assert (possible["total"], possible["max"], possible["speed vs reference"]) == ("90", "90", "")
    assert possible["intake notes"] == "points checkable without a GPU; 10 more need a GPU (timing): not checked"
    students = {row["student_id"]: row for name, row in rows.items() if name != "points possible"}
    assert students["1001"]["total"] == students["1001"]["max"] == "90" and students["1001"]["status"] == "graded"
    assert students["1001"]["speed vs reference"] == ""  # not checked: no 0 in its cell
    said = " ".join(stdout.split())
    assert "1 full marks (of the points checkable without a GPU)" in said, said
    assert "Graded without a GPU: every total is out of the 90 points checkable here; 10 more need a GPU (timing)" \
        in said
    summary = (out / "summary" / "index.html").read_text()
    assert "points out of 90 checkable without a GPU" in summary and "10 more need a GPU (timing)" in summary
    assert students["1002"]["total"] == "6"  # 2 of the static checks; every case races
    assert students["1003"]["status"] == "submission error"
    assert "evil" in (out / "intake.txt").read_text()
    suites = {s.name: s for s in JUnitXml.fromfile(str(out / "junit.xml"))}
    assert len(suites) == len(students)
    canvas = list(csv.reader(io.StringIO((out / "canvas.csv").read_text())))
    assert canvas[0][:2] == ["Student", "ID"] and canvas[1][0].strip() == "Points Possible"
    # A Canvas zip's ids are Canvas user ids: the ID column; the score is held (this run had no GPU).
    assert ["archer", "1001", "", "", "", ""] in canvas
    assert "held: graded without a GPU" in (out / "canvas-notes.txt").read_text()
    # Which upload was graded reaches grades.csv and the summary.
    note = students["1001"]["intake notes"]
    assert "newest of the uploads named kernel.cu" in note and "archer_1001_5000_kernel.cu" in note
    assert "archer_1001_5000_kernel.cu" in (out / "summary" / "index.html").read_text()
    own = (out / "students" / f"{next(n for n, r in rows.items() if r['student_id'] == '1002')}.junit.xml").read_text()
    assert "hidden_one" in own and "m=19" not in own  # a student's own JUnit: hidden case verdict only
    assert (out / "summary" / "index.html").is_file()


def test_killed_and_resumed_gives_the_same_grades_as_one_run(small_config, tmp_path):
    folder = class_folder(tmp_path)
    whole = tmp_path / "whole"
    finished = batch(small_config, folder, "-o", whole, "--jobs", "2")
    assert finished.wait(timeout=180) == 0

    broken = tmp_path / "broken"
    running = batch(small_config, folder, "-o", broken, "--jobs", "1")
    deadline = time.monotonic() + 120
    while len(list((broken / "students").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    running.send_signal(signal.SIGKILL)
    running.wait()
    saved = len(list((broken / "students").glob("*.json")))
    assert 2 <= saved < len(CLASS) and not (broken / "grades.csv").exists()
    assert not list((broken / "students").glob(".*.tmp"))  # nothing half-written is left looking whole

    resumed = batch(small_config, folder, "-o", broken, "--resume", "--jobs", "2")
    stdout, stderr = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, stderr
    assert f"{len(CLASS) - saved} graded now, {saved} kept from earlier runs" in " ".join(stdout.split())
    assert grades(broken) == grades(whole)


# good_basic whose first case sleeps past the case's time limit on the CPU emulator (nvcc never sees the sleep):
# a student that holds the batch for the limit (10 s) whatever the machine's load, at no CPU cost. (A 0.2 s
# spin, then a 4 s sleep, once let a loaded machine's test see the first result only after the whole class
# was done: exit 0, not 130.)
SLOW_GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text().replace(
    "{\n", "{\n    if (threadIdx.x + threadIdx.y + blockIdx.x + blockIdx.y == 0 && m == 32) {\n"
    "#ifndef __NVCC__\n        sleep(30);\n#endif\n    }\n", 1)


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_stops_the_batch_and_resume_finishes_it(small_config, tmp_path):
    folder = class_folder(tmp_path)
    (folder / "zz_slow").mkdir()
    (folder / "zz_slow" / "kernel.cu").write_text(SLOW_GOOD)
    out = tmp_path / "out"
    # As a terminal starts it: SIGINT at its default action, whatever this test process inherited (a process
    # that ignores SIGINT passes that on to the programs it starts, and Python then leaves it ignored).
    running = batch(small_config, folder, "-o", out, "--jobs", "1", preexec_fn=interruptible)
    started = time.monotonic()
    while not list((out / "students").glob("*.json")) and time.monotonic() < started + 120:
        time.sleep(0.05)
    seen = {p.name: round(p.stat().st_mtime - time.time(), 2) for p in (out / "students").glob("*.json")}
    still_running = running.poll() is None
    masks = [line for line in Path(f"/proc/{running.pid}/status").read_text().splitlines()
             if line.startswith(("SigBlk", "SigIgn"))] if still_running else []
    running.send_signal(signal.SIGINT)
    stdout, stderr = running.communicate(timeout=60)
    said = (f"after {time.monotonic() - started:.1f} s saw {seen} (age s), running: {still_running} {masks}\n"
            f"stdout: {stdout[-1500:]}\nstderr: {stderr[-1500:]}")
    assert running.returncode == 130 and "--resume" in stderr and "Traceback" not in stderr, said
    resumed = batch(small_config, folder, "-o", out, "--resume")
    resumed.communicate(timeout=180)
    assert resumed.returncode == 0 and len(grades(out)) == len(CLASS) + 2  # the points-possible row and zz_slow


def test_force_regrades_everyone(small_config, tmp_path):
    folder = tmp_path / "one"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "kernel.cu").write_bytes((SUBMISSIONS / "good_basic" / "kernel.cu").read_bytes())
    out = tmp_path / "out"
    for flags, expected in (((), "1 graded now"), (("--resume",), "0 graded now"), (("--force",), "1 graded now")):
        finished = batch(small_config, folder, "-o", out, *flags)
        stdout, _ = finished.communicate(timeout=120)
        assert expected in " ".join(stdout.split())


def test_the_resume_fingerprint_changes_with_the_graders_own_code(tmp_path):
    # A copy of the package, changed by one comment, as an upgrade would change it.
    shutil.copytree(ROOT / "grader", tmp_path / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    code = "from grader.classroom.batch import grader_digest; print(grader_digest())"

    def digest() -> str:
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(tmp_path)})
        return run.stdout.strip()

    before = digest()
    timing = tmp_path / "grader" / "judge" / "timing.py"
    timing.write_text(timing.read_text() + "\n# a fix in a new release\n")
    assert digest() != before


@pytest.fixture
def quick_config(tmp_path):
    """The small cases with a 2 s run limit and a cache (where the device turns live) of this test's own."""
    folder = tmp_path / "quick-config"
    return write_config(folder, "  - {name: square_32, m: 32, n: 32, k: 32, seed: 1, points: 45}\n"
                                "  - {name: ragged, m: 37, n: 21, k: 45, seed: 2, points: 45}\n",
                        {"run_s: 10": "run_s: 2", "cache_dir: ~/.cache/sgemm-grader": f"cache_dir: {folder}"})


def alone(config, folder, tmp_path):
    """The submission graded by `grade` on its own, as its result model."""
    from grader.result import SubmissionResult

    out = tmp_path / "alone"
    subprocess.run([sys.executable, "-m", "grader", str(folder), "--config", str(config), "--backend", "cpu",
                    "-o", str(out)], cwd=ROOT, capture_output=True, check=False)
    return SubmissionResult.from_dict(json.loads((out / f"{folder.name}.json").read_text()))


def stored(out, key):
    from grader.result import SubmissionResult

    return SubmissionResult.from_dict(json.loads((out / "students" / f"{key}.json").read_text()))


def _release_once_waited_on(held, lock_file: Path, waiters: int, hold_s: float) -> None:
    """Releases the turn `hold_s` after `waiters` processes block on its lock file (flock waiters are the
    `->` lines of /proc/locks), or after two minutes."""
    inode, deadline = f":{os.stat(lock_file).st_ino} ", time.monotonic() + 120
    while time.monotonic() < deadline:
        blocked = [line for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line]
        if len(blocked) >= waiters:
            time.sleep(hold_s)
            break
        time.sleep(0.05)
    held.release()


def test_a_run_queued_behind_a_timing_turn_longer_than_its_limit_gets_its_verdict(quick_config, tmp_path):
    """The device is held alone (as by a timing measurement) until both students wait for their turn, then
    for 1.5 times the 2 s run limit: each gets exactly the verdicts it gets alone."""
    from grader.config import load_config
    from grader.judge.verdicts import differences
    from grader.pipeline import CPU, device_lock

    folder = tmp_path / "class"
    for name in ("good_basic", "truncated_phases"):
        (folder / name).mkdir(parents=True)
        shutil.copy(SUBMISSIONS / name / "kernel.cu", folder / name / "kernel.cu")
    config = load_config(quick_config)
    lock = device_lock(config, CPU)
    held = lock.turn("timing")
    # Released by what the batch does, not after a fixed time: on a loaded machine the batch's start alone
    # once took longer than a fixed hold, and nobody waited.
    threading.Thread(target=_release_once_waited_on, args=(held, lock.folder / f"{lock.device}.turn", 2, 3.0),
                     daemon=True).start()
    out = tmp_path / "out"
    finished = batch(quick_config, folder, "-o", out, "--jobs", "2")
    _, stderr = finished.communicate(timeout=180)
    assert finished.returncode == 0, stderr
    for name in ("good_basic", "truncated_phases"):
        result = stored(out, name)
        assert differences(result, alone(quick_config, folder / name, tmp_path), config.timing.max_ratio) == []
        compiled = next(c for c in result.checks if c.kind == "compile")
        assert compiled.metrics["turn_wait_s"] > 2, "the run did not wait behind the held turn"
    assert stored(out, "good_basic").score == stored(out, "good_basic").checkable_max  # full marks


def test_a_batch_student_is_recorded_as_graded_with_what_grade_alone_records(quick_config, tmp_path):
    """A batch's workers make the run's provenance once on their host, not in each student's process: what a
    student's result says it was graded with (what --resume and a regrade compare) is what `grade` alone says, and
    so are its verdicts."""
    from grader.config import load_config
    from grader.judge.verdicts import differences

    folder = tmp_path / "class"
    (folder / "bob").mkdir(parents=True)
    shutil.copy(SUBMISSIONS / "truncated_phases" / "kernel.cu", folder / "bob" / "kernel.cu")
    out = tmp_path / "out"
    finished = batch(quick_config, folder, "-o", out)
    _, stderr = finished.communicate(timeout=180)
    assert finished.returncode == 0, stderr
    in_batch, by_itself = stored(out, "bob"), alone(quick_config, folder / "bob", tmp_path)
    assert in_batch.provenance.grader_digest and in_batch.provenance.submission_sha256
    assert in_batch.provenance == by_itself.provenance
    assert differences(in_batch, by_itself, load_config(quick_config).timing.max_ratio) == []


def bomb(size: int = 20 << 20) -> bytes:
    """20 MB of zeros, which an archive deflates to a few kB: a zip bomb (issue 43's refused upload)."""
    return b"\0" * size


def test_a_canvas_student_keeps_their_ids_late_flag_and_refusals_whatever_was_refused(small_config, tmp_path):
    """A Canvas download where one student's own upload is a zip bomb (refused: their row is a submission error)
    and another's zip holds a member that climbs out of it, handed in late: both rows keep the student's
    Canvas id in every file, the refused member is in that student's own result and row, and late is a
    column."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("kernel.cu", (SUBMISSIONS / "compile_error" / "kernel.cu").read_text())
        z.writestr("../escape.txt", "out of the folder")
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archer_1001_5001_kernel.cu", (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
        z.writestr("builder_late_1002_5002_lab.zip", inner.getvalue())
        z.writestr("chen_1003_5003_kernel.cu", bomb())
    out = tmp_path / "out"
    finished = batch(small_config, archive, "-o", out)
    _, stderr = finished.communicate(timeout=180)
    assert finished.returncode == 0, stderr
    students = {row["student_id"]: row for row in grades(out).values()}
    assert students["1003"]["status"] == "submission error"
    canvas = {row["Student"]: row for row in csv.DictReader(io.StringIO((out / "canvas.csv").read_text()))}
    assert canvas["chen"]["ID"] == "1003" and canvas["builder"]["ID"] == "1002"  # refused or not, Canvas matches
    notes = (out / "canvas-notes.txt").read_text()
    assert "no id Canvas can match" not in notes
    escaped = "refused 'builder_late_1002_5002_lab.zip > ../escape.txt': climbs out of the archive's folder"
    assert escaped in students["1002"]["intake notes"]  # refused inside the student's own zip: in their row
    assert (students["1002"]["late"], students["1001"]["late"], students["1003"]["late"]) == ("yes", "", "")
    stored = {json.loads(path.read_text())["canvas_user_id"]: json.loads(path.read_text())
              for path in (out / "students").glob("*.json")}
    assert stored["1003"]["outcome"] == "submission error" and "zip bomb" in stored["1003"]["message"]
    assert stored["1002"]["late"] is True and any(escaped in note for note in stored["1002"]["intake_notes"])
    assert stored["1001"]["late"] is False


def test_what_a_batch_killed_mid_grade_leaves_the_next_batch_clears(small_config, tmp_path, temp_root):
    """kill -9 of `grade batch` while its workers grade: their sandboxes end with them, but each grade's
    scratch folder (the student's code and the run's files) stays in the temporary root. The next batch there
    removes what the dead left, says so, and leaves the root as it found it."""
    folder = tmp_path / "class"
    for name in ("hang_a", "hang_b"):  # busy for as long as their cases time out
        (folder / name).mkdir(parents=True)
        shutil.copy(SUBMISSIONS / "hang" / "kernel.cu", folder / name / "kernel.cu")
    env = {**os.environ, "TMPDIR": str(temp_root)}
    running = batch(small_config, folder, "-o", tmp_path / "killed", "--jobs", "2", env=env)
    deadline = time.monotonic() + 120
    def graded_in() -> list[str]:  # a grade's folders (a CPU grade's emulator build ahead has one of its own)
        return [name for name in left_in(temp_root) if name.startswith("sgemm-grade-")]

    while len(owners_of(graded_in())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    running.send_signal(signal.SIGKILL)
    running.wait()
    workers = owners_of(graded_in())
    assert len(workers) == 2, left_in(temp_root)  # one worker per student, each its folders
    wait_until_gone(workers)  # its workers die with it (until then they may still make and remove folders)
    left = graded_in()
    assert owners_of(left) == workers, left_in(temp_root)
    time.sleep(0.5)
    assert graded_in() == left  # kept: nobody clears

    again = batch(small_config, SUBMISSIONS / "compile_error", "-o", tmp_path / "next", env=env)
    stdout, stderr = again.communicate(timeout=180)
    assert again.returncode == 0, stderr
    assert f"removed {len(left)} temporary folders that graders which ended without cleaning up (kill -9) left in " \
           f"{temp_root}" in " ".join(stdout.split())
    assert left_in(temp_root) == []
