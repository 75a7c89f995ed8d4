"""PrairieLearn external-grader results.json (https://prairielearn.readthedocs.io/en/latest/externalGrading/).

Why: an externally graded PrairieLearn question runs the grader in a container and reads
/grade/results/results.json. Per the docs: "score" is a fraction in [0, 1]; "gradable": false marks
a submission that could not be graded at all (PrairieLearn then awards and takes nothing and does
not count the attempt), with the reasons in "format_errors"; "message" and "output" describe the
whole submission; "tests" (rendered by <pl-external-grader-results>) carry "name", "description",
"points", "max_points", "message" and "output". Everything here is student-facing, so texts go
through student_view: a hidden case shows only its verdict word. Points are the model's own.

Code that does not compile scores what the result says, as on every other path (the pipeline keeps its
static points only with `points.static_after_compile_error: true`). By default such a submission is
"gradable": false with the compiler's message in "format_errors", so the attempt is not counted; with
`prairielearn.compile_error_graded: true` in config.yaml it is a graded 0 instead.
PrairieLearn has no GPU: the score is a fraction of what could be checked, and checks that need a GPU
are listed in the message, not as tests (they are neither passed nor failed). The fraction is the same with
either `--without-gpu`; what differs is what the question stands for, which the student is told: held
(default), the checkable part of the lab (give it that part's points); scaled, the whole lab. A kernel the
CPU emulator cannot run ("needs GPU grade") is scored out of the same checkable points, its cases at 0 with
the reason. A submission that could not be graded has no tests: its one reason is in "format_errors".
"How to make it faster" (result.feedback: advice, no points) follows the summary in "output".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.report.faster import faster_text
from grader.report.points import HOLD, SCALE, checkable_words, checked_without_gpu, format_points
from grader.report.status import compile_check, status_label
from grader.report.student_view import (
    DEFAULT_LIMIT,
    cap,
    grouped_messages,
    student_summary,
)
from grader.result import COMPILE_ERROR, HIDDEN, TIMED_OUT, CheckResult, SubmissionResult

DID_NOT_BUILD = (COMPILE_ERROR, TIMED_OUT)  # outcomes of code that did not compile (or not in time)


def _does_not_build(result: SubmissionResult) -> bool:
    return result.outcome in DID_NOT_BUILD


def _fraction(result: SubmissionResult) -> float:
    out_of = result.checkable_max
    if not result.graded or out_of <= 0:
        return 0.0
    return min(1.0, max(0.0, result.score / out_of))


def _test(check: CheckResult, shown: str) -> dict[str, Any]:
    hidden = " (hidden case: only the verdict is shown)" if check.visibility == HIDDEN else ""
    return {
        "name": check.name,
        "description": f"{check.kind} check{hidden}",
        "points": check.score,
        "max_points": check.max_score,
        "message": check.status,
        "output": "" if shown == check.status else shown,
    }


def _compiler_message(result: SubmissionResult, limit: int) -> str:
    check = compile_check(result)
    text = check.message if check is not None and check.message else result.message
    return cap(text or "the code does not compile", limit)


def _message(result: SubmissionResult, without_gpu: str) -> str:
    if not result.graded:
        return f"{status_label(result)}: not graded"
    points = f"{status_label(result)}: {format_points(result.score)}/{format_points(result.checkable_max)}"
    if not result.needs_gpu_points:
        return f"{points} points"
    whole = "; the score is their share of all this question's points" if without_gpu == SCALE else ""
    return f"{points} {checkable_words(result)}{whole}"


def to_prairielearn(result: SubmissionResult, limit: int = DEFAULT_LIMIT, compile_error_graded: bool = False,
                    without_gpu: str = HOLD) -> dict[str, Any]:
    """compile_error_graded: a submission that does not compile is a graded 0 rather than not gradable.
    without_gpu: hold or scale, what the question stands for in a run without a GPU (the module's docstring)."""
    checked_without_gpu(without_gpu)
    gradable = result.graded and (compile_error_graded or not _does_not_build(result))
    told = grouped_messages(result, limit)  # a cause told in full once; its other cases point to it
    data: dict[str, Any] = {
        "gradable": gradable,
        "score": _fraction(result),
        "message": _message(result, without_gpu),
        "output": student_summary(result, limit) + (f"\n\n{faster_text(result, limit)}" if result.feedback else ""),
        # Not graded: every check would repeat the one reason, which format_errors gives once.
        "tests": [_test(check, told[check.name]) for check in result.checks if check.checkable and result.graded],
    }
    if result.regrade_reason:  # the instructor's marker: this submission needs grading again (docs/instructors.md)
        data["regrade_reason"] = result.regrade_reason
    if not result.graded:
        data["format_errors"] = [cap(result.message or "the submission could not be graded", limit)]
    elif not gradable:
        data["format_errors"] = [f"Your code does not compile, so it was not graded (this attempt does not "
                                 f"count):\n{_compiler_message(result, limit)}"]
    return data


def write_prairielearn(result: SubmissionResult, path: str | Path, compile_error_graded: bool = False,
                       without_gpu: str = HOLD) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # PrairieLearn does not create /grade/results
    data = to_prairielearn(result, compile_error_graded=compile_error_graded, without_gpu=without_gpu)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
