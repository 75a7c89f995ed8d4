"""What is checkable depends on the machine and the config, never on the submission (issue 25).

A kernel that uses something the CPU emulator cannot build (inline PTX here) must not move its cases out
of the checkable total: they are not passed, the total stays 90 for the shipped config, and the grade is
held for a GPU ("needs GPU grade") in every output. A build that failed for the grader's reason (no
compiler, one the sandbox cannot run) is a grader error with the reason, graded again by --resume.
Real nvcc, real g++, the real sandbox: nothing here stands in for them.
"""
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS, once_per_run
from hardware import needs_cxx, needs_gpu, needs_nvcc

from grader.build_failure import classify
from grader.cli import main
from grader.result import ERROR, GRADED, GRADER_ERROR, NEEDS_GPU_GRADE, PASSED

pytestmark = [needs_cxx, needs_nvcc]
CHECKABLE = 90  # the shipped config on the CPU: 100 less timing (10); the large cases run by sampled blocks
EVERY_POINT = 100  # a correct kernel on the CPU: timing decided by the speed model too
STATIC = 10  # the static checks' points, which both inline-PTX kernels earn
WRONG, CORRECT = "inline_ptx_wrong", "inline_ptx_correct"
HELD_REASON = "uses inline PTX (line {}), which the CPU grader cannot run: it is graded on a GPU"
PTX_LINE = {WRONG: 7, CORRECT: 9, "trap_in_asm": 16}


