"""The timing check of a grade without a GPU, decided by the speed model (issue 49), end to end on the CPU
emulator: each corpus kernel gets the verdict a GPU gives it, or is held where the estimate is too near the
limit. What the GPU says of each (tests/submissions/README.md, tests/feedback_kernels/): the tiled kernels
run about as fast as the reference; slow_uncoalesced takes several times its time on an H100; a 32-way
bank conflict in the inner loop is slower still. bench/speed_model_agreement.py checks every verdict against
a GPU's measurement (and tests/test_speed_model_gpu.py asserts it there).
"""
from dataclasses import replace

import pytest
from conftest import ROOT, SUBMISSIONS, make_grader
from hardware import needs_cxx, needs_nvcc

from grader.config import load_config
from grader.diagnose.speed import timing_without_gpu
from grader.execute.confine.sandbox import detect
from grader.on_cpu import MODELLED_NOTE, NEEDS_GPU_TIMING
from grader.result import CASE, FAILED, PASSED, SKIPPED, TIMING, passed, skipped

pytestmark = needs_cxx
FEEDBACK = ROOT / "tests" / "feedback_kernels"
PASS = ["good_basic", "good_tile32_macro_sync", "bank_conflict_padded", "uncoalesced_c_store"]
FAIL = {"slow_uncoalesced": "line 22: 8-way bank conflict on As", "bank_conflict_tile": "line 22: 32-way bank "
        "conflict on Bs"}
# Within a margin of the limit: tile 8's loads touch a line per row of 8 floats, the untiled kernel reads
# global memory for every multiply-add, a tile load walks down columns.
HELD = ["uncoalesced_a_load", "uncoalesced_b_load", "untiled_no_macro", "good_tile8_renamed"]


@pytest.fixture(scope="module")
def grade(quick_config_file):
    """Graded on the CPU with a few cases (the model needs them passed, not many of them)."""
    grader = make_grader(quick_config_file, "cpu")
    grader.prefetch([SUBMISSIONS / name for name in [*PASS, *FAIL, *HELD]] + [FEEDBACK / "uncoalesced"])
    return grader


def timing_of(result):
    return next(check for check in result.checks if check.kind == TIMING)


def test_the_reference_kernel_passes_by_the_estimate(grade, tmp_path):
    folder = tmp_path / "reference"
    folder.mkdir()
    (folder / "kernel.cu").write_text((ROOT / "reference" / "kernel.cu").read_text())
    result = grade(folder)
    timing = timing_of(result)
    assert timing.status == PASSED and timing.score == timing.max_score
    assert timing.metrics["estimated"] and timing.metrics["modelled_ratio"] == pytest.approx(1.0)
    assert timing.message.startswith("estimated without a GPU: on an NVIDIA H200 your kernel would take about 1.00×")
    assert result.message.startswith(MODELLED_NOTE)


@pytest.mark.parametrize("name", PASS)
def test_kernels_about_as_fast_as_the_reference_pass(grade, name):
    timing = timing_of(grade(SUBMISSIONS / name))
    assert timing.status == PASSED and timing.metrics["modelled_ratio"] <= 1.25, timing.message


@pytest.mark.parametrize("name, why", FAIL.items())
def test_uncoalesced_and_bank_conflicted_kernels_fail_and_are_told_at_which_line(grade, name, why):
    timing = timing_of(grade(SUBMISSIONS / name))
    assert timing.status == FAILED and timing.metrics["modelled_ratio"] >= 3.2
    assert "too slow; most of its time goes to shared-memory and L1 accesses" in timing.message
    assert why in timing.message


def test_the_line_that_costs_the_most_time_is_named_first(grade):
    """Its tile loads walk down columns (lines 14, 15) and so does its inner loop's read of As (line 17), run
    16 times as often: that one is said first."""
    timing = timing_of(grade(FEEDBACK / "uncoalesced"))
    assert timing.status == FAILED
    assert "Why it is slower: line 17: 8-way bank conflict on As: each warp's read of As" in timing.message


@pytest.mark.parametrize("name", HELD)
def test_kernels_near_the_limit_are_held_for_a_gpu(grade, name):
    timing = timing_of(grade(SUBMISSIONS / name))
    assert timing.status == SKIPPED and timing.needs_gpu == NEEDS_GPU_TIMING
    assert 1.25 < timing.metrics["modelled_ratio"] < 3.2
    assert timing.message.startswith("not decided without a GPU")


@needs_nvcc
def test_a_kernel_using_local_memory_is_held_not_passed(quick_config_file):
    """The emulator does not see local memory: a pass that ignores it could be wrong, a hold cannot."""
    timing = timing_of(make_grader(quick_config_file, "cpu")(FEEDBACK / "local_array"))
    assert timing.status == SKIPPED and "bytes of local memory per thread" in timing.message


def test_under_hold_and_after_a_failed_case_the_model_decides_nothing(quick_config_file):
    config = load_config(quick_config_file)
    held = skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu=NEEDS_GPU_TIMING)
    case = passed("square_16", CASE, 3)
    holding = replace(config, timing=replace(config.timing, without_gpu="hold"))
    assert timing_without_gpu(held, [case], {}, 16, b"", [], holding, detect()) is held
    wrong = replace(case, status=FAILED, score=0)
    timing = timing_without_gpu(held, [case, wrong], {}, 16, b"", [], config, detect())
    assert timing.status == SKIPPED and not timing.needs_gpu and "1 of 2 cases failed" in timing.message
