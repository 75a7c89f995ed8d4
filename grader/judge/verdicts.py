"""Whether two gradings of one submission agree: the proof that a batch grades as grading alone does.

Verdicts are compared check by check (status and score) with the outcome; message texts and timing
figures may differ. A timing verdict may differ only where either ratio is within 3% of the limit, where
one measurement cannot tell the two apart (the re-time rule decides those, and noise may decide it either
way on another day).
"""
from __future__ import annotations

from ..result import TIMING, CheckResult, SubmissionResult
from .timing import CLOSE


def differences(one: SubmissionResult, other: SubmissionResult, max_ratio: float) -> list[str]:
    """What differs between two gradings of the same submission, in words; [] when they agree."""
    found = []
    if one.outcome != other.outcome:
        found.append(f"outcome {one.outcome!r} vs {other.outcome!r}")
    theirs = {check.name: check for check in other.checks}
    for check in one.checks:
        match = theirs.pop(check.name, None)
        if match is None:
            found.append(f"{check.name}: only in the first")
        elif (check.status, check.score) != (match.status, match.score) and not _too_close_to_call(
                check, match, max_ratio):
            found.append(f"{check.name}: {check.status} {check.score:g} vs {match.status} {match.score:g} "
                         f"({_first_line(check)} | {_first_line(match)})")
    found.extend(f"{name}: only in the second" for name in theirs)
    return found


def _too_close_to_call(one: CheckResult, other: CheckResult, max_ratio: float) -> bool:
    if one.kind != TIMING or other.kind != TIMING:
        return False
    ratios = [check.metrics.get("ratio") for check in (one, other)]
    return any(r is not None and abs(r - max_ratio) <= CLOSE * max_ratio for r in ratios)


def _first_line(check: CheckResult) -> str:
    return check.message.splitlines()[0][:100] if check.message else ""
