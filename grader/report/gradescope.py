"""Gradescope autograder results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/).

Why: on Gradescope the grader runs inside their container (see gradescope/run_autograder) and this
file is all Gradescope reads. Layout per the spec: a top-level "score" (it overrides the sum of the
tests), "execution_time" in seconds, "output" for the whole submission, and "tests", each with
"name", "score", "max_score", "status" ("passed"/"failed", so a passed check with partial timing
points still shows as passed), "output" and "visibility". All text is student-facing, so it goes
through student_view: a hidden case shows only its verdict word. Hidden cases stay "visible" so the
student sees that they passed or failed ("hidden" in Gradescope's sense would show nothing at all).
Outputs are declared "text" so a student's `<tag>` in a message is shown, not rendered as HTML.
A submission that could not be graded still yields a valid file: score 0 and the reason.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.report.student_view import DEFAULT_LIMIT, student_message, student_summary
from grader.result import PASSED, CheckResult, SubmissionResult

VISIBLE = "visible"


def _test(check: CheckResult, limit: int) -> dict[str, Any]:
    return {
        "name": f"{check.kind}: {check.name}",
        "score": check.score,
        "max_score": check.max_score,
        "status": "passed" if check.status == PASSED else "failed",
        "output": student_message(check, limit),
        "output_format": "text",
        "visibility": VISIBLE,
        "extra_data": {"kind": check.kind, "status": check.status},
    }


def to_gradescope(result: SubmissionResult, execution_time: float | None = None,
                  limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """execution_time: seconds; defaults to the result's own duration when it has one."""
    seconds = execution_time if execution_time is not None else result.duration_s or None
    data: dict[str, Any] = {
        "score": result.score if result.graded else 0.0,
        "output": student_summary(result, limit),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "tests": [_test(check, limit) for check in result.checks],
    }
    if seconds is not None:
        data["execution_time"] = max(0, round(seconds))
    return data


def write_gradescope(result: SubmissionResult, path: str | Path, execution_time: float | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_gradescope(result, execution_time), indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path
