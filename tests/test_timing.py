"""The timing verdict: ratio to the reference, its spread, re-timing near the limit, wrong timed outputs,
a GPU that slowed down, and implausible speeds flagged."""
from pathlib import Path

import pytest
from hardware import needs_nvcc

from grader.judge.timing import RETIME_FACTOR, judge_timing, needs_retime

ROOT = Path(__file__).resolve().parent.parent


def measured(student_ms, reference_ms=2.0, peak=60000.0, wrong=0, clocks=None):
    student = student_ms if isinstance(student_ms, list) else [student_ms] * 5
    return {"m": 2048, "n": 2048, "k": 2048, "student_ms": student, "reference_ms": [reference_ms] * len(student),
            "launches": 18, "wrong_launches": wrong, "first_wrong_launch": 2 if wrong else None,
            "peak_gflops": peak, "clocks": clocks or {}}


def test_an_honest_time_is_judged_by_its_ratio():
    check = judge_timing([measured(3.0)], 10, max_ratio=2.0)
    assert check.passed and check.metrics["ratio"] == 1.5 and "flagged_for_review" not in check.metrics
    assert not judge_timing([measured(5.0)], 10, max_ratio=2.0).passed


def test_the_spread_of_the_per_repetition_ratios_is_reported():
    check = judge_timing([measured([2.0, 2.4, 3.0, 3.2, 4.0])], 10, max_ratio=2.5)
    assert check.metrics["ratio_spread"] == [1.0, 1.5, 2.0]
    assert "per repetition 1.00–2.00×" in check.message


@pytest.mark.parametrize("times, again", [
    ([3.95] * 5, True),  # 1.975×: within 3% of the 2× limit
    ([3.0, 3.0, 3.0, 3.0, 4.4], True),  # median 1.5×, but one repetition past the limit: the spread straddles it
    ([3.0] * 5, False),  # 1.5×, steady: decided
    ([5.0] * 5, False),  # 2.5×, steady: decided
])
def test_a_measurement_too_close_to_the_limit_is_timed_again(times, again):
    assert needs_retime(measured(times), 2.0) is again


def test_the_second_measurement_decides_and_the_message_says_why_it_was_taken():
    first, second = measured([3.95] * 5), measured([4.2] * 5 * RETIME_FACTOR)
    check = judge_timing([first, second], 10, max_ratio=2.0)
    assert not check.passed and check.metrics["measurements"] == 2 and check.metrics["repetitions"] == 15
    assert "timed again with more repetitions: the first measurement, 1.98×" in check.message


def test_a_gpu_that_slowed_down_is_flagged():
    clocks = {"samples": 40, "slowdowns": ["hardware thermal slowdown"], "sm_clock_mhz": [1100, 1980]}
    check = judge_timing([measured(3.0, clocks=clocks)], 10, max_ratio=2.0)
    assert "hardware thermal slowdown" in check.metrics["throttled"] and "SM clock 1100–1980 MHz" in check.message
    steady = judge_timing([measured(3.0, clocks={"samples": 40, "slowdowns": [], "sm_clock_mhz": [1980, 1980]})],
                          10, max_ratio=2.0)
    assert "throttled" not in steady.metrics and steady.metrics["clocks"]["sm_clock_mhz"] == [1980, 1980]


def test_far_faster_than_the_reference_is_flagged_for_review():
    check = judge_timing([measured(0.2, peak=None)], 10, max_ratio=2.0, min_ratio=0.25)
    assert check.passed and "10.0× faster than the reference" in check.metrics["flagged_for_review"]
    assert "flagged for review" in check.message


def test_above_the_gpus_fp32_peak_is_flagged():
    check = judge_timing([measured(0.6, reference_ms=0.7, peak=20000.0)], 10, max_ratio=2.0)
    assert "above this GPU's FP32 peak" in check.metrics["flagged_for_review"]


def test_a_wrong_timed_output_fails_timing_whatever_the_speed():
    check = judge_timing([measured(0.1, wrong=3)], 10, max_ratio=2.0)
    assert not check.passed and "wrong in 3 of 18 timed launches" in check.message


@needs_nvcc
def test_the_reference_module_with_the_timing_helpers_compiles(tmp_path):
    """The GPU child times with kernels compiled into the reference's module: a typo there would cost every
    student their timing points on the GPU alone, so nvcc checks it here."""
    import subprocess

    from grader.execute.nvcc.compile import COUNT_KERNEL, FILL_KERNEL, nvcc_path, reference_module_source

    source = tmp_path / "reference.cu"
    source.write_text(reference_module_source((ROOT / "reference" / "kernel.cu").read_text()))
    built = subprocess.run([nvcc_path(), "-cubin", "-arch=sm_90", "-o", str(tmp_path / "r.cubin"), str(source)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    symbols = (tmp_path / "r.cubin").read_bytes()
    assert FILL_KERNEL.encode() in symbols and COUNT_KERNEL.encode() in symbols
