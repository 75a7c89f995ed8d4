"""The student-facing projection of a result: what a student may read, and how much of it.

Why one module: every student-facing output (Gradescope, PrairieLearn, ...) must hide the same
things and cut at the same length, or one export leaks what another hides. Hidden checks show
only their verdict word (no shapes, no diagnostics), and every text is capped with a visible
marker so an LMS never silently drops the end of a long compiler log. Instructor outputs
(grades.csv, the JSON result, logs, the class summary) keep the full text and do not use this.
"""
from __future__ import annotations

from grader.execute.sandbox import NONE as NO_SANDBOX
from grader.execute.sandbox import UNSAFE_NOTE
from grader.report.points import score_line
from grader.report.status import status_label
from grader.result import HIDDEN, CheckResult, SubmissionResult

DEFAULT_LIMIT = 4000
NOT_CHECKED = "not checked here"  # a check that needs a GPU, on a run without one: neither pass nor fail


def verdict(check: CheckResult) -> str:
    """The word a student reads for a check: its status, or "not checked here" when it needs a GPU."""
    return NOT_CHECKED if check.needs_gpu else check.status


def truncation_marker(dropped: int) -> str:
    return f"\n[... {dropped} more characters truncated ...]"


def cap(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """The first `limit` characters of text, then a marker saying how many were cut."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if len(text) <= limit:
        return text
    return text[:limit] + truncation_marker(len(text) - limit)


def student_message(check: CheckResult, limit: int = DEFAULT_LIMIT, with_fixes: bool = False) -> str:
    """What a student sees under one check: the verdict word only for hidden checks. Its fixes are said
    once for the whole submission (what_to_fix), unless the check is shown on its own (with_fixes)."""
    if check.needs_gpu:
        return f"{NOT_CHECKED}: it needs a GPU ({check.needs_gpu}), and this run had none"
    if check.visibility == HIDDEN:
        return check.status
    return cap(check.explained if with_fixes else check.message, limit)


def what_to_fix(result: SubmissionResult, show_hidden: bool = False) -> list[str]:
    """Each fix once, with the checks it explains: visible checks by name, hidden ones only counted. A fix
    that only hidden checks show is not told: a hidden check shows its verdict and nothing else."""
    explained: dict[str, tuple[list[str], int]] = {}
    for check in result.checks:
        if check.passed or check.needs_gpu:
            continue
        for fix in check.fixes:
            names, hidden = explained.get(fix, ([], 0))
            if check.visibility == HIDDEN and not show_hidden:
                hidden += 1
            else:
                names.append(check.name)
            explained[fix] = (names, hidden)
    return [f"{fix} ({', '.join(names)}{f' and {hidden} hidden' if hidden else ''})"
            for fix, (names, hidden) in explained.items() if names]


def student_summary(result: SubmissionResult, limit: int = DEFAULT_LIMIT) -> str:
    """The text shown for the whole submission: the outcome, the score, and why it was not graded."""
    label = status_label(result)
    # A result that is not a grade shows no score: a 0 it never earned would read as one.
    lines = [f"Score: {score_line(result)} ({label})" if result.graded else f"Not graded ({label})"]
    if result.sandbox == NO_SANDBOX:
        lines.append(f"Note: {UNSAFE_NOTE}")
    if not result.graded:
        lines.append(f"Your submission could not be graded: {result.message or 'no reason was recorded'}")
    elif result.message:
        lines.append(f"Note: {result.message}")
    lines += [f"Note: {note}" for note in result.intake_notes]  # which file was graded, what was refused
    fixes = what_to_fix(result)
    if fixes:
        lines += ["What to fix:", *(f"- {fix}" for fix in fixes)]
    return cap("\n".join(lines), limit)
