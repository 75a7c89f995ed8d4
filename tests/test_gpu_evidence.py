"""Advice only from evidence, on a real GPU (issue 29): the GPU twins of test_cpu_grading.py's evidence tests.

The GPU child records no writer of C and no shared-memory access, so what it says comes from the values
alone: which wrong elements were never written (C's poison), which are NaN the kernel stored (shared memory
is poisoned at each block's entry: a tile never loaded reads NaN), how far off the rest are, and right sums
stored at the wrong place. None of these kernels lacks a barrier, and none is told to add one.
Marked `gpu`; skipped cleanly where there is no NVIDIA GPU or no pycuda.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu

from grader.result import ERROR, FAILED, PASSED

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.fixture(scope="module")
def grade_one(graders):
    return graders("gpu")


def cases_of(name: str, grade_one) -> dict:
    return {c.name: c for c in grade_one(SUBMISSIONS / name).checks if c.kind == "case"}


def no_barrier_advice(case) -> bool:
    return "__syncthreads" not in " ".join(case.fixes) and "add the barrier" not in case.explained


def test_c_index_collision_is_right_sums_at_the_wrong_place(grade_one):
    cases = cases_of("c_index_collision", grade_one)
    assert cases["square_512"].status == PASSED and cases["ragged_m"].status == PASSED  # n == k
    for name in ("ragged_n", "rect_wide"):  # k < n: threads store other elements' sums over one another
        case = cases[name]
        assert case.status == FAILED and "never written" in case.message, name
        # the emulator beside the GPU saw which threads stored one element: that explains it, on both engines
        assert "both store C[" in case.message and "(line 23)" in case.message, name
        # and the stride it stored with: the one cause, as on the CPU
        assert case.fixes == ["line 23 stores C[row * k + col]: C's rows are n long, so its element [row][col] is "
                              "C[row * n + col]"], name
        assert "the result depends on the order the threads run in" not in case.message, name
    assert all(no_barrier_advice(c) for c in cases.values())


def test_block_shape_mismatch_reads_unloaded_tiles_and_leaves_rows_unwritten(grade_one):
    cases = cases_of("block_shape_1d", grade_one)
    for case in cases.values():
        assert case.status == FAILED, case.name
        assert no_barrier_advice(case), case.name
    square = cases["square_64"]  # rows with threadIdx.y > 0 are never stored; the rest sum NaN from sB
    assert "never written" in square.message and "NaN or infinite, stored by the kernel" in square.message


def test_tile_never_loaded_stores_nan_and_is_not_told_as_unwritten(grade_one):
    cases = cases_of("tile_never_loaded", grade_one)
    for case in cases.values():
        assert case.status == FAILED, case.name
        assert "NaN or infinite, stored by the kernel" in case.message and "never written" not in case.message
        assert no_barrier_advice(case)


def test_read_past_b_fails_the_cases_where_m_is_larger_than_n(grade_one):
    cases = cases_of("b_stride_m", grade_one)
    assert cases["square_512"].status == PASSED
    tall = cases["rect_tall"]  # reads past B's end: the emulator beside the GPU names the element, as on the CPU
    assert tall.status == ERROR and "out-of-bounds read of B at line 16" in tall.message
    assert ("reads B[23][0] (B[(ph * TILE_WIDTH + ty) * m + Col] at line 16) in rows m = 300 long, where B's rows are "
            "n = 40 long; that is past B's end") in tall.message
    assert no_barrier_advice(tall)


def test_unwritten_cells_are_told_as_unwritten_not_a_tiny_max_error(grade_one):
    cases = cases_of("store_bounds_swapped", grade_one)
    assert cases["square_512"].status == PASSED
    wide = cases["rect_wide"]
    assert wide.message.startswith("C = A×B with m=40, n=300, k=170: 10400 of 12000 elements of C are wrong: all "
                                   "never written (they still hold the NaN the grader fills C with)")
    assert "max abs error" not in wide.message and "off by" not in wide.message
