"""The known-submission corpus through every stage that needs no GPU: static check and compilation."""
import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_nvcc

from grader.config import load_config
from grader.execute.compile import compile_check
from grader.result import FAILED, PASSED
from grader.static_check import find_kernels, static_checks

POINTS = {"shared_tiles": 2, "load_barrier": 4, "use_barrier": 4}
LOAD, USE, TILES = "barrier after loading tiles", "barrier after using tiles", "shared-memory tiles"
CORRECT = ["good_basic", "good_tile8_renamed", "good_tile32_macro_sync"]


def statics(source: str) -> dict:
    return {c.name: c for c in static_checks(source, "mysgemm", POINTS)}


@pytest.mark.parametrize("path", [SUBMISSIONS / n / "kernel.cu" for n in CORRECT] + [ROOT / "reference/kernel.cu"],
                         ids=lambda p: p.parent.name)
def test_correct_kernels_pass_the_static_check(path):
    source = path.read_text()
    assert find_kernels(source) == ["mysgemm"]
    assert {name: c.status for name, c in statics(source).items()} == {TILES: PASSED, LOAD: PASSED, USE: PASSED}


@pytest.mark.parametrize("name, failing, line", [
    ("missing_load_barrier", {LOAD}, None),
    ("missing_use_barrier", {USE}, None),
    ("barrier_in_comment", {LOAD, USE}, None),
    ("conditional_barrier", {LOAD}, "line 21"),
])
def test_barrier_mistakes_fail_exactly_their_checks(submission_source, name, failing, line):
    checks = statics(submission_source(name))
    assert {n for n, c in checks.items() if c.status == FAILED} == failing
    for check in failing:
        assert "line" in checks[check].message
    if line:
        assert line in checks[LOAD].message and "threadIdx" in checks[LOAD].message


def test_wrong_kernel_name_is_listed(submission_source):
    assert find_kernels(submission_source("wrong_kernel_name")) == ["MySgemm"]


def test_template_is_not_a_solution():
    checks = statics((ROOT / "student_template/kernel.cu").read_text())
    assert checks[LOAD].status == FAILED and checks[USE].status == FAILED


@needs_nvcc
@pytest.mark.parametrize("name", sorted(p.name for p in SUBMISSIONS.iterdir()
                                        if p.is_dir() and p.name not in ("compile_error", "empty")))
def test_corpus_compiles_as_sourcemodule_would(submission_source, name, sandbox):
    config = load_config()
    outcome = compile_check(submission_source(name), "sm_90", config.compile.options, 120, sandbox)
    assert outcome.ok, outcome.message


@needs_nvcc
def test_template_and_reference_compile(sandbox):
    for path in (ROOT / "student_template/kernel.cu", ROOT / "reference/kernel.cu"):
        assert compile_check(path.read_text(), "sm_90", ["-lineinfo"], 120, sandbox).ok


@needs_nvcc
def test_compile_error_is_reported_at_the_students_line(submission_source, sandbox):
    outcome = compile_check(submission_source("compile_error"), "sm_90", ["-lineinfo"], 120, sandbox)
    assert not outcome.ok
    assert 'line 12: error: identifier "threadidx" is undefined' in outcome.message
    assert "/tmp/" not in outcome.message


@needs_nvcc
def test_compile_timeout_is_reported_not_waited_for(submission_source, sandbox):
    outcome = compile_check(submission_source("good_basic"), "sm_90", ["-lineinfo"], timeout=0.01, sandbox=sandbox)
    assert not outcome.ok and outcome.timed_out
    assert outcome.message == "compilation timed out after 0.01 s"
