"""Instructor and LMS exports: each is a pure function of SubmissionResults; check what its consumer relies on."""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from junitparser import Error, Failure, JUnitXml

from grader.report.canvas_csv import CanvasOptions, read_roster, to_canvas
from grader.report.grades_csv import to_grades_csv, write_grades_csv
from grader.report.gradescope import to_gradescope, write_gradescope
from grader.report.junit_report import to_combined_junit
from grader.report.points import SCALE
from grader.report.prairielearn import to_prairielearn, write_prairielearn
from grader.report.status import status_label
from grader.report.student_view import cap, student_message, student_summary
from grader.report.summary_html import (
    SCORE_PNG,
    TIMING_PNG,
    common_failures,
    timing_ratios,
    write_summary,
)
from grader.result import (
    CASE,
    COMPILE,
    COMPILE_ERROR,
    GRADED,
    GRADER_ERROR,
    HIDDEN,
    STATIC,
    SUBMISSION_ERROR,
    TIMED_OUT,
    TIMING,
    CheckResult,
    SubmissionResult,
    errored,
    failed,
    passed,
    skipped,
)

SECRET = "SECRET_SHAPE_129x257x65"
# A hidden case's diagnostic long enough to be truncated, full of things a student must not see.
HIDDEN_DIAGNOSTIC = f"{SECRET}: 812 of 33153 elements wrong\n" + "expected 1.0 got 2.0 at (128, 256)\n" * 200
LONG_PUBLIC = "nvcc: error: something\n" * 300  # 6900 characters
HOSTILE = '<script>alert("x")</script> & µs'
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def validate(data, schema) -> None:
    # A plain import (the `test` extra installs jsonschema; a missing one fails here, never skips), made
    # inside so that `pytest -m gpu` still collects this file on a GPU machine that lacks it.
    import jsonschema

    jsonschema.validate(data, schema)


def _timing(ratio: float, points: float = 10) -> CheckResult:
    metrics = {"student_ms": 1.0 * ratio, "reference_ms": 1.0, "ratio": ratio, "max_ratio": 2.0}
    if ratio <= 2.0:
        return passed("speed vs reference", TIMING, points, f"{ratio:.2f}× the reference's time", metrics=metrics)
    return failed("speed vs reference", TIMING, points, f"{ratio:.2f}× the reference's time: too slow",
                  metrics=metrics)


def _statics(all_pass: bool = True) -> list[CheckResult]:
    return [
        passed("shared-memory tiles", STATIC, 2, "tiles As, Bs"),
        passed("barrier after loading tiles", STATIC, 4, "line 20"),
        passed("barrier after using tiles", STATIC, 4, "line 25") if all_pass
        else failed("barrier after using tiles", STATIC, 4, "line 25: no __syncthreads() after the inner loop"),
    ]


def alice() -> SubmissionResult:
    """Everything passes."""
    return SubmissionResult(
        "alice_sub", GRADED, student_id="1001", student_name="Alice Archer", duration_s=12.4,
        checks=[passed("compile", COMPILE, 1, "compiled for sm_90, TILE_SIZE 16"), *_statics(),
                passed("square_64", CASE, 3), passed("ragged_m", CASE, 4),
                passed("rect_hidden", CASE, 4, "ok", visibility=HIDDEN), _timing(1.1)])


def bob() -> SubmissionResult:
    """Failed and errored cases, a failed hidden case with a long diagnostic, timing skipped."""
    return SubmissionResult(
        "bob_sub", GRADED, student_id="1002", student_name="Bob <Builder> & Co",
        checks=[passed("compile", COMPILE, 1, "compiled"), *_statics(all_pass=False),
                passed("square_64", CASE, 3),
                failed("ragged_m", CASE, 4, f"{HOSTILE}\nrows 64..66 wrong"),
                errored("ragged_n", CASE, 4, "timed out after 10 s: the kernel did not finish\n(case: m=64, n=67)"),
                failed("rect_hidden", CASE, 4, HIDDEN_DIAGNOSTIC, visibility=HIDDEN),
                skipped("speed vs reference", TIMING, 10, "not timed: 3 of 4 cases did not pass")])


def carol() -> SubmissionResult:
    """Does not compile; cases skipped; its static checks score nothing, as the pipeline settles them by default
    (points.static_after_compile_error: false)."""
    reason = "not run: the kernel did not compile or load"
    statics = [skipped(c.name, c.kind, c.max_score, "no points: the code does not compile") for c in _statics()]
    return SubmissionResult(
        "carol_sub", COMPILE_ERROR, student_id="1003", student_name="Carol Chen",
        checks=[errored("compile", COMPILE, 1, "kernel.cu(12): error: identifier \"tile\" is undefined"),
                *statics, skipped("square_64", CASE, 3, reason), skipped("ragged_m", CASE, 4, reason),
                skipped("rect_hidden", CASE, 4, reason, visibility=HIDDEN),
                skipped("speed vs reference", TIMING, 10, reason)])


