"""The one table of exports. Each is a pure function of stored results (and the instructor's options) to
files by name; `grade batch` writes every class export, the LMS entries write theirs, all from here.

Why one table: adding a format is one module and one row, and no export can read anything but the results
(as Otter-Grader's exporters are registered). Class exports take every student's result; LMS entries one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.report.canvas_csv import CanvasOptions
from grader.report.gradescope import DEFAULT_HIDDEN_VISIBILITY
from grader.report.points import HOLD
from grader.result import SubmissionResult

# Each export's module is imported when the export is written: `grade PATH` reads this table for its options
# and the LMS entries' names, and writes none of the class's files (issue 50: what a grade's start imports).


@dataclass
class ExportOptions:
    canvas: CanvasOptions = field(default_factory=CanvasOptions)
    hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY  # Gradescope's visibility for hidden cases
    compile_error_graded: bool = False  # PrairieLearn: a non-compiling submission is a graded 0
    without_gpu: str = HOLD  # the LMS entries' score from a run without a GPU (canvas: its own option)
    # `grade batch --against`: the earlier grading's stored results, which regrade.csv and the summary's regrade
    # section compare this one with; None for no comparison.
    previous: list[SubmissionResult] | None = None


Files = dict[str, "str | bytes"]  # relative path -> content


@dataclass(frozen=True)
class ClassExport:
    name: str
    main_file: str  # what the batch summary points the instructor to
    render: Callable[[list[SubmissionResult], ExportOptions], Files]


def _canvas(results: list[SubmissionResult], options: ExportOptions) -> Files:
    from grader.report.canvas_csv import to_canvas

    export = to_canvas(results, options.canvas)
    notes = "\n".join(export.notes)
    return {"canvas.csv": export.csv, "canvas-notes.txt": notes + "\n" if notes else ""}


def _summary(results: list[SubmissionResult], options: ExportOptions) -> Files:
    from grader.report.regrade import compare
    from grader.report.summary_html import summary_files

    regrade = compare(options.previous, results) if options.previous is not None else None
    return {f"summary/{name}": content for name, content in summary_files(results, regrade).items()}


def _regrade(results: list[SubmissionResult], options: ExportOptions) -> Files:
    from grader.report.regrade import compare
    from grader.report.regrade_csv import to_regrade_csv

    return {} if options.previous is None else {REGRADE_CSV: to_regrade_csv(compare(options.previous, results))}


def _grades(results: list[SubmissionResult], options: ExportOptions) -> Files:
    from grader.report.grades_csv import to_grades_csv

    return {"grades.csv": to_grades_csv(results)}


def _junit(results: list[SubmissionResult], options: ExportOptions) -> Files:
    from grader.report.junit_report import to_combined_junit

    return {"junit.xml": to_combined_junit(results)}


def _gradescope(result: SubmissionResult, path: Path, seconds: float, options: ExportOptions) -> Path:
    from grader.report.gradescope import write_gradescope

    return write_gradescope(result, path, seconds, options.hidden_visibility, options.without_gpu)


def _prairielearn(result: SubmissionResult, path: Path, seconds: float, options: ExportOptions) -> Path:
    from grader.report.prairielearn import write_prairielearn

    return write_prairielearn(result, path, options.compile_error_graded, options.without_gpu)


REGRADE_CSV = "regrade.csv"
CLASS_EXPORTS: tuple[ClassExport, ...] = (
    ClassExport("grades", "grades.csv", _grades),
    ClassExport("canvas", "canvas.csv", _canvas),
    ClassExport("junit", "junit.xml", _junit),
    ClassExport("summary", "summary/index.html", _summary),
    ClassExport("regrade", REGRADE_CSV, _regrade),  # only with --against
)


@dataclass(frozen=True)
class LmsEntry:
    name: str
    usage: str  # what the LMS calls the command with
    write: Callable[[SubmissionResult, Path, float, ExportOptions], Path]


LMS_ENTRIES: dict[str, LmsEntry] = {
    "gradescope": LmsEntry("gradescope", "grade gradescope /autograder/submission /autograder/results/results.json",
                           _gradescope),
    "prairielearn": LmsEntry("prairielearn", "grade prairielearn /grade/student /grade/results/results.json",
                             _prairielearn),
}


def class_files(results: list[SubmissionResult], options: ExportOptions) -> Files:
    """Every class export's files, by path relative to the batch's output folder."""
    files: Files = {}
    for export in CLASS_EXPORTS:
        files.update(export.render(results, options))
    return files
