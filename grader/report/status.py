"""One human label per submission for instructor and LMS exports.

Why a separate function: grades.csv, the class summary and the LMS files must agree on what
"compile error" or "grader error" means, and none of them may decide it afresh. The label is read
off verdicts already stored in the result (result.status, the compile check's status and message,
and for a submission that was not graded, the reason the pipeline stored); nothing is recomputed.
"""
from __future__ import annotations

from grader.result import (
    COMPILE,
    ERROR,
    SUBMISSION_ERROR,
    CheckResult,
    SubmissionResult,
)

GRADED_LABEL = "graded"
COMPILE_ERROR = "compile error"
TIMED_OUT = "timed out"
GRADER_ERROR = "grader error"
SUBMISSION_ERROR_LABEL = "submission error"

LABELS = (GRADED_LABEL, COMPILE_ERROR, TIMED_OUT, GRADER_ERROR, SUBMISSION_ERROR_LABEL)

# The pipeline words every grader-side failure this way ("grader error: ...", "internal grader
# error: ...", "not run: the grader's reference kernel ..."); a submission's own fault never is.
_GRADER_MARKERS = ("grader error", "the grader's")


def compile_check(result: SubmissionResult) -> CheckResult | None:
    return next((c for c in result.checks if c.kind == COMPILE), None)


def status_label(result: SubmissionResult) -> str:
    """graded / compile error / timed out / grader error / submission error."""
    compiled = compile_check(result)
    compile_message = compiled.message.lower() if compiled else ""
    if result.status == SUBMISSION_ERROR:
        # Not graded at all: the grader's fault or the submission's (no kernel file, unreadable...).
        reason = f"{result.message.lower()}\n{compile_message}"
        return GRADER_ERROR if any(marker in reason for marker in _GRADER_MARKERS) else SUBMISSION_ERROR_LABEL
    if compiled is not None and compiled.status == ERROR:
        # Compilation (or starting the GPU process) ran out of time: the message says so.
        return TIMED_OUT if "timed out" in compile_message else COMPILE_ERROR
    return GRADED_LABEL