def dave() -> SubmissionResult:
    """Not graded at all: no kernel file, no checks."""
    return SubmissionResult("dave_sub", SUBMISSION_ERROR, student_id="1004", student_name="Dave Doe",
                            message="no kernel file found: hand in kernel.cu")


def erin() -> SubmissionResult:
    """The grader broke on this one: every check skipped with the reason."""
    reason = "internal grader error: tell your instructor"
    return SubmissionResult(
        "erin_sub", GRADER_ERROR, student_id="1005", student_name="Erin Eve", message=reason,
        checks=[skipped("compile", COMPILE, 1, reason), skipped("square_64", CASE, 3, reason),
                skipped("rect_hidden", CASE, 4, reason, visibility=HIDDEN),
                skipped("speed vs reference", TIMING, 10, reason)])


def frank() -> SubmissionResult:
    """Compilation timed out; a slow kernel's timing from an earlier check is not there."""
    return SubmissionResult(
        "frank_sub", TIMED_OUT, student_id="1006", student_name="Frank Fox",
        checks=[errored("compile", COMPILE, 1, "compilation timed out after 60 s"), *_statics(),
                skipped("square_64", CASE, 3, "not run"), _timing(3.5)])


def everyone() -> list[SubmissionResult]:
    return [alice(), bob(), carol(), dave(), erin(), frank()]


# ---------------------------------------------------------------- status label


@pytest.mark.parametrize("make, label", [(alice, "graded"), (bob, "graded"), (carol, "compile error"),
                                         (dave, "submission error"), (erin, "grader error"), (frank, "timed out")])
def test_status_label(make, label):
    assert status_label(make()) == label


def test_the_label_is_the_stored_outcome_never_read_from_message_text():
    # A student's compile error that happens to say "grader error" is still the student's compile error.
    r = SubmissionResult("x", COMPILE_ERROR, [errored("compile", COMPILE, 1, "line 3: 'grader error' undeclared")],
                         message="the grader's note")
    assert status_label(r) == "compile error"
    assert SubmissionResult.from_dict(r.to_dict()).outcome == COMPILE_ERROR


def test_status_in_json_is_the_coarse_graded_or_error():
    assert erin().to_dict()["status"] == "error" and erin().to_dict()["outcome"] == "grader error"
    assert carol().to_dict()["status"] == "graded"


# ---------------------------------------------------------------- student view


def test_cap_marks_what_it_cuts():
    text = "x" * 5000
    capped = cap(text)
    assert capped == "x" * 4000 + "\n[... 1000 more characters truncated ...]"
    assert cap(text, 10).endswith("\n[... 4990 more characters truncated ...]")
    assert cap("y" * 4000) == "y" * 4000  # exactly at the limit: untouched
    with pytest.raises(ValueError):
        cap("z", -1)


def test_student_message_hides_hidden_cases():
    hidden = bob().checks[7]
    assert hidden.visibility == HIDDEN
    assert student_message(hidden) == "failed"
    err = errored("h", CASE, 1, "timed out (case: m=1, n=2, k=3)", visibility=HIDDEN)
    assert student_message(err) == "error"
    assert student_message(skipped("h", CASE, 1, "not run: m=1", visibility=HIDDEN)) == "skipped"
    assert student_message(passed("h", CASE, 1, "m=1 fine", visibility=HIDDEN)) == "passed"


def test_student_message_caps_public_text():
    check = errored("compile", COMPILE, 1, LONG_PUBLIC)
    shown = student_message(check)
    assert shown.startswith(LONG_PUBLIC[:4000])
    assert shown.endswith(f"[... {len(LONG_PUBLIC) - 4000} more characters truncated ...]")
    assert student_message(check, limit=100) == LONG_PUBLIC[:100] + f"\n[... {len(LONG_PUBLIC) - 100} more " \
                                                                    "characters truncated ...]"
    assert student_message(failed("c", CASE, 1, "short")) == "short"


def test_student_summary():
    assert student_summary(alice()).startswith("Score: 32/32 (graded)")
    summary = student_summary(dave())
    assert "could not be graded" in summary and "no kernel file found" in summary


# ---------------------------------------------------------------- grades.csv


