"""One grade, whatever engine: a case passes only when its values are right and the kernel did nothing unsafe
computing them (grader/judge/findings.py's kinds), on the CPU emulator and on a GPU alike.

Each kernel here leaves C right on a GPU and does something unsafe on the way: reads past A's or B's end,
or returns before barriers the rest of its block waits at. The CPU grade has always seen it; a GPU grade now
sees it through the emulator's run beside the GPU's (grader/emulation.py), with the same words.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu, needs_sanitizer

from grader.judge.findings import DIVERGENT_BARRIER, OUT_OF_BOUNDS_READ
from grader.result import CASE, PASSED

RAGGED_N = {"ragged_n", "ragged_all", "rect_tall", "rect_wide", "rect_hidden", "one_by_one", "n_one", "sub_tile",
            "primes_small", "primes_mid"}
LARGE_RAGGED_N = {"large_ragged", "large_hidden"}  # the CPU runs their edge blocks, where n's bound bites
# kernel -> (the unsafe kind, the line it is told at, the emulated cases it must fail; all others pass)
UNSAFE = {
    "loads_check_k_only": (OUT_OF_BOUNDS_READ, None, RAGGED_N | LARGE_RAGGED_N | {"ragged_m", "m_one"}),
    "b_column_unbounded": (OUT_OF_BOUNDS_READ, 19, RAGGED_N | LARGE_RAGGED_N),
    # only a block past both C's last row and its last column returns: m and n both ragged
    "exit_before_barriers": (DIVERGENT_BARRIER, 21, {"ragged_all", "rect_tall", "rect_wide", "rect_hidden",
                                                     "one_by_one", "sub_tile", "primes_small", "primes_mid",
                                                     "large_ragged"}),
}


def emulated_cases(result) -> dict:
    """The cases the emulator runs (the GPU-only ones are left out), by name."""
    return {c.name: c for c in result.checks if c.kind == CASE and not c.needs_gpu and "GPU only" not in c.message}


@needs_cxx
@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unsafe_kernels_fail_exactly_their_unsafe_cases_on_the_cpu(graders, name):
    kind, line, failing = UNSAFE[name]
    cases = emulated_cases(graders("cpu")(SUBMISSIONS / name))
    failed = {case: check.message for case, check in cases.items() if check.status != PASSED}
    assert set(failed) == failing, {case: message for case, message in failed.items() if case not in failing}
    for case in failing:
        assert cases[case].unsafe == [kind], case
        if line is not None:
            assert f"line {line}" in cases[case].message, case


@pytest.mark.gpu
@needs_gpu
@needs_cxx
@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_a_gpu_grade_fails_the_same_cases_with_the_same_words(graders, name):
    """C is right on the GPU in every case: the emulator beside it fails the unsafe ones, word for word."""
    # A large case that passed reads otherwise: the GPU checked every element, the CPU its sampled tiles
    on_cpu = {case: check for case, check in emulated_cases(graders("cpu")(SUBMISSIONS / name)).items()
              if not (check.passed and "checked" in check.metrics)}
    on_gpu = {case: check for case, check in emulated_cases(graders("gpu")(SUBMISSIONS / name)).items()
              if case in on_cpu}
    assert {case: check.status for case, check in on_gpu.items()} == {case: check.status
                                                                      for case, check in on_cpu.items()}
    assert {case: (check.message, check.fixes, check.unsafe) for case, check in on_gpu.items()} == {
        case: (check.message, check.fixes, check.unsafe) for case, check in on_cpu.items()}
    assert all(on_gpu[case].metrics["emulator"] != PASSED for case in UNSAFE[name][2])


@pytest.mark.gpu
@needs_gpu
@needs_sanitizer
def test_where_the_emulator_cannot_run_a_kernel_compute_sanitizer_judges_the_same_cases(graders):
    """inline PTX: the emulator cannot build it, so the tools decide each case's safety on the GPU, alone too."""
    result = graders("gpu")(SUBMISSIONS / "inline_ptx_unbounded")
    emulated = emulated_cases(graders("cpu")(SUBMISSIONS / "inline_ptx_unbounded"))  # held for a GPU there
    cases = {case: check for case, check in emulated_cases(result).items() if case in emulated}
    assert {case for case, check in cases.items() if check.status != PASSED} == RAGGED_N
    for case in RAGGED_N:
        assert cases[case].unsafe == [OUT_OF_BOUNDS_READ] and "compute-sanitizer memcheck" in cases[case].message
    assert all(check.status == PASSED for check in cases.values() if check.name not in RAGGED_N)
    clean = graders("gpu")(SUBMISSIONS / "inline_ptx_correct")
    assert clean.score == clean.max_score and clean.outcome == "graded"


@pytest.mark.gpu
@needs_gpu
@needs_cxx
def test_a_correct_kernel_whose_host_code_uses_cublas_and_curand_gets_full_marks_on_the_gpu_as_on_the_cpu(graders):
    """The library headers its kernel does not use are dropped on every engine (source/toolkit_headers.py)."""
    on_gpu, on_cpu = (graders(backend)(SUBMISSIONS / "include_host_libraries") for backend in ("gpu", "cpu"))
    assert on_gpu.score == on_gpu.max_score, [(c.name, c.message) for c in on_gpu.checks if not c.passed]
    assert on_cpu.score == on_cpu.checkable_max
