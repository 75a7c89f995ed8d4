"""nvcc's GPU-less compile check (execute/nvcc/without_gpu.py): a failure is the student's "compile error" only
with evidence in their files (build_failure.py, the rule the CPU emulator's build follows); nvcc that cannot
run is the grader's error, graded again by --resume, never a compile error charged to the student.
"""
import os

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_nvcc

from grader.build_failure import NVCC_EVIDENCE, classify
from grader.cases import load_cases
from grader.classroom.batch import BatchOptions, run_batch
from grader.config import load_config
from grader.execute.nvcc.compile import nvcc_path
from grader.pipeline import RunPlan, grade
from grader.result import COMPILE_ERROR, ERROR, GRADED, GRADER_ERROR

pytestmark = [needs_nvcc]


@pytest.fixture
def nvcc_the_sandbox_cannot_run(tmp_path, monkeypatch):
    """nvcc first on PATH where the parent finds it and the sandbox cannot run it: a real misinstalled grader.
    As root: through a folder only the grading user can enter (mode 700, as a private clone or /root is), which
    the sandbox's own uid cannot. Otherwise (the sandbox runs as the grading user): a wrapper whose interpreter
    lies outside what the sandbox shows."""
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    private.chmod(0o700)
    nvcc = private / "bin" / "nvcc"
    if os.geteuid() == 0:
        os.symlink(os.path.realpath(nvcc_path()), nvcc)
    else:
        (tmp_path / "outside").mkdir()
        os.symlink("/bin/sh", tmp_path / "outside" / "sh")
        nvcc.write_text(f"#!{tmp_path / 'outside' / 'sh'}\nexec {os.path.realpath(nvcc_path())} \"$@\"\n")
        nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{private / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert nvcc_path() == str(nvcc)


@pytest.fixture(scope="module")
def cases(config_file):
    return [c for c in load_cases(load_config(config_file).testcases_dir) if c.on_cpu == "whole"][:2]


def compiled(result):
    return next(c for c in result.checks if c.kind == "compile")


@pytest.mark.parametrize("backend", [None, pytest.param("cpu", marks=needs_cxx)])
def test_nvcc_that_cannot_run_is_a_grader_error(nvcc_the_sandbox_cannot_run, config_file, cases, backend):
    result = grade(SUBMISSIONS / "good_basic", load_config(config_file), cases, RunPlan(backend))
    assert result.outcome == GRADER_ERROR, result.checks
    assert compiled(result).status == ERROR
    assert "not the student's" in result.message and "--resume" in result.message
    assert "compile error" not in compiled(result).message


@pytest.mark.parametrize("backend", [None, pytest.param("cpu", marks=needs_cxx)])
def test_a_real_compile_error_stays_the_students(config_file, cases, backend):
    result = grade(SUBMISSIONS / "compile_error", load_config(config_file), cases, RunPlan(backend))
    assert result.outcome == COMPILE_ERROR
    assert compiled(result).message.startswith("compile error:\nline ")


def test_too_much_shared_memory_is_the_students_though_no_line_is_named(tmp_path, config_file, cases):
    """ptxas refuses the kernel (it names the student's function, not a line): the student's compile error."""
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "kernel.cu").write_text(source.replace("__shared__ float As[TILE_SIZE][TILE_SIZE];",
                                                               "__shared__ float As[TILE_SIZE][TILE_SIZE * 64];"))
    result = grade(tmp_path / "big", load_config(config_file), cases, RunPlan(None))
    assert result.outcome == COMPILE_ERROR, compiled(result).message
    assert "shared" in compiled(result).message


def test_a_grader_error_of_the_compile_check_is_graded_again_by_resume(nvcc_the_sandbox_cannot_run, tmp_path,
                                                                      config_file, cases, monkeypatch):
    from rich.console import Console

    config = load_config(config_file)
    out = tmp_path / "out"
    options = BatchOptions(outdir=out, resume=True, jobs=1)
    first = run_batch([SUBMISSIONS / "good_basic"], config, cases, RunPlan(None), options, Console(quiet=True))
    assert [r.outcome for r in first.results] == [GRADER_ERROR]
    monkeypatch.undo()  # nvcc on PATH as installed: the fault is fixed
    again = run_batch([SUBMISSIONS / "good_basic"], config, cases, RunPlan(None), options, Console(quiet=True))
    assert again.graded_now == 1 and [r.outcome for r in again.results] == [GRADED]


@pytest.mark.parametrize("log, students", [
    ('kernel.cu(12): error: identifier "x" is undefined\n1 error detected', True),
    ("kernel.cu:12:5: error: 'x' was not declared in this scope", True),
    ('tiling.cuh(3): error: expected a ";"', True),
    ("ptxas error   : Entry function '_Z7mysgemmiiiPKfS0_Pf' uses too much shared data (0x40800 bytes, 0xc000 max)",
     True),
    ('"<grader: tile size probe>"(1): error: expression must have a constant value', True),
    ("nvcc fatal   : Could not open output file '/tmp/tmpxft_0000_kernel.cpp1.ii'", False),
    ("prlimit: failed to execute /root/grader/bin/nvcc: Permission denied", False),
    ("", False),
])
def test_whose_failure_from_nvccs_own_words(log, students):
    assert classify(log, "", ["tiling.cuh"], NVCC_EVIDENCE).students is students


# --- the check's verdicts are kept (check_cache.py) ------------------------------------------------------------


def check(cache_dir, sandbox, source, contract=None):
    from grader.execute.nvcc import check_cache

    return check_cache.checked(cache_dir, source, "sm_90", ["-lineinfo"], 60, sandbox, contract)


def entries(cache_dir):
    return sorted((cache_dir / "compile-check").glob("*.json"))


A_SANDBOX_THAT_CANNOT_START = dict(level="namespaces", bwrap="/nonexistent/bwrap")


def test_the_same_file_is_compiled_once(tmp_path, sandbox):
    from grader.execute.confine.sandbox import Sandbox

    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    first = check(tmp_path, sandbox, source)
    assert first.ok and len(entries(tmp_path)) == 1
    # A sandbox that cannot start would make any nvcc run a grader fault: the verdict comes from the cache.
    again = check(tmp_path, Sandbox(**A_SANDBOX_THAT_CANNOT_START), source)
    assert again == first
    changed = check(tmp_path, Sandbox(**A_SANDBOX_THAT_CANNOT_START), source.replace("sum", "total"))
    assert changed.grader_fault and len(entries(tmp_path)) == 1  # another text misses, and a fault is not kept


def test_a_compile_error_is_kept_with_its_message_and_a_damaged_entry_is_compiled_again(tmp_path, sandbox):
    from grader.execute.confine.sandbox import Sandbox

    source = (SUBMISSIONS / "compile_error" / "kernel.cu").read_text()
    first = check(tmp_path, sandbox, source)
    assert not first.ok and first.message.startswith("compile error:\nline ")
    assert check(tmp_path, Sandbox(**A_SANDBOX_THAT_CANNOT_START), source) == first
    [entry] = entries(tmp_path)
    entry.write_text('{"ok": true, "message": ')  # cut short
    assert check(tmp_path, sandbox, source) == first
    assert entry.read_text().startswith('{"ok": false')
