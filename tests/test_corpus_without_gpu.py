"""The known-submission corpus through every stage that needs no GPU: static check and compilation."""
import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_nvcc

from grader.config import load_config
from grader.execute.nvcc import check_cache
from grader.execute.nvcc.compile import compile_check
from grader.result import FAILED, PASSED
from grader.source.static_check import find_kernels, static_checks

POINTS = {"shared_tiles": 2, "load_barrier": 4, "use_barrier": 4}
LOAD, USE, TILES = "barrier after loading tiles", "barrier after using tiles", "shared-memory tiles"
CORRECT = ["good_basic", "good_tile8_renamed", "good_tile32_macro_sync"]
# Not compiled whole as they are: broken on purpose, HIP, with a libwb main (its preset leaves that out), or
# including headers of the toolkit's libraries, whose packages this machine may lack (toolkit_headers.py).
NOT_COMPILED_AS_IS = ("compile_error", "empty", "hip_port", "ece408_mp3", "tile_size_from_block",
                      "compile_error_in_macro_line", "include_refused", "include_libwb_folder",
                      "ece408_matrix_multiply", "include_host_libraries", "curand_device_api")


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
                                        if p.is_dir() and p.name not in NOT_COMPILED_AS_IS))
def test_corpus_compiles_as_sourcemodule_would(submission_source, name, sandbox):
    config = load_config()
    # Through the compile check's cache, where a CPU grade of the same file keeps nvcc's verdict: one nvcc run
    # per file for the suite. With the lab's contract, as a grade checks it: a file whose parameters are not
    # the lab's compiled, and is refused after.
    outcome = check_cache.checked(config.cache_dir, submission_source(name), "sm_90", config.compile.options, 120,
                                  sandbox, config.kernel.contract())
    assert outcome.ok or outcome.mismatch, outcome.message


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


@pytest.mark.parametrize("name, words, outcome", [
    ("double_pointers", "mysgemm takes double *A; this lab uses float\nthis lab launches mysgemm(int m, int n, int k, "
                        "const float *A, const float *B, float *C)", "submission error"),
    ("hip_port", "this is HIP code", "compile error"),
    ("wrong_kernel_name", "kernel mysgemm not found; found: MySgemm. Rename MySgemm to mysgemm", "submission error"),
])
def test_a_declaration_the_lab_cannot_launch_is_told_as_such_before_compiling(name, words, outcome):
    """Refused before any compiler runs, on every backend alike, naming the mistake: a declaration the lab
    does not launch is a submission error (the file may well compile), HIP a compile error."""
    from grader.cases import load_cases
    from grader.pipeline import RunPlan, grade
    from grader.result import ERROR

    config = load_config()
    result = grade(SUBMISSIONS / name, config, load_cases(config.testcases_dir), RunPlan(None, "not run: no backend"))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == outcome and compiled.status == ERROR
    assert compiled.message.startswith(words) and "out-of-bounds" not in compiled.message


@pytest.mark.parametrize("declaration, problem", [
    ("int m, int n, int k, const float *A, const float *B, float *C", ""),
    ("const int m, unsigned n, int k, const float* __restrict__ A, const float *B, float *C", ""),
    ("int m, int n, int k, const real *A, const real *B, real *C", ""),  # a typedef: not known to be wrong
    ("int m, int n, const float *A, const float *B, float *C", "mysgemm takes 5 parameters"),
    ("size_t m, int n, int k, const float *A, const float *B, float *C", "parameter 1 is `size_t m`"),
    ("int m, int n, int k, float A, const float *B, float *C", "parameter 4 is `float A`"),
])
def test_the_kernels_declaration_is_checked_against_how_the_lab_launches_it(declaration, problem):
    from grader.contract import KernelContract
    from grader.source.signature import signature_problem

    found = signature_problem(f"__global__ void mysgemm({declaration}) {{}}", KernelContract())
    assert problem in found if problem else found == ""
