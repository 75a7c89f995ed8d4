"""Regrades that never surprise (issue 51), with real classes on the CPU backend: a class graded, then graded
again after a case, the timing ratio and one student's kernel changed; the report names exactly the students
and causes; `grade reproduce` of a stored result; a result of another grader version under --resume."""
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS, once_per_run, run_folder
from hardware import needs_cxx
from test_batch import write_config

pytestmark = needs_cxx

# missing_use_barrier fails every case with a second tile phase (k > 16) on the emulator: ragged at k = 12 has none.
CASES = ("  - {name: square_32, m: 32, n: 32, k: 32, seed: 1, points: 40}\n"
         "  - {name: ragged, m: 37, n: 21, k: K, seed: 2, points: 40}\n")
STUDENTS = {"alice": "good_basic", "bob": "missing_use_barrier", "carol": "compile_error"}


def grade(*args, check_exit: int | None = None) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "grader", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    if check_exit is not None:
        assert run.returncode == check_exit, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def said(run: subprocess.CompletedProcess) -> str:
    return " ".join(run.stdout.split())


@pytest.fixture(scope="module")
def graded_twice(tmp_path_factory):
    """The class graded with config A, then with B (ragged's k 45 → 12, max_ratio 2.0 → 1.5) after carol fixed
    her kernel, --against the first: (root, the second batch's stdout); once in the run."""
    def grade_twice() -> tuple[str, str]:
        root = run_folder(tmp_path_factory) / "regrade"
        # timing held for a GPU (not the speed model's): a new limit changes no grade on the CPU, and is still said
        hold = {"without_gpu: model": "without_gpu: hold"}
        first_config = write_config(root / "a", CASES.replace("K", "45"), hold)
        second_config = write_config(root / "b", CASES.replace("K", "12"), {"max_ratio: 2.0": "max_ratio: 1.5", **hold})
        assert "max_ratio: 1.5" in second_config.read_text()
        for name, kernel in STUDENTS.items():
            (root / "class" / name).mkdir(parents=True)
            shutil.copy(SUBMISSIONS / kernel / "kernel.cu", root / "class" / name / "kernel.cu")
        grade("batch", root / "class", "-o", root / "first", "--config", first_config, "--backend", "cpu",
              check_exit=0)
        shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", root / "class" / "carol" / "kernel.cu")
        second = grade("batch", root / "class", "-o", root / "second", "--config", second_config, "--backend", "cpu",
                       "--against", root / "first", check_exit=0)  # 0: nobody's total went down
        return str(root), second.stdout

    root, stdout = once_per_run(tmp_path_factory, "test_regrade.graded_twice", grade_twice)
    return Path(root), stdout


def test_the_regrade_names_exactly_the_students_and_causes(graded_twice):
    root, second = graded_twice
    text = " ".join(second.split())
    assert "Regrade: 2 students changed (0 went down), 1 unchanged" in text, text
    # What changed between the gradings, each said, though on the CPU the timing ratio changes no verdict.
    assert "timing.max_ratio: 2 → 1.5" in text and "ragged: case changed" in text
    assert "By cause (submissions unchanged): ragged: case changed: 1 student (bob)" in text, text
    assert "Submission changed: 1 student (carol)" in text
    assert "alice" not in text.split("Regrade:")[1]
    rows = list(csv.DictReader(io.StringIO((root / "second" / "regrade.csv").read_text())))
    by_student = {}
    for row in rows:
        by_student.setdefault(row["submission"], []).append(row)
    assert sorted(by_student) == ["bob", "carol"]
    (bob,) = by_student["bob"]
    assert (bob["check"], bob["cause"], bob["submission changed"], bob["went down"]) == \
        ("ragged", "ragged: case changed", "no", "")
    assert bob["old verdict"] == "failed 0/40" and bob["new verdict"] == "passed 40/40"
    assert bob["old message"] and float(bob["change"]) == 40
    assert {row["causes"] for row in by_student["carol"]} == {"submission changed"}
    assert float(by_student["carol"][0]["new score"]) > float(by_student["carol"][0]["old score"])
    page = (root / "second" / "summary" / "index.html").read_text()
    assert "<h2>Regrade</h2>" in page and "ragged: case changed" in page and "submission changed" in page


