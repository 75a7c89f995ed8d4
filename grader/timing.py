"""The timing verdict: the student's median time against the reference's, measured side by side."""
from __future__ import annotations

import statistics

from .result import TIMING, CheckResult, failed, passed

NAME = "speed vs reference"


def implausible(ratio: float, gflops: float, peak_gflops: float | None, min_ratio: float) -> str:
    """Why a measured time cannot be honest, or ''."""
    if peak_gflops and gflops > peak_gflops:
        return f"{gflops:.0f} GFLOP/s is above this GPU's FP32 peak of {peak_gflops:.0f} GFLOP/s"
    if ratio < min_ratio:
        return f"{1 / ratio:.1f}× faster than the reference tiled kernel (more than {1 / min_ratio:g}×)"
    return ""


def judge_timing(measured: dict, points: float, max_ratio: float, min_ratio: float = 0.25) -> CheckResult:
    m, n, k = measured["m"], measured["n"], measured["k"]
    if measured["wrong_launches"]:
        return failed(NAME, TIMING, points,
                      f"the output was wrong in {measured['wrong_launches']} of {measured['launches']} timed "
                      f"launches on {m}×{n}×{k} (first at launch {measured['first_wrong_launch']}): a kernel must "
                      "compute the full product on every call", metrics={"wrong_launches": measured["wrong_launches"]})
    student = statistics.median(measured["student_ms"])
    reference = statistics.median(measured["reference_ms"])
    ratio = student / reference
    gflop = 2.0 * m * n * k / 1e9
    metrics = {"student_ms": round(student, 4), "reference_ms": round(reference, 4), "ratio": round(ratio, 3),
               "student_gflops": round(gflop / (student / 1e3), 1),
               "reference_gflops": round(gflop / (reference / 1e3), 1), "max_ratio": max_ratio}
    summary = (f"{m}×{n}×{k}: your kernel {student:.3f} ms ({metrics['student_gflops']:.0f} GFLOP/s), "
               f"reference {reference:.3f} ms ({metrics['reference_gflops']:.0f} GFLOP/s): "
               f"{ratio:.2f}× the reference's time (limit {max_ratio:g}×)")
    flag = implausible(ratio, metrics["student_gflops"], measured.get("peak_gflops"), min_ratio)
    if flag:
        metrics["flagged_for_review"] = flag
        summary += f"\nflagged for review by your instructor: {flag}"
    if ratio <= max_ratio:
        return passed(NAME, TIMING, points, summary, metrics=metrics)
    return failed(NAME, TIMING, points, summary + ": too slow. Check that each thread reads its tiles from "
                  "shared memory and that global loads are coalesced (threadIdx.x along a row)", metrics=metrics)