def _grades_rows(text: str) -> tuple[list[str], dict[str, str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return reader.fieldnames, rows[0], rows[1:]


def test_grades_csv_row_per_student_and_points_possible(tmp_path):
    results = everyone()
    path = write_grades_csv(results, tmp_path / "grades.csv")
    header, possible, rows = _grades_rows(path.read_text(encoding="utf-8"))
    assert header[:4] == ["submission", "student_id", "student_name", "status"]
    assert header[-4:] == ["total", "max", "late", "intake notes"]
    # Union of check names in first-seen order: bob adds ragged_n, dave has none.
    assert header[4:-4] == [*(c.name for c in alice().checks), "ragged_n"]
    assert possible["submission"] == "points possible"
    assert [possible[n] for n in header[4:-4]] == ["1", "2", "4", "4", "3", "4", "4", "10", "4"]
    assert possible["total"] == possible["max"] == "36"
    assert [r["submission"] for r in rows] == [r.submission for r in results]
    assert [r["student_id"] for r in rows] == ["1001", "1002", "1003", "1004", "1005", "1006"]
    assert [r["status"] for r in rows] == ["graded", "graded", "compile error", "submission error",
                                           "grader error", "timed out"]
    for row, result in zip(rows, results):
        # A row not graded is out of what the run could award anyone.
        assert float(row["max"]) == pytest.approx(result.max_score if result.graded else 36)
        cells = [float(row[n]) for n in header[4:-4] if row[n] != ""]
        if result.outcome == "grader error":  # nothing was decided: empty, never a low grade
            assert row["total"] == "" and cells == []
            continue
        assert float(row["total"]) == pytest.approx(result.score)
        assert sum(cells) == pytest.approx(float(row["total"]))


def test_grades_csv_values():
    _, _, rows = _grades_rows(to_grades_csv(everyone()))
    alice_row, bob_row, _, dave_row, erin_row, frank_row = rows
    assert alice_row["total"] == alice_row["max"] == "32"
    bob = (bob_row["total"], bob_row["ragged_m"], bob_row["rect_hidden"], bob_row["square_64"])
    assert bob == ("10", "0", "0", "3")
    assert bob_row["student_name"] == "Bob <Builder> & Co"
    assert (dave_row["total"], dave_row["max"], dave_row["compile"]) == ("0", "36", "")
    assert erin_row["barrier after loading tiles"] == ""  # erin has no static checks
    assert frank_row["ragged_m"] == alice_row["ragged_n"] == ""
    assert bob_row["ragged_n"] == "0"
    assert frank_row["speed vs reference"] == "0"


def test_grades_csv_check_named_like_a_fixed_column():
    r = SubmissionResult("s", GRADED, [passed("total", CASE, 2), passed("status", STATIC, 1)])
    header, possible, (row,) = _grades_rows(to_grades_csv([r]))
    assert header == ["submission", "student_id", "student_name", "status", "check total", "check status",
                      "total", "max", "late", "intake notes"]
    assert (row["status"], row["check total"], row["total"]) == ("graded", "2", "3")
    assert (possible["check total"], possible["check status"], possible["total"]) == ("2", "1", "3")


# ---------------------------------------------------------------- Canvas


def canvas_rows(results, **options) -> tuple[list[list[str]], list[str]]:
    export = to_canvas(results, CanvasOptions(**options))
    return list(csv.reader(io.StringIO(export.csv))), export.notes


def with_ids(result: SubmissionResult, canvas="", sis="", login="") -> SubmissionResult:
    result.canvas_user_id, result.sis_user_id, result.sis_login_id = canvas, sis, login
    return result


def test_canvas_header_points_and_each_id_in_its_own_column():
    # alice came from a Canvas zip (a Canvas user id), bob from Gradescope (an SID), carol by email.
    results = [with_ids(alice(), canvas="1001"), with_ids(bob(), sis="s1002"), with_ids(carol(), login="c@u.edu")]
    rows, notes = canvas_rows(results, assignment="Lab 3", assignment_id="4242")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 3 (4242)"]
    assert rows[1] == ["Points Possible", "", "", "", "", "36"]  # the largest max_score
    assert rows[2] == ["Alice Archer", "1001", "", "", "", "32"]
    assert rows[3] == ["Bob <Builder> & Co", "", "s1002", "", "", "10"]
    assert rows[4] == ["Carol Chen", "", "", "c@u.edu", "", "0"]
    assert notes == []


def test_canvas_never_puts_a_non_canvas_id_in_the_id_column():
    # student_id as intake read it (an SID from a Gradescope export) is not a Canvas user id.
    rows, notes = canvas_rows([alice()])
    assert rows[2][:4] == ["Alice Archer", "", "", ""]
    assert notes == ["Alice Archer [alice_sub]: no id Canvas can match this row by"]


def test_canvas_points_possible_rescales():
    rows, _ = canvas_rows([with_ids(alice(), canvas="1"), with_ids(bob(), canvas="2")], points_possible=100)
    assert rows[1][5] == "100"
    assert [r[5] for r in rows[2:]] == ["100", "27.777778"]  # 32 of 32 and 10 of 36, as shares of 100


def test_canvas_grader_error_is_an_empty_cell_and_listed_never_zero():
    rows, notes = canvas_rows([with_ids(erin(), canvas="1005"), with_ids(dave(), canvas="1004")])
    assert rows[2] == ["Erin Eve", "1005", "", "", "", ""]
    assert rows[3][5] == "0"  # dave handed in nothing gradable: that is his 0
    # Both listed: the empty cell, and the 0 that is a submission error (the instructor checks who got it and why).
    assert notes == ["Erin Eve [erin_sub]: empty cell, grading broke (grader error): grade again, then import",
                     "Dave Doe [dave_sub]: 0, a submission error (no kernel file found: hand in kernel.cu)"]


def cpu_run() -> SubmissionResult:
    """A correct kernel graded without a GPU: 74 of 74 checkable, 26 need a GPU."""
    return with_ids(SubmissionResult("gil_sub", GRADED, student_name="Gil", checks=[
        passed("square_64", CASE, 74),
        skipped("square_512", CASE, 16, "not run: GPU only", needs_gpu="large cases"),
        skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu="timing")]), canvas="7")


def test_canvas_from_a_run_without_gpu_holds_or_scales_as_the_instructor_chooses():
    held, notes = canvas_rows([cpu_run()])
    assert held[2] == ["Gil", "7", "", "", "", ""]
    assert "held: graded without a GPU, 26 points not checked" in notes[0]
    scaled, notes = canvas_rows([cpu_run()], without_gpu=SCALE)
    assert (scaled[1][5], scaled[2][5], notes) == ("100", "100", [])
    with pytest.raises(ValueError):
        to_canvas([cpu_run()], CanvasOptions(without_gpu="guess"))


def test_every_class_export_says_the_same_total_for_a_run_without_a_gpu(tmp_path):
    """grades.csv: the checks that were not made have empty cells (their points possible too), every max and
    the points-possible total are what could be checked, and its notes say what needs a GPU; the summary is out
    of the same total and says so."""
    lost = with_ids(SubmissionResult("hal_sub", GRADED, student_name="Hal", checks=[
        failed("square_64", CASE, 74, "wrong"),
        skipped("square_512", CASE, 16, "not run: GPU only", needs_gpu="large cases"),
        skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu="timing")]), canvas="8")
    results = [cpu_run(), lost, dave()]
    _, possible, (gil, hal, dave_row) = _grades_rows(to_grades_csv(results))
    assert (possible["square_512"], possible["speed vs reference"], possible["total"], possible["max"]) == \
        ("", "", "74", "74")
    assert possible["intake notes"] == ("points checkable without a GPU; 26 more need a GPU (large cases, timing): "
                                        "not checked")
    assert (gil["square_64"], gil["square_512"], gil["speed vs reference"], gil["total"], gil["max"]) == \
        ("74", "", "", "74", "74")
    assert (hal["total"], hal["max"], dave_row["max"]) == ("0", "74", "74")
    page = write_summary(results, tmp_path).read_text()
    assert "mean 24.67, median 0 points out of 74 checkable without a GPU" in page
    assert "Graded without a GPU: 26 more need a GPU (large cases, timing), not checked in this run" in page