def test_a_diff_the_other_way_says_grades_went_down_by_its_exit_status(graded_twice, tmp_path):
    root, _ = graded_twice
    backwards = grade("diff", root / "second", root / "first", "--csv", tmp_path / "back.csv", check_exit=6)
    assert "Regrade: 2 students changed (2 went down), 1 unchanged" in said(backwards)
    assert "bob: 46 → 6 (DOWN; ragged: case changed)" in said(backwards)  # 6: two of the static checks
    same = grade("diff", root / "second", root / "second", "--csv", tmp_path / "same.csv", check_exit=0)
    assert "Regrade: 0 students changed (0 went down), 3 unchanged" in said(same)


def test_diff_reads_plain_result_folders_and_leaves_out_an_edited_result(graded_twice, tmp_path):
    root, _ = graded_twice
    plain = tmp_path / "plain"  # results as `grade PATH -o` writes them: no signature to check
    plain.mkdir()
    for path in (root / "first" / "students").glob("*.json"):
        shutil.copy(path, plain / path.name)
    from_plain = grade("diff", plain, root / "second", "--csv", tmp_path / "plain.csv", check_exit=0)
    assert "Regrade: 2 students changed (0 went down), 1 unchanged" in said(from_plain)
    edited = tmp_path / "edited"
    shutil.copytree(root / "second", edited)
    bob = edited / "students" / "bob.json"
    bob.write_text(bob.read_text().replace('"score": 46', '"score": 90', 1))  # a hand-raised grade
    run = grade("diff", root / "first", edited, "--csv", tmp_path / "edited.csv", check_exit=0)
    assert "NEW: 1 results left out, their signature does not hold" in " ".join(run.stderr.split()) + " "
    assert "Regrade: 1 student changed (0 went down), 1 unchanged" in said(run)
    assert "1 student only in the old grading: bob" in said(run)  # left out of the new one


def test_each_result_says_what_it_was_graded_with(graded_twice):
    root, _ = graded_twice
    stored = json.loads((root / "second" / "students" / "bob.json").read_text())
    record = stored["provenance"]
    assert record["grader_version"] and len(record["grader_digest"]) == 64
    assert record["settings"]["timing.max_ratio"] == 1.5 and "timing.seed" not in record["settings"]
    assert sorted(record["cases"]) == ["ragged", "square_32"] and list(record["case_files"]) == ["small.yaml"]
    assert stored["sandbox"] and stored["device"]  # the sandbox level and what it ran on (the CPU emulator)
    earlier = json.loads((root / "first" / "students" / "bob.json").read_text())["provenance"]
    assert earlier["cases"]["square_32"] == record["cases"]["square_32"]
    assert earlier["cases"]["ragged"] != record["cases"]["ragged"]
    assert earlier["submission_sha256"] == record["submission_sha256"]


def test_reproduce_matches_with_the_same_config_and_says_why_not_with_another(graded_twice):
    root, _ = graded_twice
    bob = root / "second" / "students" / "bob.json"
    same = grade("reproduce", bob, root / "class" / "bob", "--config", root / "b" / "config.yaml", "--backend", "cpu",
                 check_exit=0)
    assert "Reproduced: every verdict matches" in said(same)
    other = grade("reproduce", bob, root / "class" / "bob", "--config", root / "a" / "config.yaml", "--backend", "cpu",
                  check_exit=7)
    text = said(other)
    assert "Not reproduced: 1 verdicts differ" in text and "ragged: passed 40/40 → failed 0/40" in text, text
    assert "ragged: case changed" in text and "timing.max_ratio: 1.5 → 2" in text


def test_resume_lists_and_regrades_a_result_of_another_grader_version(graded_twice, tmp_path):
    from grader.classroom.store import KEY_FILE, ResultStore
    from grader.result import SubmissionResult

    root, _ = graded_twice
    out = tmp_path / "out"
    shutil.copytree(root / "second", out)
    # alice's result as a grader of another version stored it: its record and fingerprint are that grader's.
    store = ResultStore(out / "students", out / KEY_FILE)
    alice = SubmissionResult.from_dict(json.loads((out / "students" / "alice.json").read_text()))
    alice.provenance.grader_version, alice.provenance.grader_digest = "0.0.9", "9" * 64
    alice.fingerprint = "f" * 64
    store.put("alice", alice)
    config = root / "b" / "config.yaml"
    kept = grade("batch", root / "class", "-o", out, "--config", config, "--backend", "cpu", "--resume",
                 "--keep-older", check_exit=0)
    text = said(kept)
    assert "0 graded now, 3 kept from earlier runs" in text, text
    assert "1 stored results were graded by another grader, config or cases: 0 graded again, 1 kept (--keep-older)" \
        in text and "kept: alice (grader: 0.0.9 (999999999999) → 0.1.0" in text
    regraded = grade("batch", root / "class", "-o", out, "--config", config, "--backend", "cpu", "--resume",
                     check_exit=0)
    text = said(regraded)
    assert "1 graded now, 2 kept from earlier runs" in text, text
    assert "graded again: alice (grader: 0.0.9 (999999999999)" in text
    assert json.loads((out / "students" / "alice.json").read_text())["provenance"]["grader_version"] != "0.0.9"


