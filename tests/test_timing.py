"""The timing verdict: ratio to the reference, wrong timed outputs, and implausible speeds flagged."""
from grader.timing import judge_timing


def measured(student_ms, reference_ms=2.0, peak=60000.0, wrong=0):
    return {"m": 2048, "n": 2048, "k": 2048, "student_ms": [student_ms] * 5, "reference_ms": [reference_ms] * 5,
            "launches": 18, "wrong_launches": wrong, "first_wrong_launch": 2 if wrong else None,
            "peak_gflops": peak}


def test_an_honest_time_is_judged_by_its_ratio():
    check = judge_timing(measured(3.0), 10, max_ratio=2.0)
    assert check.passed and check.metrics["ratio"] == 1.5 and "flagged_for_review" not in check.metrics
    assert not judge_timing(measured(5.0), 10, max_ratio=2.0).passed


def test_far_faster_than_the_reference_is_flagged_for_review():
    check = judge_timing(measured(0.2, peak=None), 10, max_ratio=2.0, min_ratio=0.25)
    assert check.passed and "10.0× faster than the reference" in check.metrics["flagged_for_review"]
    assert "flagged for review" in check.message


def test_above_the_gpus_fp32_peak_is_flagged():
    check = judge_timing(measured(0.6, reference_ms=0.7, peak=20000.0), 10, max_ratio=2.0)
    assert "above this GPU's FP32 peak" in check.metrics["flagged_for_review"]


def test_a_wrong_timed_output_fails_timing_whatever_the_speed():
    check = judge_timing(measured(0.1, wrong=3), 10, max_ratio=2.0)
    assert not check.passed and "wrong in 3 of 18 timed launches" in check.message
