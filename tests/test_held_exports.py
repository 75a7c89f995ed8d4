"""Every export reads "needs GPU grade" from the result model (issue 25): pure renderings, no compiler needed.

A result held for a GPU keeps its emulated cases in the total (errors at 0, needs_gpu empty); only the
large cases and timing need a GPU. No export may write its CPU score as a grade.
"""
import csv
import io

import pytest

from grader.report.canvas_csv import CanvasOptions, to_canvas
from grader.report.grades_csv import to_grades_csv
from grader.report.gradescope import to_gradescope
from grader.report.points import HOLD, SCALE
from grader.report.prairielearn import to_prairielearn
from grader.report.summary_html import render_summary
from grader.result import (
    CASE,
    COMPILE,
    GRADED,
    NEEDS_GPU_GRADE,
    STATIC,
    TIMING,
    SubmissionResult,
    errored,
    passed,
    skipped,
)

REASON = "uses inline PTX (line 7), which the CPU grader cannot run: it is graded on a GPU"


def result(outcome: str, case_passed: bool) -> SubmissionResult:
    case = (passed("square_16", CASE, 20, "correct") if case_passed
            else errored("square_16", CASE, 20, REASON, metrics={"line": 7}))
    return SubmissionResult(outcome.replace(" ", "_"), outcome, [
        passed("compile", COMPILE, 0, "compiled"),
        passed("load barrier", STATIC, 10),
        case,
        skipped("large", CASE, 30, "not run: GPU only", needs_gpu="large cases"),
        skipped("speed vs reference", TIMING, 40, "not timed", needs_gpu="timing")], backend="cpu")


HELD, FULL = result(NEEDS_GPU_GRADE, False), result(GRADED, True)


@pytest.mark.parametrize("without_gpu", [HOLD, SCALE])
def test_canvas_leaves_a_held_grade_empty_with_a_note_however_cpu_scores_are_exported(without_gpu):
    export = to_canvas([HELD, FULL], CanvasOptions(without_gpu=without_gpu))
    cells = {row["Student"]: row["SGEMM lab"] for row in csv.DictReader(io.StringIO(export.csv))}
    assert cells[HELD.submission] == ""
    assert cells[FULL.submission] == ("" if without_gpu == HOLD else "100")
    held = [note for note in export.notes if note.startswith(HELD.submission) and "empty cell" in note]
    assert len(held) == 1 and "held: needs a GPU grade" in held[0] and "10/30" in held[0]


def test_grades_csv_shows_the_cpu_score_and_the_status():
    rows = {row["submission"]: row for row in csv.DictReader(io.StringIO(to_grades_csv([HELD])))}
    row = rows[HELD.submission]
    assert row["status"] == NEEDS_GPU_GRADE and row["total"] == "10" and row["square_16"] == "0"


def test_lms_files_score_it_out_of_the_same_checkable_total_with_the_reason():
    assert HELD.checkable_max == FULL.checkable_max == 30
    gradescope = to_gradescope(HELD)
    assert gradescope["score"] == 10 and gradescope["extra_data"]["outcome"] == NEEDS_GPU_GRADE
    case = next(t for t in gradescope["tests"] if t["name"] == "case: square_16")
    assert case["score"] == 0 and case["status"] == "failed" and case["output"] == REASON
    prairielearn = to_prairielearn(HELD)
    assert prairielearn["gradable"] and prairielearn["score"] == pytest.approx(10 / 30)
    assert prairielearn["message"].startswith(f"{NEEDS_GPU_GRADE}: 10/30 points")


def test_the_class_summary_counts_the_held_status():
    assert f"<td>{NEEDS_GPU_GRADE}</td><td class=n>1</td>" in render_summary([HELD, FULL], None)


def test_the_terminal_total_says_the_grade_waits_for_a_gpu():
    from rich.console import Console

    from grader.report.terminal import render

    console = Console(record=True, width=200)
    render(HELD, console)
    said = console.export_text()
    assert "Total: 10/30 points checkable without a GPU" in said and "needs GPU grade: its grade waits" in said
