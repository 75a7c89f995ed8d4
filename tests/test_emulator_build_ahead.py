"""The emulator's build of a new submission, started by the parent while its CPU driver starts (build_ahead.py).

Real g++ in the real sandbox: the driver finds the emulation built and compiles nothing itself, the grade is the
grade it was; two builds of one key compile it once; a compile error reads as the driver alone made it read, and
the build that waited for the one that met it is told it without compiling again; a build ahead nobody waits for
any more is stopped at once.
"""
import contextlib
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader import on_cpu
from grader.cases import Case
from grader.config import load_config
from grader.execute.child_run import run_child
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import build as build_module
from grader.execute.cpu.build import build
from grader.execute.cpu.build_ahead import BuildAhead
from grader.execute.job import Job
from grader.execute.runner import ChildProgram
from grader.intake.submission import read_submission
from grader.pipeline import RunPlan, grade
from grader.plan import CPU, GPU
from grader.result import CASE, COMPILE

pytestmark = needs_cxx
CASES = [Case("square_64", 64, 64, 64, 7, 10), Case("ragged_33", 33, 65, 17, 8, 10)]


def new_student(tmp_path: Path, name: str) -> Path:
    """The corpus kernel as a new student's (a comment makes it a build the cache has never seen)."""
    folder = tmp_path / f"{name}-{time.time_ns()}"
    folder.mkdir()
    source = (SUBMISSIONS / name / "kernel.cu").read_text()
    (folder / "kernel.cu").write_text(f"{source}\n// student {time.time_ns()}\n")
    return folder


def driver_alone(monkeypatch) -> None:
    """The CPU driver as it ran before the parent built ahead: it builds the emulation itself (nothing is started
    as it starts, nor by a CPU grade before its nvcc check)."""
    monkeypatch.setattr(ChildProgram, "cpu_driver",
                        classmethod(lambda cls: cls((sys.executable, "-m", "grader.execute.cpu"))))
    monkeypatch.setattr(on_cpu, "emulation_built_soon", lambda *arguments: contextlib.nullcontext())


def compile_check(result):
    return next(check for check in result.checks if check.kind == COMPILE)


def test_a_new_submissions_cpu_grade_takes_the_emulation_built_ahead_and_grades_as_before(config_file, tmp_path,
                                                                                          monkeypatch):
    config = load_config(config_file)
    student = new_student(tmp_path, "good_basic")
    first = grade(student, config, CASES, RunPlan(CPU))
    # The driver said it found the emulation built, and the parent's build ahead had compiled it.
    assert compile_check(first).metrics["compiled_ahead"] == "parent"
    again = grade(student, config, CASES, RunPlan(CPU))
    assert compile_check(again).metrics["compiled_ahead"] == "no"  # cached by the first grade: nothing built
    driver_alone(monkeypatch)
    alone = grade(new_student(tmp_path, "good_basic"), config, CASES, RunPlan(CPU))
    assert compile_check(alone).metrics["compiled_ahead"] == "no"  # the driver built this new one itself
    for result in (again, alone):
        assert [(c.name, c.status, c.score) for c in result.checks] == [(c.name, c.status, c.score)
                                                                        for c in first.checks]
    assert first.score == first.max_score


# Each with the line tests/submissions/README.md gives its error.
@pytest.mark.parametrize("name, line", [("compile_error", 12), ("compile_error_in_macro_line", 10)])
def test_a_compile_error_reads_as_the_driver_alone_makes_it_read(config_file, tmp_path, monkeypatch, name, line):
    config = load_config(config_file)
    ahead = run_child(read_submission(new_student(tmp_path, name)), config, CASES, CPU, RunPlan(CPU))
    driver_alone(monkeypatch)
    alone = run_child(read_submission(new_student(tmp_path, name)), config, CASES, CPU, RunPlan(CPU))
    assert ahead.emulator_compile_error and alone.emulator_compile_error
    assert ahead.compile_check.status == alone.compile_check.status
    assert ahead.compile_check.message == alone.compile_check.message
    assert f"\nline {line}: error: " in ahead.compile_check.message  # the student's line, not the grader's path
    assert ahead.emulator_log == alone.emulator_log


@pytest.mark.gpu
@needs_gpu
def test_beside_a_gpu_grade_the_emulator_takes_its_unit_built_ahead_and_judges_as_before(config_file, tmp_path,
                                                                                          monkeypatch):
    """The GPU path's emulator (started beside the GPU child) finds a new submission's unit built by the parent;
    its judgment of each case (a race the GPU cannot see) is what the driver alone gave."""
    config = load_config(config_file)
    names = ("good_basic", "missing_use_barrier")
    ahead = {name: grade(new_student(tmp_path, name), config, CASES, RunPlan(GPU)) for name in names}
    driver_alone(monkeypatch)
    alone = {name: grade(new_student(tmp_path, name), config, CASES, RunPlan(GPU)) for name in names}
    for name in names:
        assert compile_check(ahead[name]).metrics["emulator_compiled_ahead"] == "parent", name
        assert compile_check(alone[name]).metrics["emulator_compiled_ahead"] == "no", name
        assert [(c.name, c.status, c.message) for c in ahead[name].checks if c.kind == CASE] == \
            [(c.name, c.status, c.message) for c in alone[name].checks if c.kind == CASE]
    assert ahead["good_basic"].score == ahead["good_basic"].max_score
    assert any(c.kind == CASE and not c.passed for c in ahead["missing_use_barrier"].checks)