def test_gradescope_without_a_gpu_scores_held_or_scaled_and_says_what_total_to_give():
    held = to_gradescope(cpu_run())
    assert (held["score"], held["extra_data"]["assignment_points"], held["extra_data"]["without_gpu"]) == \
        (74, 74, "hold")
    assert sum(t["max_score"] for t in held["tests"]) == 74
    scaled = to_gradescope(cpu_run(), without_gpu=SCALE)
    assert (scaled["score"], scaled["extra_data"]["assignment_points"]) == (100, 100)
    assert sum(t["score"] for t in scaled["tests"]) == 74  # the tests are the checks made, as they scored
    assert "Your score counts as its share of the full total: 100/100." in scaled["output"]
    half = SubmissionResult("h", GRADED, [failed("a", CASE, 37, "wrong"), passed("b", CASE, 37),
                                          skipped("t", TIMING, 26, "not timed", needs_gpu="timing")])
    assert to_gradescope(half, without_gpu=SCALE)["score"] == 50
    gpu = to_gradescope(alice(), without_gpu=SCALE)  # a GPU run: nothing to hold or scale
    assert (gpu["score"], gpu["extra_data"]["assignment_points"]) == (32, 32)
    with pytest.raises(ValueError):
        to_gradescope(cpu_run(), without_gpu="guess")


