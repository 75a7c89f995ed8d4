"""A CSV that Canvas's Gradebook "Import" accepts as it is: one assignment column, one row per student.

Why: an instructor should upload the lab's scores without retyping or reshaping a spreadsheet.
The layout follows Canvas's own gradebook export, which is also its import format: the columns
Student, ID, SIS User ID, SIS Login ID, Section, then one column per assignment (named as the
assignment is named in Canvas, or a new assignment is created); the row after the header holds
"Points Possible". Canvas matches a row to a student by one of Student / ID / SIS User ID, so the
student_id goes in the column the caller names (Canvas's numeric "ID" by default). Scores are the
result's own total; nothing is re-judged here.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from grader.report.points import format_points
from grader.result import SubmissionResult

IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
ID_COLUMNS = ("ID", "SIS User ID", "SIS Login ID")
POINTS_POSSIBLE = "Points Possible"


def to_canvas_csv(results: list[SubmissionResult], assignment: str, *, id_column: str = "ID",
                  points_possible: float | None = None, blank_if_not_graded: bool = False) -> str:
    """assignment: the column title (the Canvas assignment's name). points_possible: defaults to the
    largest max_score among the results. blank_if_not_graded: leave the score cell empty (Canvas then
    leaves that grade as it is) for submissions that could not be graded, instead of writing their 0."""
    if id_column not in ID_COLUMNS:
        raise ValueError(f"id_column must be one of {', '.join(ID_COLUMNS)}, not {id_column!r}")
    if not assignment.strip():
        raise ValueError("the assignment title must not be empty")
    if points_possible is None:
        points_possible = max((r.max_score for r in results), default=0.0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*IDENTITY, assignment])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", format_points(points_possible)])
    id_at = IDENTITY.index(id_column)
    for result in results:
        row = [result.student_name or (result.submission if not result.student_id else ""), "", "", "", ""]
        row[id_at] = result.student_id
        blank = blank_if_not_graded and not result.graded
        writer.writerow([*row, "" if blank else format_points(result.score)])
    return out.getvalue()


def write_canvas_csv(results: list[SubmissionResult], path: str | Path, assignment: str, **options) -> Path:
    path = Path(path)
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(to_canvas_csv(results, assignment, **options))
    return path
