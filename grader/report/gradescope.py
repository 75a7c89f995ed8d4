"""Gradescope autograder results.json (https://gradescope-autograders.readthedocs.io/en/latest/specs/).

Why: on Gradescope the grader runs inside their container (see gradescope/run_autograder) and this
file is all Gradescope reads. Layout per the spec: a top-level "score" (it overrides the sum of the
tests), "execution_time" in seconds, "output" for the whole submission, "extra_data", an optional
"leaderboard" (a list of {"name", "value", "order"}), and "tests", each with "name", "score",
"max_score", "status" ("passed"/"failed", so a passed check with partial timing points still shows as
passed), "output" and "visibility". All text is student-facing, so it goes through student_view.

Hidden cases use Gradescope's own visibility values: "after_due_date" by default (the student sees the
verdict once the due date has passed), or "after_published" / "hidden", as the instructor chooses; their
text is only the verdict word even then, so the shapes stay secret from one term to the next.
Gradescope has no GPU: a check that needs one is "not checked here", so it is not a test there (a
Gradescope test is passed or failed, never neither); the output names them and their points. The score is
what the instructor chooses (`--without-gpu`): held (default), the points checked, for an assignment worth
what could be checked (74 of the shipped 100); scaled, their share of the full total, for an assignment
worth the full total. `extra_data.assignment_points` says which total that is. A kernel the CPU emulator
cannot run (outcome "needs GPU grade") keeps its cases as failed tests at 0 with the reason, and its CPU
score is never scaled up: what could be checked is the machine's, not the submission's, to decide. "How to
make it faster" (result.feedback, advice worth no points) follows the summary in "output". The timing
figures, when a GPU timed the kernel, go in "extra_data" and in a leaderboard (GFLOP/s, higher first; time
against the reference, lower first).
Outputs are declared "text" so a student's `<tag>` in a message is shown, not rendered as HTML.
A submission that could not be graded still yields a valid file: score 0 and the reason.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.report.faster import faster_text
from grader.report.points import HOLD, SCALE, assignment_points, checked_without_gpu, format_points, scaled
from grader.report.student_view import DEFAULT_LIMIT, grouped_messages, student_summary
from grader.result import GRADER_ERROR, HIDDEN, NEEDS_GPU_GRADE, PASSED, TIMING, CheckResult, SubmissionResult

VISIBLE = "visible"
# Gradescope's documented visibility values that keep a test from the student for a while (or always).
HIDDEN_VISIBILITIES = ("after_due_date", "after_published", "hidden")
DEFAULT_HIDDEN_VISIBILITY = "after_due_date"
TIMING_FIGURES = ("student_ms", "reference_ms", "ratio", "student_gflops", "reference_gflops")


def _test(check: CheckResult, told: str, hidden_visibility: str) -> dict[str, Any]:
    return {
        "name": f"{check.kind}: {check.name}",
        "score": check.score,
        "max_score": check.max_score,
        "status": "passed" if check.status == PASSED else "failed",
        "output": told,
        "output_format": "text",
        "visibility": hidden_visibility if check.visibility == HIDDEN else VISIBLE,
        "extra_data": {"kind": check.kind, "status": check.status},
    }


def timing_figures(result: SubmissionResult) -> dict[str, float]:
    """The measured timing figures, when a GPU timed the kernel; empty otherwise."""
    timing = next((c for c in result.checks if c.kind == TIMING), None)
    if timing is None or "ratio" not in timing.metrics:
        return {}
    return {key: timing.metrics[key] for key in TIMING_FIGURES if key in timing.metrics}


def _leaderboard(figures: dict[str, float]) -> list[dict[str, Any]]:
    board = []
    if "student_gflops" in figures:
        board.append({"name": "GFLOP/s", "value": figures["student_gflops"], "order": "desc"})
    board.append({"name": "Time vs reference", "value": figures["ratio"], "order": "asc"})
    return board


def _not_checked(result: SubmissionResult) -> str:
    names = ", ".join(c.name for c in result.checks if c.needs_gpu)
    return f"Not checked here (they need a GPU): {names}."


def _scaled_up(result: SubmissionResult, without_gpu: str) -> bool:
    """Whether the score is the checked share of the full total: asked for, and a grade (a kernel held for a
    GPU keeps its CPU score as it is)."""
    return (without_gpu == SCALE and bool(result.needs_gpu_points) and result.graded
            and result.outcome != NEEDS_GPU_GRADE)


def _score(result: SubmissionResult, without_gpu: str) -> float:
    if not result.graded:
        return 0.0
    return round(scaled(result, result.max_score), 6) if _scaled_up(result, without_gpu) else result.score


def to_gradescope(result: SubmissionResult, execution_time: float | None = None, limit: int = DEFAULT_LIMIT,
                  hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY, without_gpu: str = HOLD) -> dict[str, Any]:
    """execution_time: seconds; defaults to the result's own duration when it has one. without_gpu: hold or
    scale, what the score of a run without a GPU is (the module's docstring)."""
    if hidden_visibility not in HIDDEN_VISIBILITIES:
        raise ValueError(f"hidden_visibility must be one of {', '.join(HIDDEN_VISIBILITIES)}, "
                         f"not {hidden_visibility!r}")
    checked_without_gpu(without_gpu)
    seconds = execution_time if execution_time is not None else result.duration_s or None
    score = _score(result, without_gpu)
    output = student_summary(result, limit)
    if result.needs_gpu_points:
        output += "\n" + _not_checked(result)
    if _scaled_up(result, without_gpu):
        output += (f"\nYour score counts as its share of the full total: {format_points(score)}/"
                   f"{format_points(result.max_score)}.")
    if result.feedback:  # after what to fix: advice, no points
        output += "\n\n" + faster_text(result, limit)
    extra: dict[str, Any] = {"outcome": result.outcome, "max_score": result.max_score,
                             "checkable_max_score": result.checkable_max, "without_gpu": without_gpu}
    if result.graded:  # a result not graded marks nothing as needing a GPU: it cannot say the run's total
        extra["assignment_points"] = assignment_points(result, without_gpu)
    if result.regrade_reason:  # the instructor's marker: this row needs grading again (docs/instructors.md)
        extra["regrade_reason"] = result.regrade_reason
    figures = timing_figures(result)
    if figures:
        extra["timing"] = figures
    told = grouped_messages(result, limit)  # a cause told in full once; its other cases point to it
    data: dict[str, Any] = {
        "score": score,
        "output": output,
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "extra_data": extra,
        # A grader error graded nothing: no test is shown as failed for it.
        "tests": [] if result.outcome == GRADER_ERROR else [_test(check, told[check.name], hidden_visibility)
                                                             for check in result.checks if check.checkable],
    }
    if figures:
        data["leaderboard"] = _leaderboard(figures)
    if seconds is not None:
        data["execution_time"] = max(0, round(seconds))
    return data


def write_gradescope(result: SubmissionResult, path: str | Path, execution_time: float | None = None,
                     hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY, without_gpu: str = HOLD) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = to_gradescope(result, execution_time, hidden_visibility=hidden_visibility, without_gpu=without_gpu)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