def built_in(work: Path, source: str, contract, cache: Path, found: dict, key: str) -> None:
    found[key] = build(source, contract, contract.tile_source(""), cache, work / key, detect(), 120)


def test_two_builds_of_one_submission_at_once_compile_it_once(tmp_path):
    contract = load_config(SUBMISSIONS.parent.parent / "config.yaml").kernel.contract()
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text() + f"\n// {time.time_ns()}\n"
    found: dict = {}
    with scratch_folder("sgemm-test-") as work:
        threads = [threading.Thread(target=built_in, args=(work, source, contract, tmp_path / "cache", found, key))
                   for key in ("one", "other")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert found["one"].binary == found["other"].binary and found["one"].binary.is_file()
    assert sorted(built.compiled for built in found.values()) == [False, True]  # the second waited, then took it
    assert found["one"].state == found["other"].state
    binary = found["one"].binary
    assert not binary.with_name(f"{binary.name}.lock").exists()  # the key's lock went with its build


def test_a_students_compile_error_is_kept_for_the_build_that_waited_and_read_as_it_was(tmp_path):
    contract = load_config(SUBMISSIONS.parent.parent / "config.yaml").kernel.contract()
    source = (SUBMISSIONS / "compile_error" / "kernel.cu").read_text() + f"\n// {time.time_ns()}\n"
    with scratch_folder("sgemm-test-") as work:
        first = build(source, contract, contract.tile_source(""), tmp_path / "cache", work, detect(), 120)
    blocked = tmp_path / "a file"
    blocked.write_text("where the second build's folder would go: a compile there could not even begin")
    second = build(source, contract, contract.tile_source(""), tmp_path / "cache", blocked, detect(), 120)
    assert first.binary is None and "line 12: error: " in first.message
    assert (second.message, second.log) == (first.message, first.log)


# Hours of g++'s constant evaluation (a few billion steps): a compile only a stop ends soon.
SLOW_TO_COMPILE = """
constexpr long spin() { long s = 0; for (long i = 0; i < 200000; ++i) for (long j = 0; j < 200000; ++j) s += j;
                        return s; }
static_assert(spin() != 1, "");
"""


def test_a_build_ahead_nobody_waits_for_is_stopped_at_once_and_keeps_nothing(tmp_path):
    contract = load_config(SUBMISSIONS.parent.parent / "config.yaml").kernel.contract()
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text() + SLOW_TO_COMPILE
    with scratch_folder("sgemm-grade-") as folder:
        folder.chmod(0o711)
        job = Job(student_source="", reference_source="", contract=contract, options=[],
                  cache_dir=str(tmp_path / "cache"), workdir=str(folder), original_source=source,
                  sandbox=asdict(detect()))
        ahead = BuildAhead.start(job, 600, folder)
        deadline = time.monotonic() + 60
        while not ahead.compiles.running and time.monotonic() < deadline:
            time.sleep(0.05)  # until its g++ runs (the harness and the header are made first on a new cache)
        assert ahead.compiles.running
        stopped = time.monotonic()
        ahead.stop()
        assert time.monotonic() - stopped < 5 and not ahead.thread.is_alive()
        assert not ahead.kept_for_the_driver()
        assert not ahead.folder.exists()
    unit = build_module._binary_entry(build_module.compiler(), build_module.emulator_sources(
        source, contract, contract.tile_source("")), None, tmp_path / "cache")
    assert not unit.exists()


def test_the_drivers_deadline_forgives_the_cpu_waits_of_the_build_it_waits_for():
    """A driver asleep on the lock while the parent's g++ waits for a CPU is not spending its own time: the
    compile phase's deadline counts the waits of the processes working beside it, as of its own."""
    import subprocess

    from grader.execute.confine.deadline import Deadline

    spin = "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"  # two on one core: each waits half the time
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    driver = subprocess.Popen(["sleep", "30"])  # asleep, as on the lock: it waits for no CPU
    try:
        alone, beside = Deadline(driver.pid, 0.5), Deadline(driver.pid, 0.5, beside=lambda: [spinners[0].pid])
        time.sleep(1.5)
        assert alone.forgiven() < 0.1
        assert beside.forgiven() > 0.2
    finally:
        for process in (*spinners, driver):
            process.kill()
            process.wait()
