"""regrade.csv: one row per changed check of each student a regrade changed (a student whose total or outcome
changed with no check's verdict gets one row), so a TA can sort by change, cause or check. A pure function of
the comparison (report/regrade.py)."""
from __future__ import annotations

import csv
import io

from grader.report.points import format_points
from grader.report.regrade import Regrade, StudentChange, verdict_words

COLUMNS = ("submission", "student_id", "student_name", "old score", "new score", "change", "max", "went down",
           "submission changed", "causes", "check", "old verdict", "new verdict", "cause", "old message",
           "new message")


def to_regrade_csv(regrade: Regrade) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for change in regrade.changed:
        student = _student_cells(change)
        for check in change.checks or [None]:
            writer.writerow([*student, *(("", "", "", "", "", "") if check is None else (
                check.name, verdict_words(check.old), verdict_words(check.new), check.cause,
                _message(check.old), _message(check.new)))])
    return out.getvalue()


def _student_cells(change: StudentChange) -> list[str]:
    new = change.new
    changed = {True: "yes", False: "no", None: "unknown"}[change.submission_changed]
    return [change.key, new.student_id, new.student_name, format_points(change.old.score),
            format_points(new.score), f"{change.delta:+g}", format_points(new.max_score),
            "yes" if change.went_down else "", changed, "; ".join(change.causes)]


def _message(check) -> str:
    return "" if check is None else check.message
