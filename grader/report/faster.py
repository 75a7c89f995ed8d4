""""How to make it faster" (issue 26) as text for the student-facing outputs (Gradescope, PrairieLearn,
JUnit): a pure function of result.feedback. Advice only, never a verdict: no point depends on it, and the
text says so. Each finding once (the same one may come from two sources' wording: both are kept), capped
like every student-facing text."""
from __future__ import annotations

from grader.report.student_view import DEFAULT_LIMIT, cap
from grader.result import Feedback, SubmissionResult

TITLE = "How to make it faster (advice only: no points depend on it):"


def feedback_line(item: Feedback) -> str:
    """One finding and what to try: "line 12: ... — try: ..."."""
    place = f"line {item.line}: " if item.line and not item.message.startswith(f"line {item.line}") else ""
    return f"{place}{item.message} — try: {item.advice}" if item.advice else f"{place}{item.message}"


def faster_lines(result: SubmissionResult) -> list[str]:
    """The title and one "- " line per finding; [] when there is nothing to say."""
    lines = list(dict.fromkeys(feedback_line(item) for item in result.feedback))
    return [TITLE, *(f"- {line}" for line in lines)] if lines else []


def faster_text(result: SubmissionResult, limit: int = DEFAULT_LIMIT) -> str:
    return cap("\n".join(faster_lines(result)), limit)