def test_prairielearn_without_a_gpu_tells_what_the_question_stands_for():
    held, scaled = to_prairielearn(cpu_run()), to_prairielearn(cpu_run(), without_gpu=SCALE)
    assert held["score"] == scaled["score"] == 1.0  # a fraction of what could be checked, either way
    assert held["message"] == "graded: 74/74 points checkable without a GPU; 26 more need a GPU (large cases, timing)"
    assert scaled["message"].endswith("; the score is their share of all this question's points")


def test_prairielearn_not_graded_has_one_reason_not_a_test_per_check():
    """A result not graded has every check skipped with one reason: in format_errors once, never 26 times."""
    for result in (erin(), SubmissionResult("x", SUBMISSION_ERROR, alice().checks, message="no kernel.cu")):
        data = to_prairielearn(result)
        assert data["gradable"] is False and data["tests"] == []
        assert data["format_errors"] == [result.message]


def test_the_class_summary_groups_failures_by_cause_not_by_case_or_size():
    """One student's missing barrier in every case is one cause, counted once; two students' out-of-bounds
    reads at different lines and sizes are one cause too; a message without a fix or unsafe kind is grouped by
    its first line with the numbers left out."""
    race = "add __syncthreads() after the loop that uses the tiles"

    def racy(name: str) -> SubmissionResult:
        return SubmissionResult(name, GRADED, [
            failed(f"case_{size}", CASE, 1, f"{size} of {size * size} elements wrong", fixes=[race])
            for size in (16, 37, 64)])

    def out_of_bounds(name: str, line: int, size: int) -> SubmissionResult:
        return SubmissionResult(name, GRADED, [failed(f"case_{size}", CASE, 1, f"line {line}: reads B[{size}][0] past "
                                                      "B's end", unsafe=["out_of_bounds_read"])])

    results = [racy("ann"), out_of_bounds("ben", 21, 37), out_of_bounds("cal", 23, 64), racy("dee"),
               SubmissionResult("eve", GRADED, [failed("case_16", CASE, 1, "C[0][3] is NaN, stored at line 9")])]
    failures = common_failures(results)
    assert [(f.cause, len(f.submissions), list(f.checks)) for f in failures] == [
        (race, 2, ["case_16", "case_37", "case_64"]),
        ("unsafe: out_of_bounds_read", 2, ["case_37", "case_64"]),
        ("C[N][N] is NaN, stored at line N", 1, ["case_16"])]
    assert failures[1].example == "line 21: reads B[37][0] past B's end"


ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Lab 3 (4242)
    Points Possible,,,,,100
