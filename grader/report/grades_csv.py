"""grades.csv: the instructor's class sheet, one row per student, one column per check.

Why: a spreadsheet is what an instructor sorts, filters and pastes into a gradebook. Every
submission gets a row, errored ones included, so a missing student is visible rather than absent.
Row 2 is "points possible" (each check's max_score) so totals can be checked by eye. Scores,
totals and statuses are copied from the result model; nothing is re-judged here. A row whose grading
broke (outcome "grader error") has empty scores and total, never zeros: nothing about it was decided.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.report.points import format_points
from grader.report.status import status_label
from grader.result import GRADER_ERROR, SubmissionResult

FIXED = ("submission", "student_id", "student_name", "status")
TOTALS = ("total", "max")
NOTES = "intake notes"  # which file intake took, what it refused: joined with "; "
POINTS_POSSIBLE = "points possible"


def _header(name: str) -> str:
    # A check called "status" or "total" must not shadow a fixed column for csv.DictReader.
    return f"check {name}" if name in FIXED or name in TOTALS or name == NOTES else name


def check_columns(results: list[SubmissionResult]) -> list[str]:
    """Check names over all results, in the order they are first seen."""
    return list(dict.fromkeys(check.name for result in results for check in result.checks))


def _possible(results: list[SubmissionResult], names: list[str]) -> dict[str, float]:
    """Each check's max_score, as the first result that has the check states it."""
    possible: dict[str, float] = {}
    for result in results:
        for check in result.checks:
            possible.setdefault(check.name, check.max_score)
    return {name: possible[name] for name in names}


def to_grades_csv(results: list[SubmissionResult]) -> str:
    names = check_columns(results)
    header = [*FIXED, *map(_header, names), *TOTALS, NOTES]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    possible = _possible(results, names)
    total_possible = format_points(sum(possible.values()))
    writer.writerow([POINTS_POSSIBLE, "", "", "", *(format_points(possible[n]) for n in names),
                     total_possible, total_possible, ""])
    for result in results:
        decided = result.outcome != GRADER_ERROR
        scores = {check.name: format_points(check.score) for check in result.checks if decided}
        writer.writerow([result.submission, result.student_id, result.student_name, status_label(result),
                         *(scores.get(name, "") for name in names),
                         format_points(result.score) if decided else "", format_points(result.max_score),
                         "; ".join(result.intake_notes)])
    return out.getvalue()


def write_grades_csv(results: list[SubmissionResult], path: str | Path) -> Path:
    path = Path(path)
    # newline="" so the csv module's own line endings are written as they are.
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(to_grades_csv(results))
    return path
