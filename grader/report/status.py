"""One human label per submission for instructor and LMS exports.

The label is the outcome the pipeline stored in the result; nothing here reads message text or
recomputes a verdict, so grades.csv, the class summary and the LMS files always agree.
"""
from __future__ import annotations

from grader.result import COMPILE, OUTCOMES, CheckResult, SubmissionResult

LABELS = OUTCOMES


def compile_check(result: SubmissionResult) -> CheckResult | None:
    return next((c for c in result.checks if c.kind == COMPILE), None)


def status_label(result: SubmissionResult) -> str:
    """graded / compile error / timed out / grader error / submission error."""
    return result.outcome