"Archer, Alice",1001,s1001,aarcher,Section A,
"Chen, Carol",1003,s1003,c@u.edu,Section B,
"Zhou, Zed",1009,s1009,zzhou,Section B,
"Student, Test",9999,,,Section A,
"""


def test_canvas_roster_fills_identity_and_lists_who_is_missing():
    roster = read_roster(ROSTER)
    assert [r.student for r in roster] == ["Archer, Alice", "Chen, Carol", "Zhou, Zed"]
    results = [with_ids(alice(), sis="s1001"), with_ids(carol(), login="C@U.EDU"),
               with_ids(frank(), sis="s4040")]
    rows, notes = canvas_rows(results, roster=roster)
    assert rows[2] == ["Archer, Alice", "1001", "s1001", "aarcher", "Section A", "32"]
    assert rows[3] == ["Chen, Carol", "1003", "s1003", "c@u.edu", "Section B", "0"]
    assert rows[4] == ["Frank Fox", "", "s4040", "", "", "10"]
    assert "frank_sub: no roster row (ids: s4040)" in notes
    assert "Zhou, Zed (1009, s1009, zzhou): on the roster, no submission" in notes
    with pytest.raises(ValueError, match="not a Canvas gradebook export"):
        read_roster("name,score\nx,1\n")


def test_canvas_title_must_not_be_empty():
    with pytest.raises(ValueError):
        to_canvas([alice()], CanvasOptions(assignment="  "))


# ---------------------------------------------------------------- Gradescope

FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}
VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
# Written from https://gradescope-autograders.readthedocs.io/en/latest/specs/ ("Output format",
# "Test case status", "Output String Formatting"); unknown keys are refused to catch typos.
GRADESCOPE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "score": {"type": "number"},
                    "max_score": {"type": "number"},
                    "status": {"enum": ["passed", "failed"]},
                    "name": {"type": "string"},
                    "name_format": FORMAT,
                    "number": {"type": "string"},
                    "output": {"type": "string"},
                    "output_format": FORMAT,
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "visibility": VISIBILITY,
                    "extra_data": {"type": "object"},
                },
            },
        },
        "leaderboard": {"type": "array", "items": {"type": "object", "required": ["name", "value"]}},
    },
    # "score: optional, but required if not on each test case"
    "anyOf": [{"required": ["score"]},
              {"required": ["tests"], "properties": {"tests": {"items": {"required": ["score"]}}}}],
}


@pytest.mark.parametrize("make", [alice, bob, carol, dave, erin, frank])
def test_gradescope_matches_spec(make):
    result = make()
    data = to_gradescope(result)
    validate(data, GRADESCOPE_SCHEMA)
    assert json.loads(json.dumps(data)) == data
    # A grader error graded nothing, so it shows no failed tests (its output says why, not a score).
    assert len(data["tests"]) == (0 if result.outcome == "grader error" else len(result.checks))


def test_gradescope_scores_and_statuses():
    data = to_gradescope(bob(), execution_time=41.6)
    assert data["score"] == 10
    assert data["execution_time"] == 42
    tests = {t["name"]: t for t in data["tests"]}
    assert tests["case: square_64"] == {**tests["case: square_64"], "score": 3, "max_score": 3, "status": "passed"}
    assert tests["case: ragged_m"]["status"] == "failed"
    assert tests["case: ragged_n"]["status"] == "failed"
    assert tests["case: ragged_n"]["extra_data"] == {"kind": "case", "status": "error"}
    assert tests["case: ragged_m"]["output"].startswith(HOSTILE)  # shown as text, not HTML
    assert data["output_format"] == data["test_output_format"] == "text"
    # A passed check keeps "passed" even with partial points.
    partial = SubmissionResult("p", GRADED, [CheckResult("speed", TIMING, "passed", 1.5, 3, "slowish")])
    assert to_gradescope(partial)["tests"][0]["status"] == "passed"
    assert to_gradescope(alice())["execution_time"] == 12  # the result's own duration
    assert "execution_time" not in to_gradescope(carol())


def test_gradescope_never_shows_hidden_text():
    data = to_gradescope(bob())
    text = json.dumps(data)
    assert SECRET not in text
    assert "expected 1.0 got 2.0" not in text
    (hidden,) = [t for t in data["tests"] if t["name"] == "case: rect_hidden"]
    assert hidden["output"] == "failed"
    # Gradescope's own value: shown once the due date has passed, and then only the verdict.
    assert hidden["visibility"] == "after_due_date"
    assert {t["visibility"] for t in data["tests"] if t["name"] != "case: rect_hidden"} == {"visible"}
    published = to_gradescope(bob(), hidden_visibility="after_published")
    assert [t["visibility"] for t in published["tests"] if t["name"] == "case: rect_hidden"] == ["after_published"]
    with pytest.raises(ValueError):
        to_gradescope(bob(), hidden_visibility="secret")
    assert hidden["score"] == 0 and hidden["max_score"] == 4


def test_gradescope_caps_long_output():
    r = SubmissionResult("s", GRADED, [errored("compile", COMPILE, 1, LONG_PUBLIC)])
    output = to_gradescope(r)["tests"][0]["output"]
    assert output.endswith(f"[... {len(LONG_PUBLIC) - 4000} more characters truncated ...]")
    assert len(output) < 4100


def test_gradescope_submission_error_is_valid_with_score_zero(tmp_path):
    # A grader error that happened after static checks earned points still scores 0 on Gradescope.
    r = SubmissionResult("x", SUBMISSION_ERROR, [passed("shared-memory tiles", STATIC, 2, "ok")],
                         message="grader error: the reference kernel does not compile")
    data = to_gradescope(r)
    validate(data, GRADESCOPE_SCHEMA)
    assert data["score"] == 0
    assert "could not be graded" in data["output"] and "reference kernel" in data["output"]
    path = write_gradescope(dave(), tmp_path / "results" / "results.json", execution_time=3)
    written = json.loads(path.read_text(encoding="utf-8"))
    validate(written, GRADESCOPE_SCHEMA)
    assert (written["score"], written["tests"], written["execution_time"]) == (0, [], 3)
    assert "no kernel file found" in written["output"]


def test_gradescope_scripts_are_valid_shell():
    for name in ("setup.sh", "run_autograder"):
        path = ROOT / "gradescope" / name
        assert path.stat().st_mode & 0o111, f"{name} must be executable"
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
        if shutil.which("bash"):
            subprocess.run(["bash", "-n", str(path)], check=True)
    run = (ROOT / "gradescope" / "run_autograder").read_text()
    assert "python3 -m grader gradescope /autograder/submission \"$RESULTS\"" in run
    assert "RESULTS=/autograder/results/results.json" in run


# ---------------------------------------------------------------- PrairieLearn

# Written from https://prairielearn.readthedocs.io/en/latest/externalGrading/ ("Grading results").
PL_TEST_KEYS = {"name", "description", "points", "max_points", "message", "output", "images"}
PL_SCHEMA = {
    "type": "object",
    "properties": {
        "gradable": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"},
        "output": {"type": "string"},
        "format_errors": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "images": {"type": "array"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "points", "max_points"],
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "points": {"type": "number", "minimum": 0},
                    "max_points": {"type": "number", "minimum": 0},
                    "message": {"type": "string"},
                    "output": {"type": "string"},
                    "images": {"type": "array"},
                },
            },
        },
    },
    # "If the submission is gradable, the result only has one mandatory field: score"
    "if": {"properties": {"gradable": {"const": False}}, "required": ["gradable"]},
    "then": {"required": ["format_errors"]},
    "else": {"required": ["score"]},
}


@pytest.mark.parametrize("make", [alice, bob, carol, dave, erin, frank])
def test_prairielearn_matches_docs(make):
    data = to_prairielearn(make())
    validate(data, PL_SCHEMA)
    assert set(data) <= {"gradable", "score", "message", "output", "format_errors", "tests"}
    assert all(set(t) <= PL_TEST_KEYS for t in data["tests"])


def test_prairielearn_scores():
    assert to_prairielearn(alice())["score"] == 1.0
    assert to_prairielearn(bob())["score"] == pytest.approx(10 / 36)
    assert to_prairielearn(carol())["score"] == 0  # static points of code that does not build do not count
    tests = {t["name"]: t for t in to_prairielearn(bob())["tests"]}
    assert (tests["square_64"]["points"], tests["square_64"]["max_points"]) == (3, 3)
    assert tests["ragged_n"]["message"] == "error"
    assert tests["ragged_n"]["output"].startswith("timed out after 10 s")


def test_prairielearn_hidden_and_not_gradable(tmp_path):
    data = to_prairielearn(bob())
    assert SECRET not in json.dumps(data)
    (hidden,) = [t for t in data["tests"] if t["name"] == "rect_hidden"]
    assert (hidden["message"], hidden["output"]) == ("failed", "")
    assert data["gradable"] is True
    path = write_prairielearn(erin(), tmp_path / "grade" / "results" / "results.json")
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["gradable"] is False
    assert written["score"] == 0.0
    assert written["format_errors"] == ["internal grader error: tell your instructor"]
    assert written["message"].startswith("grader error")


# ---------------------------------------------------------------- combined JUnit


def test_combined_junit_one_suite_per_student(tmp_path):
    results = everyone()
    path = tmp_path / "class.junit.xml"
    path.write_text(to_combined_junit(results), encoding="utf-8")
    suites = list(JUnitXml.fromfile(str(path)))
    assert [s.name for s in suites] == ["Alice Archer (1001) [alice_sub]", "Bob <Builder> & Co (1002) [bob_sub]",
                                        "Carol Chen (1003) [carol_sub]", "Dave Doe (1004) [dave_sub]",
                                        "Erin Eve (1005) [erin_sub]", "Frank Fox (1006) [frank_sub]"]
    for suite, result in zip(suites, results):
        statuses = [c.status for c in result.checks]
        not_graded = not result.graded
        assert suite.tests == len(statuses) + not_graded
        assert suite.failures == statuses.count("failed")
        assert suite.errors == statuses.count("error") + not_graded
        assert suite.skipped == statuses.count("skipped")
        props = {p.name: p.value for p in suite.properties()}
        assert props["student_id"] == result.student_id
        assert props["status_label"] == status_label(result)
    bob_suite = suites[1]
    assert (bob_suite.failures, bob_suite.errors) == (3, 1)
    failures = [r for case in bob_suite for r in case.result if isinstance(r, Failure)]
    assert any(SECRET in f.text for f in failures)  # instructor-facing: full hidden text kept
    dave_cases = list(suites[3])
    assert [type(r) for r in dave_cases[0].result] == [Error]


def test_combined_junit_without_identity_uses_submission():
    xml = to_combined_junit([SubmissionResult("folder_a", GRADED, [passed("c", CASE, 1)])])
    assert [s.name for s in JUnitXml.fromstring(xml)] == ["folder_a"]


# ---------------------------------------------------------------- class summary


def test_summary_metrics():
    assert timing_ratios(everyone()) == [1.1, 3.5]
    # Ties keep the order they were first seen in; numbers (lines, sizes, values) are no part of a cause.
    assert [(f.cause, len(f.submissions), list(f.checks), f.example) for f in common_failures(everyone())] == [
        ("line N: no __syncthreads() after the inner loop", 1, ["barrier after using tiles"],
         "line 25: no __syncthreads() after the inner loop"),
        (HOSTILE, 1, ["ragged_m"], HOSTILE),
        ("timed out after N s: the kernel did not finish", 1, ["ragged_n"],
         "timed out after 10 s: the kernel did not finish"),
        ("SECRET_SHAPE_NxNxN: N of N elements wrong", 1, ["rect_hidden"], f"{SECRET}: 812 of 33153 elements wrong"),
        ('kernel.cu(N): error: identifier "tile" is undefined', 1, ["compile"],
         'kernel.cu(12): error: identifier "tile" is undefined'),
        ("compilation timed out after N s", 1, ["compile"], "compilation timed out after 60 s"),
        ("N× the reference's time: too slow", 1, ["speed vs reference"], "3.50× the reference's time: too slow"),
    ]
    many = [SubmissionResult(f"s{i}", GRADED, [failed("square_64", CASE, 3, "wrong\nmore")]) for i in range(4)]
    top = common_failures(many + [bob()])[0]
    assert (top.cause, len(top.submissions)) == ("wrong", 4)
    assert len(common_failures([SubmissionResult(f"s{i}", GRADED, [failed("c", CASE, 1, f"x{'y' * i}")])
                                for i in range(15)])) == 10


def test_summary_page_with_plots(tmp_path):
    page = write_summary(everyone(), tmp_path / "summary")
    text = page.read_text(encoding="utf-8")
    assert page.name == "index.html"
    for label, count in (("graded", 2), ("compile error", 1), ("timed out", 1), ("grader error", 1),
                         ("submission error", 1)):
        assert f"<tr><td>{label}</td><td class=n>{count}</td></tr>" in text
    assert "6 submissions" in text
    # scores: 32, 10, 0, 0, 0, 10 -> mean 8.67, median 5
    assert "mean 8.67, median 5 points out of 36" in text
    for name in (SCORE_PNG, TIMING_PNG):
        assert (tmp_path / "summary" / name).read_bytes().startswith(PNG_MAGIC)
    assert text.count("data:image/png;base64,") == 2
    # Student text is escaped, never live markup.
    assert "<script>" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; µs" in text
    assert "Most common failures" in text


def test_summary_without_timing_data(tmp_path):
    page = write_summary([carol(), dave()], tmp_path)
    text = page.read_text(encoding="utf-8")
    assert (tmp_path / SCORE_PNG).read_bytes().startswith(PNG_MAGIC)
    assert not (tmp_path / TIMING_PNG).exists()
    assert "No timing measurements" in text


def test_summary_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    page = write_summary(everyone(), tmp_path)
    text = page.read_text(encoding="utf-8")
    assert "plots need matplotlib" in text
    assert "<tr><td>compile error</td><td class=n>1</td></tr>" in text
    assert not list(tmp_path.glob("*.png"))
    assert "data:image/png" not in text


def test_summary_of_no_results(tmp_path):
    text = write_summary([], tmp_path).read_text(encoding="utf-8")
    assert "0 submissions" in text and "No submissions." in text


@pytest.mark.parametrize("entry", ["gradescope", "prairielearn"])
def test_lms_entries_always_write_a_valid_results_file(entry, tmp_path, config_file):
    """The CLI entries the LMS containers call: a graded kernel, and a folder with no kernel.cu at all."""
    from grader.cli import main

    schema = GRADESCOPE_SCHEMA if entry == "gradescope" else PL_SCHEMA
    good, empty = tmp_path / "good", tmp_path / "empty"
    good.mkdir()
    empty.mkdir()
    shutil.copy(ROOT / "tests" / "submissions" / "good_basic" / "kernel.cu", good / "kernel.cu")
    for folder in (good, empty):
        results = tmp_path / "out" / folder.name / "results.json"
        assert main([entry, str(folder), str(results), "--config", str(config_file), "--no-run"]) == 0
        data = json.loads(results.read_text())
        validate(data, schema)
    assert json.loads((tmp_path / "out" / "empty" / "results.json").read_text())["score"] == 0
