"""What each of a grade's processes imports before it does anything (issue 50): every module a process imports at
its start is paid on every grade, and in a batch once per student. A module-level import added for a command
or a stage the process never reaches would silently slow them all; these keep the start to what it needs."""
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from hardware import needs_gpu


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement` (run from the project, as `grade` is)."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(finished.stdout))


def within(found: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {name for name in found if any(name == p or name.startswith(p + ".") for p in prefixes)}


# Imported by `grade PATH` only where a class, a cluster, the service, a regrade or an LMS export is asked for, or
# where a GPU grade runs its tools; importlib.metadata only where a copy of the Python is made for the sandbox; Rich
# and the reporters once the first grade's children have started (cli.py: what precedes their start delays them).
NOT_AT_GRADE_START = ("grader.classroom", "grader.serve", "grader.on_gpu", "grader.diagnose", "grader.pipeline",
                      "grader.report.summary_html", "grader.report.regrade_csv",
                      "grader.report.prairielearn", "grader.report.grades_csv", "grader.intake.intake",
                      "grader.execute.confine.sandbox", "importlib.metadata", "numpy", "distributed", "fastapi",
                      "rich", "grader.report.terminal", "grader.report.json_report", "grader.report.junit_report")


def test_the_grade_command_starts_without_what_a_grade_does_not_need_first():
    found = loaded_after("import grader.cli")
    assert "grader.cli" in found and "argparse" in found  # the command itself did load
    assert within(found, NOT_AT_GRADE_START) == set()


def test_a_cpu_grade_imports_no_gpu_stage_nor_sanitizer_module():
    found = loaded_after("import grader.pipeline, grader.rubric")
    assert within(found, ("grader.on_gpu", "grader.diagnose.run", "grader.diagnose.checks", "grader.diagnose.groups",
                          "grader.diagnose.sanitizer_log", "importlib.metadata")) == set()


@pytest.mark.parametrize("child", ["grader.execute.gpu.child", "grader.execute.cpu.harness_driver"])
def test_a_child_starts_without_the_parents_sandbox_set_up(child):
    """The children run inside the sandbox: the parent's set-up of it (the reachable copies, the distributions
    they list) is not theirs to import. The GPU child does not build sandboxes at all."""
    found = loaded_after(f"import {child}")
    assert child in found
    assert within(found, ("importlib.metadata", "grader.classroom", "grader.report", "grader.diagnose")) == set()
    if child == "grader.execute.gpu.child":
        assert within(found, ("grader.execute.confine.sandbox", "grader.execute.confine.reachable")) == set()


def test_the_grade_command_caps_its_blas_threads_before_numpy_loads():
    """The grade process's numpy computes truths on a thread while its children start: OpenBLAS's default, a thread
    per core spinning after every call, took the cores the emulator's workers and the GPU child needed (on the
    H200 host, the parents of four GPU grades used 29 CPU-s while the settings were lost). Where the user set
    nothing, `grade` (console script and `python -m grader`, both grader.startup) sets them before numpy loads."""
    code = ("import os, sys, grader.startup; assert 'numpy' not in sys.modules; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OPENBLAS_THREAD_TIMEOUT'])")
    unset = {name: value for name, value in os.environ.items() if not name.startswith(("OPENBLAS_", "MKL_"))}
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=unset)
    assert finished.returncode == 0, finished.stderr
    threads, timeout = finished.stdout.split()
    assert 1 <= int(threads) <= 4 and timeout == "4"


# What a whole `grade PATH` (child and report included) must still not import: the class's and the LMS's exports,
# the class, the service, Nsight Compute's profile (--profile's). Each was imported by every grade once; an import
# of one added back would slow every grade again. A CPU grade imports none of the GPU's stages nor
# importlib.metadata either (a GPU grade does: its tools, and the child's bytecode, bytecode.py).
NOT_IN_A_GRADE = ("grader.report.exports", "grader.report.canvas_csv", "grader.report.grades_csv",
                  "grader.report.prairielearn", "grader.report.summary_html", "grader.report.regrade_csv",
                  "grader.classroom", "grader.serve", "grader.diagnose.profile", "grader.diagnose.ncu_csv",
                  "distributed", "fastapi")
# A GPU grade reads the installed distributions (the sandbox's view of the GPU child's packages): importlib.metadata,
# which imports csv for their RECORD files. A CPU grade imports neither.
NOT_IN_A_CPU_GRADE = ("grader.on_gpu", "grader.diagnose.run", "grader.diagnose.sanitizer_log", "importlib.metadata",
                      "csv")


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, needs_gpu])])
def test_a_whole_grade_imports_none_of_what_only_a_class_or_an_lms_needs(quick_config_file, tmp_path, backend):
    code = (f"import sys, json\nfrom grader.cli import main\n"
            f"code = main([{str(ROOT / 'tests' / 'submissions' / 'good_basic')!r}, '--config', "
            f"{str(quick_config_file)!r}, '--backend', {backend!r}, '-o', {str(tmp_path)!r}])\n"
            "print(json.dumps([code, sorted(sys.modules)]))")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    exit_code, found = json.loads(finished.stdout.splitlines()[-1])
    assert exit_code == 0 and json.loads((tmp_path / "good_basic.json").read_text())["score"] > 0  # it did grade
    assert "grader.pipeline" in found and f"grader.on_{backend}" in found
    assert within(set(found), NOT_IN_A_GRADE + (NOT_IN_A_CPU_GRADE if backend == "cpu" else ())) == set()