def grade_cli(*args, env=None):
    command = [sys.executable, "-m", "grader", *map(str, args), "--backend", "cpu"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def checkable_max(data: dict) -> float:
    return sum(c["max_score"] for c in data["checks"] if not c["needs_gpu"])


ASSEMBLER = "trap_in_asm"  # inline PTX g++ takes, which the assembler refuses (`kernel.cu:16: Error:`)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The inline-PTX kernels through one `grade --fail-under 50`: (exit code, stdout, JSON by name); once in
    the run."""
    def grade_them() -> tuple:
        out, folder = tmp_path_factory.mktemp("held"), tmp_path_factory.mktemp("assembler") / ASSEMBLER
        folder.mkdir()
        source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
        (folder / "kernel.cu").write_text(source.replace("    float sum = 0.0f;\n",
                                                         '    float sum = 0.0f;\n    asm volatile("trap;");\n'))
        finished = grade_cli(SUBMISSIONS / WRONG, SUBMISSIONS / CORRECT, folder, "-o", out, "--fail-under", "50")
        results = {name: json.loads((out / f"{name}.json").read_text()) for name in (WRONG, CORRECT, ASSEMBLER)}
        return finished.returncode, finished.stdout, results

    return once_per_run(tmp_path_factory, "test_held_for_gpu.graded", grade_them, decode=tuple)


@pytest.mark.parametrize("name", [WRONG, CORRECT, ASSEMBLER])
def test_a_construct_the_emulator_cannot_build_keeps_its_cases_in_the_total(graded, name):
    _, stdout, results = graded
    data = results[name]
    assert data["outcome"] == NEEDS_GPU_GRADE and data["status"] == "graded"
    assert checkable_max(data) == CHECKABLE
    assert data["score"] == STATIC < CHECKABLE
    emulated = [c for c in data["checks"] if c["kind"] == "case" and not c["needs_gpu"]]
    assert len(emulated) == 21
    reason = HELD_REASON.format(PTX_LINE[name])
    assert all(c["status"] == ERROR and c["score"] == 0 and c["message"] == reason for c in emulated)
    assert all(c["metrics"]["line"] == PTX_LINE[name] for c in emulated)  # JUnit points at it
    assert {c["needs_gpu"] for c in data["checks"]} == {"", "timing"}  # nothing of the kernel's


def test_the_terminal_says_the_total_and_why_and_fail_under_counts_the_held_cases(graded):
    code, stdout, _ = graded
    said = " ".join(stdout.split())
    assert said.count(f"Total: {STATIC}/{CHECKABLE} points checkable without a GPU") == 3
    assert "Needs a GPU grade: the kernel uses inline PTX (line 7)" in said
    assert code == 1  # --fail-under 50 asks 45 of the 90 checkable points


@pytest.mark.parametrize("entry", ["gradescope", "prairielearn"])
def test_lms_files_show_the_held_cases_at_zero_out_of_the_checkable_total(tmp_path, entry):
    results = tmp_path / "results.json"
    assert grade_cli(entry, SUBMISSIONS / WRONG, results).returncode == 0
    data = json.loads(results.read_text())
    reason = HELD_REASON.format(PTX_LINE[WRONG])
    if entry == "gradescope":
        assert data["score"] == STATIC and data["extra_data"]["checkable_max_score"] == CHECKABLE
        assert data["extra_data"]["outcome"] == NEEDS_GPU_GRADE
        cases = [t for t in data["tests"] if t["name"].startswith("case: ")]
        assert sum(t["max_score"] for t in data["tests"]) == CHECKABLE
        assert all(t["score"] == 0 and t["status"] == "failed" for t in cases)
        shown = [t["output"] for t in cases if t["visibility"] == "visible"]
    else:
        assert data["gradable"] is True and data["score"] == pytest.approx(STATIC / CHECKABLE)
        assert data["message"].startswith(f"{NEEDS_GPU_GRADE}: {STATIC}/{CHECKABLE} points")
        cases = [t for t in data["tests"] if t["description"].startswith("case")]
        assert sum(t["max_points"] for t in data["tests"]) == CHECKABLE
        assert all(t["points"] == 0 for t in cases)
        shown = [t["output"] for t in cases if "hidden" not in t["description"]]
    assert len(cases) == 21 and shown and all(text == reason for text in shown)


def rows(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def class_of(tmp_path, *names):
    folder = tmp_path / "class_folder"
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "kernel.cu").write_bytes((SUBMISSIONS / name / "kernel.cu").read_bytes())
    return folder


@pytest.fixture(scope="module")
def class_batch(tmp_path_factory):
    """One class batch (--without-gpu hold), then the same with --resume --without-gpu scale: the stored
    results are kept and the exports written again. canvas.csv and its notes of each, by option."""
    def grade_class() -> tuple:
        tmp = tmp_path_factory.mktemp("class")
        out, klass, exports = tmp / "out", class_of(tmp, WRONG, CORRECT), {}
        for without_gpu, again in (("hold", ()), ("scale", ("--resume",))):
            finished = grade_cli("batch", klass, "-o", out, "--jobs", "2", "--without-gpu", without_gpu, *again)
            assert finished.returncode == 0, finished.stderr
            exports[without_gpu] = (rows(out / "canvas.csv"), (out / "canvas-notes.txt").read_text())
        assert "0 graded now" in " ".join(finished.stdout.split())
        return out, exports

    return once_per_run(tmp_path_factory, "test_held_for_gpu.class_batch", grade_class,
                        lambda made: [str(made[0]), made[1]],
                        lambda stored: (Path(stored[0]), {key: tuple(pair) for key, pair in stored[1].items()}))


@pytest.mark.parametrize("without_gpu", ["hold", "scale"])
def test_canvas_holds_the_grade_and_never_scales_it_up(class_batch, without_gpu):
    canvas, notes = class_batch[1][without_gpu]
    cells = {row["Student"]: row["SGEMM lab"] for row in canvas}
    assert cells[WRONG] == cells[CORRECT] == ""
    for name in (WRONG, CORRECT):
        assert f"{name} [{name}]: empty cell, held: needs a GPU grade" in notes


def test_grades_csv_shows_the_cpu_score_with_its_status(class_batch):
    sheet = {row["submission"]: row for row in rows(class_batch[0] / "grades.csv")}
    for name in (WRONG, CORRECT):
        assert sheet[name]["status"] == NEEDS_GPU_GRADE and sheet[name]["total"] == str(STATIC)
        assert sheet[name]["square_16"] == "0"


def classified(snippet: str):
    """What g++ really says when the emulator builds this line inside a kernel, then its verdict."""
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    source = source.replace("    float sum = 0.0f;\n", f"    float sum = 0.0f;\n    {snippet}\n")
    return classify(emulator_log(source), source)


def emulator_log(source: str) -> str:
    from pathlib import Path
    from tempfile import TemporaryDirectory

    from grader.config import load_config
    from grader.execute.cpu.build import FLAGS, HERE, STUDENT_UNIT, compiler, emulator_sources

    contract = load_config(ROOT / "config.yaml").kernel.contract()
    with TemporaryDirectory() as folder:
        for name, text in emulator_sources(source, contract).items():
            Path(folder, name).write_text(text)
        command = [compiler(), *FLAGS, "-fsyntax-only", "-I", folder, "-I", str(HERE), "-I", str(HERE / "include"),
                   str(HERE / STUDENT_UNIT)]
        finished = subprocess.run(command, capture_output=True, text=True, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    assert finished.returncode != 0
    return finished.stdout + finished.stderr


@pytest.mark.parametrize("snippet, reason", [
    ("__nanosleep(100);", "uses __nanosleep (line 16)"),
    ("cudaTextureObject_t texture = 0; sum += tex1Dfetch<float>(texture, 0);", "uses cudaTextureObject_t (line 16)"),
    ("sum += undefined_helper(sum);", "uses undefined_helper (line 16)"),
    ("int x = ;", "line 16 is code the CPU grader cannot build"),
])
def test_the_student_is_told_the_construct_and_line_gcc_located(snippet, reason):
    failure = classified(snippet)
    assert failure.students and failure.line == 16
    assert failure.student_reason.startswith(reason)


@pytest.mark.parametrize("log", [
    "prlimit: failed to execute /opt/private/g++: Permission denied",
    "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
    "cc1plus: out of memory allocating 65536 bytes after a total of 4194304 bytes",
    "cc1plus: fatal error: /srv/grader/execute/cpu/harness.cpp: Permission denied\ncompilation terminated.",
    "",
])
def test_a_failure_with_no_diagnostic_in_kernel_cu_is_the_graders(log):
    failure = classify(log, "__global__ void mysgemm() {}\n")
    assert not failure.students and failure.grader_reason


# --- grader faults: grader errors, never "not checked here" ------------------------------------------------


def grader_error_checks(data: dict, words: str) -> None:
    assert data["outcome"] == GRADER_ERROR and data["status"] == "error"
    assert words in data["message"] and "grader error" in data["message"]
    emulated = [c for c in data["checks"] if c["kind"] == "case" and not c["needs_gpu"]]
    assert len(emulated) == 21 and all(c["status"] == ERROR and words in c["message"] for c in emulated)
    assert checkable_max(data) == CHECKABLE


@pytest.mark.parametrize("make, words", [
    (lambda tmp: tmp / "no" / "such" / "g++", "No such file or directory"),
    (lambda tmp: not_executable(tmp / "g++"), "Permission denied"),
])
def test_a_compiler_that_cannot_run_is_a_grader_error(tmp_path, monkeypatch, make, words):
    monkeypatch.setenv("CXX", str(make(tmp_path)))
    assert main([str(SUBMISSIONS / "good_basic"), "--backend", "cpu", "-o", str(tmp_path / "out")]) == 0
    grader_error_checks(json.loads((tmp_path / "out" / "good_basic.json").read_text()), words)


def not_executable(path):
    path.write_text("#!/bin/sh\nexec g++ \"$@\"\n")
    path.chmod(0o644)
    return path


def private_compiler(tmp_path):
    """A g++ wrapper in a folder only this user may open (as a clone in `mktemp -d` is)."""
    folder = tmp_path / "private"
    (folder / "bin").mkdir(parents=True)
    wrapper = folder / "bin" / "g++"
    wrapper.write_text("#!/bin/sh\nexec /usr/bin/g++ \"$@\"\n")
    wrapper.chmod(0o755)
    folder.chmod(0o700)
    return wrapper


def unique_kernel(tmp_path, name="student"):
    """good_basic with a comment of its own, so no emulator build cached by another test is reused."""
    folder = tmp_path / "class" / name
    folder.mkdir(parents=True)
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    (folder / "kernel.cu").write_text(f"// {tmp_path}\n{source}")
    return folder.parent


def test_a_compiler_the_sandbox_cannot_run_is_a_grader_error_and_resume_grades_it_again(tmp_path, sandbox):
    """As root the sandbox runs g++ as a uid of its own, which cannot enter a mode-700 folder: the build fails
    for the grader's reason. The row is a grader error with that reason, its grade empty in every export; the
    same batch with a compiler that works and --resume grades it."""
    import os

    out, klass = tmp_path / "out", unique_kernel(tmp_path)
    env = {**os.environ, "CXX": str(private_compiler(tmp_path))}
    finished = grade_cli("batch", klass, "-o", out, "--without-gpu", "scale", env=env)
    assert finished.returncode == 0, finished.stderr
    stored = json.loads((out / "students" / "student.json").read_text())
    canvas = rows(out / "canvas.csv")[1]["SGEMM lab"]
    if not sandbox.drop_uid:  # the sandbox runs as this user, who may enter the folder: nothing failed
        assert stored["outcome"] == GRADED and stored["score"] == EVERY_POINT and canvas == "100"
        return
    # The sandbox checks what its uid must reach before starting g++: the reason names the compiler.
    grader_error_checks(stored, f"cannot run {tmp_path / 'private' / 'bin' / 'g++'}")
    assert canvas == "" and "grading broke (grader error)" in (out / "canvas-notes.txt").read_text()
    assert rows(out / "grades.csv")[1]["total"] == ""
    finished = grade_cli("batch", klass, "-o", out, "--without-gpu", "scale", "--resume")
    assert finished.returncode == 0 and "1 graded now" in " ".join(finished.stdout.split())
    stored = json.loads((out / "students" / "student.json").read_text())
    assert stored["outcome"] == GRADED and stored["score"] == EVERY_POINT
    assert all(c["status"] == PASSED for c in stored["checks"] if not c["needs_gpu"])
    assert rows(out / "canvas.csv")[1]["SGEMM lab"] == "100"



def test_a_sandbox_that_cannot_start_stops_the_run_before_grading_anyone(tmp_path, sandbox):
    """A TMPDIR only this user may open keeps the sandbox's own uid (as root) out of every grading folder: the
    level this machine allows cannot be had, so `grade` says so and why, exits 2 and writes no result, rather
    than grading at a weaker level or blaming the student ("tile size not defined", "not checked here")."""
    import os

    private = tmp_path / "private-tmp"
    private.mkdir(mode=0o700)
    out = tmp_path / "out"
    finished = grade_cli(SUBMISSIONS / "good_basic", "-o", out,
                         env={**os.environ, "PATH": "/usr/bin:/bin", "TMPDIR": str(private)})
    if not sandbox.drop_uid:  # the sandbox runs as this user, who may open the folder: nothing failed
        assert finished.returncode == 0, finished.stderr
        assert json.loads((out / "good_basic.json").read_text())["outcome"] == GRADED
        return
    assert finished.returncode == 2
    assert "sandbox would not start" in finished.stderr and f"cannot enter {private}" in finished.stderr
    assert not (out / "good_basic.json").exists()


# --- on a GPU the same kernels get their real grade ------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_the_correct_inline_ptx_kernel_gets_full_marks(graders):
    result = graders("gpu")(SUBMISSIONS / CORRECT)
    assert result.outcome == GRADED and result.score == result.max_score == 100, \
        [(c.name, c.status, c.message[:120]) for c in result.checks if not c.passed]


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_the_wrong_inline_ptx_kernel_fails_the_cases_with_a_second_phase(graders):
    result = graders("gpu")(SUBMISSIONS / WRONG)
    cases = {c.name: c for c in result.checks if c.kind == "case"}
    assert result.outcome == GRADED and result.score < result.max_score
    assert cases["square_16"].passed and not cases["square_64"].passed
