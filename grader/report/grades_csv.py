"""grades.csv: the instructor's class sheet, one row per student, one column per check.

Why: a spreadsheet is what an instructor sorts, filters and pastes into a gradebook. Every
submission gets a row, errored ones included, so a missing student is visible rather than absent.
Row 2 is "points possible" (each check's max_score) so totals can be checked by eye. Scores,
totals and statuses are copied from the result model; nothing is re-judged here. A row whose grading
broke (outcome "grader error") has empty scores and total, never zeros: nothing about it was decided.
From a run without a GPU, a check that needs one was not made: its cells are empty (its points possible
too), every max is the points that could be checked, and the points-possible row's notes say what needs
a GPU.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.report.points import format_points, row_max, run_gpu_note, run_total
from grader.report.status import status_label
from grader.result import GRADER_ERROR, SubmissionResult

FIXED = ("submission", "student_id", "student_name", "status")
TOTALS = ("total", "max")
LATE = "late"  # "yes" where the LMS marked the submission late (a Canvas download)
NOTES = "intake notes"  # which file intake took, what it refused: joined with "; "
POINTS_POSSIBLE = "points possible"


def _header(name: str) -> str:
    # A check called "status" or "total" must not shadow a fixed column for csv.DictReader.
    return f"check {name}" if name in FIXED or name in TOTALS or name in (LATE, NOTES) else name


def check_columns(results: list[SubmissionResult]) -> list[str]:
    """Check names over all results, in the order they are first seen."""
    return list(dict.fromkeys(check.name for result in results for check in result.checks))


def _possible(results: list[SubmissionResult], names: list[str]) -> dict[str, str]:
    """Each check's max_score, as the first result that has the check states it; empty for a check that
    needs a GPU this run did not have."""
    possible: dict[str, float] = {}
    needs_gpu = {check.name for result in results for check in result.checks if check.needs_gpu}
    for result in results:
        for check in result.checks:
            possible.setdefault(check.name, check.max_score)
    return {name: "" if name in needs_gpu else format_points(possible[name]) for name in names}


def to_grades_csv(results: list[SubmissionResult]) -> str:
    names = check_columns(results)
    header = [*FIXED, *map(_header, names), *TOTALS, LATE, NOTES]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    possible = _possible(results, names)
    total = run_total(results)
    gpu = run_gpu_note(results)
    writer.writerow([POINTS_POSSIBLE, "", "", "", *(possible[n] for n in names), format_points(total),
                     format_points(total), "", f"points checkable without a GPU; {gpu}: not checked" if gpu else ""])
    for result in results:
        decided = result.outcome != GRADER_ERROR
        scores = {check.name: format_points(check.score) for check in result.checks if decided and check.checkable}
        writer.writerow([result.submission, result.student_id, result.student_name, status_label(result),
                         *(scores.get(name, "") for name in names),
                         format_points(result.score) if decided else "", format_points(row_max(result, total)),
                         "yes" if result.late else "", "; ".join(result.intake_notes)])
    return out.getvalue()


def write_grades_csv(results: list[SubmissionResult], path: str | Path) -> Path:
    path = Path(path)
    # newline="" so the csv module's own line endings are written as they are.
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(to_grades_csv(results))
    return path
