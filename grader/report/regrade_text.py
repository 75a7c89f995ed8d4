"""The terminal's regrade report: how many a regrade changed, by cause, the students whose own submission
changed apart, and each changed student's old and new score with each changed check's old and new message
(first lines). Lines of plain text, a pure function of the comparison (report/regrade.py)."""
from __future__ import annotations

from grader.report.points import format_points
from grader.report.regrade import (
    UNEXPLAINED,
    Regrade,
    StudentChange,
    describe_differences,
    graded_with_words,
    verdict_words,
)
from grader.result import SubmissionResult

SHOWN_STUDENTS = 50  # the terminal's share; regrade.csv has every one


def regrade_lines(regrade: Regrade, shown: int = SHOWN_STUDENTS) -> list[str]:
    lines = [_headline(regrade)]
    if regrade.differences:
        lines.append("What the two gradings were graded with that differs:")
        lines += [f"  {difference}" for difference in regrade.differences]
    if regrade.groups:
        lines.append("By cause (submissions unchanged):")
        lines += [f"  {group.cause}: {_students(len(group.students))} ({', '.join(group.students[:8])}"
                  f"{', ...' if len(group.students) > 8 else ''})" for group in regrade.groups]
    if regrade.submissions_changed:
        names = [change.key for change in regrade.submissions_changed]
        lines.append(f"Submission changed: {_students(len(names))} ({', '.join(names[:8])}"
                     f"{', ...' if len(names) > 8 else ''})")
    for name, keys in (("only in the old grading", regrade.only_old), ("only in the new grading", regrade.only_new)):
        if keys:
            lines.append(f"{_students(len(keys)).capitalize()} {name}: {', '.join(keys)}")
    for change in regrade.changed[:shown]:
        lines += student_lines(change)
    if len(regrade.changed) > shown:
        lines.append(f"... and {len(regrade.changed) - shown} more in regrade.csv")
    return lines


def student_lines(change: StudentChange) -> list[str]:
    """One student: old → new score, then each changed check with its old and new verdict and message."""
    mark = "DOWN" if change.went_down else "up" if change.delta > 0 else "same total"
    lines = [f"{change.key}: {format_points(change.old.score)} → {format_points(change.new.score)} "
             f"({mark}; {'; '.join(change.causes)})"]
    for check in change.checks:
        lines.append(f"  {check.name}: {verdict_words(check.old)} → {verdict_words(check.new)} [{check.cause}]")
        for when, result in (("was", check.old), ("now", check.new)):
            if result is not None and result.message:
                lines.append(f"    {when}: {result.message.strip().splitlines()[0][:160]}")
    return lines


def _headline(regrade: Regrade) -> str:
    down = len(regrade.went_down)
    return (f"Regrade: {_students(len(regrade.changed))} changed ({down} went down), "
            f"{regrade.unchanged} unchanged")


def _students(n: int) -> str:
    return f"{n} student{'s' if n != 1 else ''}"


def reproduce_lines(stored: SubmissionResult, regraded: SubmissionResult, change: StudentChange | None) -> list[str]:
    """`grade reproduce`: what each grading was graded with, then whether every verdict matches, and if not,
    which differ and why."""
    lines = [f"{when}: {format_points(result.score)}/{format_points(result.max_score)}, graded with "
             f"{graded_with_words(result)}" for when, result in (("stored  ", stored), ("regraded", regraded))]
    if change is None:
        return [*lines, f"Reproduced: every verdict matches ({len(regraded.checks)} checks, outcome "
                        f"{regraded.outcome})."]
    why = describe_differences(stored, regraded)
    if change.submission_changed:
        why.insert(0, "the submission is not the one graded: its files differ (a resubmission?)")
    return [*lines, f"Not reproduced: {len(change.checks)} verdicts differ{_outcomes(change)}.",
            *student_lines(change)[1:], "Why (what differs between the two gradings):",
            *(f"  {line}" for line in why or [UNEXPLAINED])]


def _outcomes(change: StudentChange) -> str:
    return "" if change.old.outcome == change.new.outcome else \
        f", outcome {change.old.outcome} → {change.new.outcome}"
