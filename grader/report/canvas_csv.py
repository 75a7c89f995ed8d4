"""canvas.csv: a file Canvas's Gradebook "Import" takes as it is, one assignment column, one row per student.

Why: an instructor should upload the lab's scores without retyping or reshaping a spreadsheet. The layout
is Canvas's own gradebook export, which is also its import format: Student, ID, SIS User ID, SIS Login ID,
Section, then the assignment column headed `Title (assignment_id)` as the export heads it (a title alone
makes Canvas create a new assignment); the row after the header holds "Points Possible".

Canvas matches a row by `ID`, its own user id, and otherwise by `SIS User ID` or `SIS Login ID`. So each id
goes only in its own column: `ID` holds a Canvas user id or nothing (an SIS id or an email there would be
read as a user id, and the grade land on the wrong student or nowhere). With a roster (Canvas's gradebook
export) the identity columns are Canvas's own for every student it matches, and the notes list the roster
students with no submission and the submissions with no roster row.

A student whose grading broke (outcome "grader error") gets an empty cell, which Canvas leaves as it was,
never a 0; so does, by default, a student graded without a GPU (checks that need one were not made):
`without_gpu="scale"` writes those scores scaled to what could be checked instead. A kernel the CPU
emulator cannot run (outcome "needs GPU grade") is held either way: its CPU score is never scaled up into a
grade. Every empty cell is listed in the notes, and so is every 0 that is a submission error (refused at
intake, or a roster student with no submission: `grade batch --roster` makes them rows), with its reason. Scores are
the results' own, rescaled to `points_possible`
when that is given.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from grader.report.points import HOLD, checked_without_gpu, format_points, scaled
from grader.result import GRADER_ERROR, NEEDS_GPU_GRADE, SUBMISSION_ERROR, SubmissionResult

IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "Points Possible"


@dataclass(frozen=True)
class RosterRow:
    """One student of Canvas's gradebook export: the identity columns, as Canvas wrote them."""

    student: str
    canvas_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""


@dataclass
class CanvasOptions:
    assignment: str = "SGEMM lab"
    assignment_id: str = ""  # Canvas's id of the assignment: the column is then "Title (id)"
    points_possible: float | None = None  # the assignment's points in Canvas; scores are rescaled to it
    without_gpu: str = HOLD
    roster: list[RosterRow] | None = None


@dataclass
class CanvasExport:
    csv: str
    notes: list[str] = field(default_factory=list)  # for the instructor: every row Canvas will not take as is


def column_title(options: CanvasOptions) -> str:
    title = options.assignment.strip()
    if not title:
        raise ValueError("the assignment title must not be empty")
    return f"{title} ({options.assignment_id})" if options.assignment_id else title


def _own_row(result: SubmissionResult) -> RosterRow:
    return RosterRow(result.student_name or result.submission, result.canvas_user_id, result.sis_user_id,
                     result.sis_login_id)


def roster_match(result: SubmissionResult, roster: list[RosterRow]) -> RosterRow | None:
    """The roster row with the same Canvas id, else SIS id, else login (case-insensitive)."""
    for mine, theirs in ((result.canvas_user_id, "canvas_id"), (result.sis_user_id, "sis_user_id"),
                         (result.sis_login_id, "sis_login_id")):
        if mine:
            found = [r for r in roster if getattr(r, theirs).casefold() == mine.casefold()]
            if found:
                return found[0]
    return None


def _cell(result: SubmissionResult, options: CanvasOptions) -> tuple[str, str]:
    """(the score cell, why it is empty or ""): the result's own score, or its share of the result's total
    times points_possible; from a run without a GPU, held, or its share of what could be checked."""
    if result.outcome == GRADER_ERROR:
        return "", "grading broke (grader error): grade again, then import"
    if result.outcome == NEEDS_GPU_GRADE:  # held whatever without_gpu says: its CPU score is not its grade
        why = f" ({result.message})" if result.message else ""
        return "", (f"held: needs a GPU grade, the CPU emulator cannot run this kernel{why}; its CPU score, "
                    f"{format_points(result.score)}/{format_points(result.checkable_max)}, is not its grade")
    if result.needs_gpu_points and result.graded and options.without_gpu == HOLD:
        return "", (f"held: graded without a GPU, {format_points(result.needs_gpu_points)} points not "
                    "checked (grade on a GPU, or export with --without-gpu scale)")
    worth = options.points_possible if options.points_possible is not None else result.max_score
    return format_points(scaled(result, worth)), ""


def to_canvas(results: list[SubmissionResult], options: CanvasOptions) -> CanvasExport:
    checked_without_gpu(options.without_gpu)
    title = column_title(options)
    out_of = options.points_possible
    if out_of is None:
        out_of = max((r.max_score for r in results), default=0.0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*IDENTITY, title])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", format_points(out_of)])
    notes: list[str] = []
    matched: set[RosterRow] = set()
    for result in results:
        who = roster_match(result, options.roster) if options.roster is not None else None
        if who is not None:
            matched.add(who)
        elif options.roster is not None:
            notes.append(f"{result.submission}: no roster row (ids: {_ids(result) or 'none'})")
        row = who or _own_row(result)
        cell, why = _cell(result, options)
        if why:
            notes.append(f"{row.student} [{result.submission}]: empty cell, {why}")
        elif result.outcome == SUBMISSION_ERROR:  # refused at intake, or on the roster with nothing handed in
            notes.append(f"{row.student} [{result.submission}]: {cell}, a submission error ({result.message})")
        if not (row.canvas_id or row.sis_user_id or row.sis_login_id):
            notes.append(f"{row.student} [{result.submission}]: no id Canvas can match this row by")
        writer.writerow([row.student, row.canvas_id, row.sis_user_id, row.sis_login_id, row.section, cell])
    for row in options.roster or []:
        if row not in matched:
            notes.append(f"{row.student} ({_roster_ids(row)}): on the roster, no submission")
    return CanvasExport(out.getvalue(), notes)


def _ids(result: SubmissionResult) -> str:
    return ", ".join(i for i in (result.canvas_user_id, result.sis_user_id, result.sis_login_id) if i)


def _roster_ids(row: RosterRow) -> str:
    return ", ".join(i for i in (row.canvas_id, row.sis_user_id, row.sis_login_id) if i) or "no ids"


def read_roster(text: str, source: str = "roster") -> list[RosterRow]:
    """Students from Canvas's gradebook export (CSV text): its identity columns; the points-possible and
    mute rows, and Canvas's "Student, Test" preview student, are left out."""
    rows = list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))
    header = rows[0].keys() if rows else []
    missing = [c for c in ("Student", "ID") if c not in header]
    if missing:
        raise ValueError(f"{source}: not a Canvas gradebook export (no {' or '.join(missing)} column)")
    roster = []
    for row in rows:
        student = (row.get("Student") or "").strip()
        canvas_id = (row.get("ID") or "").strip()
        if not canvas_id or student in ("Points Possible", "Student, Test") or not canvas_id.isdigit():
            continue
        roster.append(RosterRow(student, canvas_id, (row.get("SIS User ID") or "").strip(),
                                (row.get("SIS Login ID") or "").strip(), (row.get("Section") or "").strip()))
    return roster
