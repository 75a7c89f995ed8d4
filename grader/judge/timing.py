"""The timing verdict: the student's median time against the reference's, measured side by side.

Each repetition times both kernels back to back on the same inputs, so each gives a ratio of its own;
their spread (min, median, max) says how steady the measurement was. A first measurement within 3% of
the limit, or whose spread straddles it, does not decide: the kernel is timed again with more repetitions,
and that measurement decides.
"""
from __future__ import annotations

import statistics

from ..result import TIMING, CheckResult, failed, passed

NAME = "speed vs reference"
CLOSE = 0.03  # a ratio within 3% of the limit is too close to call from one measurement
RETIME_FACTOR = 3  # the second measurement runs this many times the configured repetitions


def implausible(ratio: float, gflops: float, peak_gflops: float | None, min_ratio: float) -> str:
    """Why a measured time cannot be honest, or ''."""
    if peak_gflops and gflops > peak_gflops:
        return f"{gflops:.0f} GFLOP/s is above this GPU's FP32 peak of {peak_gflops:.0f} GFLOP/s"
    if ratio < min_ratio:
        return f"{1 / ratio:.1f}× faster than the reference tiled kernel (more than {1 / min_ratio:g}×)"
    return ""


def ratio_of(measured: dict) -> float:
    return statistics.median(measured["student_ms"]) / statistics.median(measured["reference_ms"])


def spread_of(measured: dict) -> tuple[float, float, float]:
    """min, median and max of the per-repetition ratios."""
    ratios = sorted(s / r for s, r in zip(measured["student_ms"], measured["reference_ms"]) if r > 0)
    return ratios[0], statistics.median(ratios), ratios[-1]


def needs_retime(measured: dict, max_ratio: float) -> bool:
    if measured["wrong_launches"] or not measured["student_ms"]:
        return False
    low, _, high = spread_of(measured)
    return abs(ratio_of(measured) - max_ratio) <= CLOSE * max_ratio or low <= max_ratio <= high


def throttling(clocks: dict) -> str:
    """Why the GPU ran slower than it could during the measurement, or ''."""
    if not clocks.get("slowdowns"):
        return ""
    low, high = clocks.get("sm_clock_mhz", (0, 0))
    return (f"the GPU slowed itself down while timing ({', '.join(clocks['slowdowns'])}; SM clock "
            f"{low}–{high} MHz), so both times may be longer than usual")


def judge_timing(rounds: list[dict], points: float, max_ratio: float, min_ratio: float = 0.25) -> CheckResult:
    """The last measurement decides; an earlier one is said, with why it was not enough."""
    measured = rounds[-1]
    m, n, k = measured["m"], measured["n"], measured["k"]
    if measured["wrong_launches"]:
        return failed(NAME, TIMING, points,
                      f"the output was wrong in {measured['wrong_launches']} of {measured['launches']} timed "
                      f"launches on {m}×{n}×{k} (first at launch {measured['first_wrong_launch']}): a kernel must "
                      "compute the full product on every call", metrics={"wrong_launches": measured["wrong_launches"]})
    student = statistics.median(measured["student_ms"])
    reference = statistics.median(measured["reference_ms"])
    ratio = student / reference
    low, middle, high = spread_of(measured)
    gflop = 2.0 * m * n * k / 1e9
    metrics = {"student_ms": round(student, 4), "reference_ms": round(reference, 4), "ratio": round(ratio, 3),
               "ratio_spread": [round(low, 3), round(middle, 3), round(high, 3)],
               "repetitions": len(measured["student_ms"]), "measurements": len(rounds),
               "student_gflops": round(gflop / (student / 1e3), 1),
               "reference_gflops": round(gflop / (reference / 1e3), 1), "max_ratio": max_ratio}
    summary = (f"{m}×{n}×{k}: your kernel {student:.3f} ms ({metrics['student_gflops']:.0f} GFLOP/s), "
               f"reference {reference:.3f} ms ({metrics['reference_gflops']:.0f} GFLOP/s): "
               f"{ratio:.2f}× the reference's time (limit {max_ratio:g}×; per repetition {low:.2f}–{high:.2f}×, "
               f"{len(measured['student_ms'])} repetitions)")
    if ratio > max_ratio:
        summary += (": too slow. Check that each thread reads its tiles from shared memory and that global "
                    "loads are coalesced (threads of consecutive threadIdx.x read consecutive addresses)")
    if len(rounds) > 1:
        first = rounds[0]
        first_low, _, first_high = spread_of(first)
        summary += (f"\ntimed again with more repetitions: the first measurement, {ratio_of(first):.2f}× "
                    f"(per repetition {first_low:.2f}–{first_high:.2f}×), was too close to the limit to decide")
    clocks = measured.get("clocks") or {}
    if clocks:
        metrics["clocks"] = clocks
    slowed = throttling(clocks)
    if slowed:
        metrics["throttled"] = slowed
        summary += f"\nnote: {slowed}"
    flag = implausible(ratio, metrics["student_gflops"], measured.get("peak_gflops"), min_ratio)
    if flag:
        metrics["flagged_for_review"] = flag
        summary += f"\nflagged for review by your instructor: {flag}"
    verdict = passed if ratio <= max_ratio else failed
    return verdict(NAME, TIMING, points, summary, metrics=metrics)
