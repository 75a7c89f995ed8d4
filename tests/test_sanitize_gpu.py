"""The compute-sanitizer diagnosis on a real GPU: the missing barrier is named, bounds errors are placed."""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu, needs_sanitizer

from grader.diagnose.run import sanitize
from grader.execute.sandbox import detect
from grader.result import FAILED, PASSED

pytestmark = [
    pytest.mark.gpu,
    needs_gpu,
    needs_sanitizer,
]


def diagnose(name: str, tile: int = 16):
    return sanitize((SUBMISSIONS / name / "kernel.cu").read_text(), "mysgemm", tile, 20, None, detect())


@pytest.mark.parametrize("name, barrier", [("missing_load_barrier", "the barrier after loading the tiles"),
                                           ("missing_use_barrier", "the barrier after using the tiles")])
def test_the_missing_barrier_is_named_on_every_run(name, barrier):
    for _ in range(2):
        check = diagnose(name)
        assert check.status == FAILED and "shared-memory race" in check.message and barrier in check.message


def test_out_of_bounds_reads_name_the_buffer_and_line():
    check = diagnose("no_bounds_checks")
    assert check.status == FAILED and "out-of-bounds read of" in check.message and "at line 1" in check.message


def test_a_correct_kernel_is_clean_and_fast():
    check = diagnose("good_basic")
    assert check.status == PASSED, check.message
    assert max(check.metrics[f"{tool}_s"] for tool in ("racecheck", "memcheck", "synccheck")) < 30


def test_a_deadlocking_barrier_costs_the_time_limit_and_is_explained():
    check = diagnose("conditional_barrier")
    assert check.status == FAILED and "__syncthreads()" in check.message
    assert max(check.metrics[f"{tool}_s"] for tool in ("racecheck", "memcheck", "synccheck")) < 25
    print(check.message)  # whether synccheck named line 21 before the hang, for the record
