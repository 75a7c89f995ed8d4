"""On a GPU machine: the large cases are explained by the emulator's evidence from the blocks it ran (issue 47).

A GPU grade runs the CPU emulator beside the GPU child on every case, the large ones by sampled blocks (every
edge block, a seeded sample of the interior ones). A large case that fails is then told by what the emulator saw
in those blocks, in the same words and with the same fix as the small cases, so one bullet lists every case a
cause explains; safety in a large case is judged in those blocks; and where the emulator saw nothing wrong in
its blocks while the GPU did, the case says so rather than contradicting the GPU.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.judge.findings import OUT_OF_BOUNDS_READ
from grader.report.student_view import what_to_fix
from grader.result import PASSED

pytestmark = [pytest.mark.gpu, needs_gpu, needs_cxx]
LARGE = ("square_512", "large_ragged", "large_hidden")


def cases_of(result) -> dict:
    return {check.name: check for check in result.checks if check.kind == "case"}


def test_a_wrong_bound_in_large_ragged_is_told_by_the_emulators_evidence_on_the_gpu(graders):
    gpu = graders("gpu")(SUBMISSIONS / "b_column_unbounded")
    cases = cases_of(gpu)
    large, small = cases["large_ragged"], cases["ragged_n"]
    assert large.metrics.get("emulator") is not None, large.message  # the emulator ran it, by sampled blocks
    assert "out-of-bounds read of B at line 19" in large.message, large.message
    assert OUT_OF_BOUNDS_READ in large.unsafe and large.unsafe == small.unsafe and large.fixes == small.fixes
    told = [fix for fix in what_to_fix(gpu, show_hidden=True) if "large_ragged" in fix]
    assert len(told) == 1 and "ragged_n" in told[0], what_to_fix(gpu, show_hidden=True)


def test_the_gpu_report_has_the_cpu_reports_bullets_for_a_kernel_wrong_in_the_large_cases(graders):
    for name in ("b_column_unbounded", "truncated_phases", "missing_load_barrier", "b_wrong_stride"):
        gpu, cpu = graders("gpu")(SUBMISSIONS / name), graders("cpu")(SUBMISSIONS / name)
        assert what_to_fix(gpu, show_hidden=True) == what_to_fix(cpu, show_hidden=True), name


def test_a_correct_kernels_large_cases_pass_on_both_engines(graders):
    gpu = graders("gpu")(SUBMISSIONS / "good_basic")
    for name in LARGE:
        check = cases_of(gpu)[name]
        assert check.status == PASSED and check.metrics.get("emulator") == PASSED, check.message


def test_where_the_emulators_blocks_miss_what_the_gpu_found_the_case_says_so(graders):
    """trap_one_interior_block traps in block (9, 11) only: every large grid holds it, and the GPU faults; where
    the emulator's sample left that block out, the case says the emulator's blocks were right, not that the
    engines disagree on them."""
    cases = cases_of(graders("gpu")(SUBMISSIONS / "trap_one_interior_block"))
    for name in LARGE:
        check = cases[name]
        assert check.status != PASSED, check.message
        if check.metrics.get("emulator") == PASSED:
            assert "and saw nothing wrong in them: what the GPU found lies in blocks it did not run" in check.message
            assert "differs" not in check.message


def test_a_large_case_wrong_only_where_the_sample_missed_is_run_again_on_the_gpus_wrong_blocks(graders):
    """wrong_in_one_interior_block adds 1 in block (9, 11) only: the GPU finds those elements wrong in every large
    case; the emulator then runs the tiles holding them beside its sample, and fails the case as the GPU does."""
    cases = cases_of(graders("gpu")(SUBMISSIONS / "wrong_in_one_interior_block"))
    for name in LARGE:
        check = cases[name]
        assert check.status != PASSED and check.metrics.get("emulator") == check.status, check.message
        assert "differs" not in check.message and "blocks it did not run" not in check.message, check.message