# --- the comparison alone (report/regrade.py is a pure function of two sets of results) -------------------------


def result_of(name: str, checks, settings=None, cases=None, digest="a" * 64, submitted="s", device="GPU A"):
    from grader.result import Provenance, SubmissionResult

    record = Provenance(grader_version="1", grader_digest=digest, settings=settings or {"timing.max_ratio": 2.0},
                        cases=cases or {"square": "c1"}, submission_sha256=submitted)
    return SubmissionResult(name, "graded", checks=checks, backend="gpu", device=device, provenance=record)


def timing(status: str, ratio: float):
    from grader.result import TIMING, CheckResult

    return CheckResult("timing", TIMING, status, 10.0 if status == "passed" else 0.0, 10.0, f"ratio {ratio}",
                       metrics={"ratio": ratio})


def case(name: str, status: str = "passed"):
    from grader.result import CASE, CheckResult

    return CheckResult(name, CASE, status, 5.0 if status == "passed" else 0.0, 5.0, status)


def test_a_tighter_ratio_a_new_case_and_a_new_grader_are_each_a_cause_with_their_students():
    from grader.report.regrade import compare

    old = [result_of(f"s{i}", [case("square"), timing("passed", 1.7)]) for i in range(12)]
    old.append(result_of("edge", [case("square"), timing("passed", 1.49)]))
    old.append(result_of("newbie", [case("square"), timing("passed", 1.0)]))
    tighter = {"timing.max_ratio": 1.5}
    new = [result_of(f"s{i}", [case("square"), timing("failed", 1.7)], tighter) for i in range(12)]
    # Ratio 1.49 against 1.5 on one day, 1.52 the next: the setting changed too, so it is the cause named.
    new.append(result_of("edge", [case("square"), timing("failed", 1.52)], tighter))
    new.append(result_of("newbie", [case("square"), case("large_hidden", "failed"), timing("passed", 1.0)], tighter,
                         {"square": "c1", "large_hidden": "c2"}))
    regrade = compare(old, new)
    groups = {group.cause: group.students for group in regrade.groups}
    assert groups == {"timing: max_ratio changed 2 → 1.5": sorted([*(f"s{i}" for i in range(12)), "edge"]),
                      "large_hidden: new case": ["newbie"]}
    assert list(groups)[0].startswith("timing")  # most students first
    assert len(regrade.went_down) == 13 and "large_hidden: new case" in regrade.differences

    upgraded = [result_of("s0", [case("square"), timing("failed", 1.7)], digest="b" * 64)]
    (change,) = compare(old[:1], upgraded).changed
    assert change.causes == ["grader: 1 (aaaaaaaaaaaa) → 1 (bbbbbbbbbbbb)"]


def test_a_timing_verdict_near_the_limit_with_nothing_else_changed_says_so():
    from grader.report.regrade import compare, compare_one

    (change,) = compare([result_of("a", [timing("passed", 1.99)])], [result_of("a", [timing("failed", 2.01)])]).changed
    assert change.causes == ["timing: ratio near the threshold (one measurement cannot tell the two apart)"]
    moved = compare_one("a", result_of("a", [timing("passed", 1.99)]),
                        result_of("a", [timing("failed", 2.01)], device="GPU B"))
    assert moved.causes == ["machine: GPU A → GPU B"]
    resubmitted = compare_one("a", result_of("a", [case("square", "failed")]),
                              result_of("a", [case("square")], submitted="t"))
    assert resubmitted.submission_changed and resubmitted.causes == ["submission changed"]
    assert compare_one("a", result_of("a", [case("square")]), result_of("a", [case("square")], device="GPU B")) is None


def test_a_path_with_brackets_is_said_as_written(tmp_path):
    """An error names the path the instructor typed: brackets in it are text, not the terminal's markup."""
    result = tmp_path / "[bold]alice.json"
    missing = grade("reproduce", result, SUBMISSIONS / "good_basic", check_exit=2)
    assert f"error: {result}: No such file or directory" in " ".join(missing.stderr.split())
    result.write_text("[red]not json")
    broken = grade("reproduce", result, SUBMISSIONS / "good_basic", check_exit=2)
    assert f"error: {result}: not a result JSON the grader wrote" in " ".join(broken.stderr.split())
