"""PrairieLearn external-grader results.json (https://prairielearn.readthedocs.io/en/latest/externalGrading/).

Why: an externally graded PrairieLearn question runs the grader in a container and reads
/grade/results/results.json. Per the docs: "score" is a fraction in [0, 1]; "gradable": false marks
a submission that could not be graded at all (PrairieLearn then awards and takes nothing and does
not count the attempt), with the reasons in "format_errors"; "message" and "output" describe the
whole submission; "tests" (rendered by <pl-external-grader-results>) carry "name", "description",
"points", "max_points", "message" and "output". Everything here is student-facing, so texts go
through student_view: a hidden case shows only its verdict word. Points are the model's own.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.report.points import format_points
from grader.report.status import status_label
from grader.report.student_view import (
    DEFAULT_LIMIT,
    cap,
    student_message,
    student_summary,
)
from grader.result import HIDDEN, CheckResult, SubmissionResult


def _fraction(result: SubmissionResult) -> float:
    if not result.graded or result.max_score <= 0:
        return 0.0
    return min(1.0, max(0.0, result.score / result.max_score))


def _test(check: CheckResult, limit: int) -> dict[str, Any]:
    shown = student_message(check, limit)
    hidden = " (hidden case: only the verdict is shown)" if check.visibility == HIDDEN else ""
    return {
        "name": check.name,
        "description": f"{check.kind} check{hidden}",
        "points": check.score,
        "max_points": check.max_score,
        "message": check.status,
        "output": "" if shown == check.status else shown,
    }


def to_prairielearn(result: SubmissionResult, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    gradable = result.graded
    data: dict[str, Any] = {
        "gradable": gradable,
        "score": _fraction(result),
        "message": f"{status_label(result)}: {format_points(result.score)}/{format_points(result.max_score)} points",
        "output": student_summary(result, limit),
        "tests": [_test(check, limit) for check in result.checks],
    }
    if not gradable:
        data["format_errors"] = [cap(result.message or "the submission could not be graded", limit)]
    return data


def write_prairielearn(result: SubmissionResult, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # PrairieLearn does not create /grade/results
    path.write_text(json.dumps(to_prairielearn(result), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
