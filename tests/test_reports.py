"""Reporters are pure renderings of the result model: check what a consumer of each format relies on."""
from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped
from rich.console import Console

from grader.report import render, to_json, to_junit_suite, to_junit_xml, write_json, write_junit
from grader.result import (
    CASE,
    COMPILE,
    GRADED,
    HIDDEN,
    STATIC,
    SUBMISSION_ERROR,
    TIMING,
    CheckResult,
    SubmissionResult,
    errored,
    failed,
    passed,
    skipped,
)

MULTILINE = "max abs error 3.1e-2 at (17, 40)\nexpected 12.5\ngot 12.469"
HOSTILE = 'bad <tile> & "quoted" \'single\' µs ≥ limit'
HIDDEN_MSG = "hidden case secret_shape_777 mismatched at (5, 9)"


def _graded() -> SubmissionResult:
    return SubmissionResult(
        submission="alice",
        outcome=GRADED,
        checks=[
            passed("build", COMPILE, 10, "compiled cleanly", metrics={"seconds": 1.25}),
            failed("uses_shared_memory", STATIC, 2.5, HOSTILE),
            passed("square_64", CASE, 4),
            failed("rect_65x33", CASE, 4, MULTILINE),
            errored("huge_2048", CASE, 5, "timed out after 10 s"),
            failed("secret_1", CASE, 3, HIDDEN_MSG, visibility=HIDDEN),
            CheckResult("speedup", TIMING, "passed", 1.5, 3, "2.1x over naive", metrics={"gflops": 812.0}),
            skipped("speedup_large", TIMING, 2, "skipped: huge_2048 did not pass"),
        ],
        message="graded on the fallback backend",
        backend="pycuda",
        device="NVIDIA H100",
        tile_size=16,
        log="child output that reports never show",
    )


def _broken() -> SubmissionResult:
    return SubmissionResult(submission="bob", outcome=SUBMISSION_ERROR, message="no kernel file sgemm.cu found")


EXPECTED_TYPE = {"passed": None, "failed": Failure, "error": Error, "skipped": Skipped}


# ---------------------------------------------------------------- JSON


def test_json_required_keys_and_order():
    r = _graded()
    data = json.loads(to_json(r))
    assert list(data)[:6] == ["submission", "score", "max_score", "status", "outcome", "checks"]
    assert len(data["checks"]) == len(r.checks)
    for check in data["checks"]:
        assert {"name", "kind", "status", "score", "max_score", "message"} <= set(check)
    assert "log" not in data


def test_json_score_is_sum_of_checks():
    data = json.loads(to_json(_graded()))
    assert data["score"] == pytest.approx(sum(c["score"] for c in data["checks"]))
    assert data["max_score"] == pytest.approx(sum(c["max_score"] for c in data["checks"]))
    assert (data["score"], data["max_score"]) == (15.5, 33.5)


@pytest.mark.parametrize("make", [_graded, _broken])
def test_json_round_trip(make, tmp_path):
    r = make()
    assert SubmissionResult.from_dict(json.loads(to_json(r))).to_dict() == r.to_dict()
    path = tmp_path / "r.json"
    write_json(r, path)
    assert json.loads(path.read_text(encoding="utf-8")) == r.to_dict()


def test_json_keeps_hostile_text():
    data = json.loads(to_json(_graded()))
    assert [c["message"] for c in data["checks"] if c["name"] == "uses_shared_memory"] == [HOSTILE]


# ---------------------------------------------------------------- JUnit


def _read_suites(tmp_path, result=None, xml=None):
    path = tmp_path / "junit.xml"
    if xml is None:
        write_junit(result, path)
    else:
        path.write_text(xml, encoding="utf-8")
    return list(JUnitXml.fromfile(str(path)))


def test_junit_one_suite_named_by_submission(tmp_path):
    suites = _read_suites(tmp_path, _graded())
    assert [s.name for s in suites] == ["alice"]


def test_junit_result_type_per_check(tmp_path):
    r = _graded()
    (suite,) = _read_suites(tmp_path, r)
    cases = list(suite)
    assert len(cases) == len(r.checks)
    for check, case in zip(r.checks, cases):
        expected = EXPECTED_TYPE[check.status]
        if expected is None:
            assert case.result == [], check.name
        else:
            assert [type(x) for x in case.result] == [expected], check.name
        assert case.classname == f"alice.{check.kind}"


def test_junit_messages_survive_escaping(tmp_path):
    r = _graded()
    (suite,) = _read_suites(tmp_path, r)
    for check, case in zip(r.checks, suite):
        # A student's JUnit shows only the verdict of a hidden case.
        shown = check.status if check.visibility == HIDDEN else check.message
        for res in case.result:
            # The element text is verbatim; the attribute has newlines folded by any XML parser.
            assert res.text == shown
            assert res.message == " ".join(shown.split("\n"))
    assert HIDDEN_MSG not in (tmp_path / "junit.xml").read_text()
    hostile = [c for c in suite if "uses_shared_memory" in c.name][0]
    assert hostile.result[0].message == HOSTILE


def test_junit_counts_match_model(tmp_path):
    r = _graded()
    (suite,) = _read_suites(tmp_path, r)
    statuses = [c.status for c in r.checks]
    assert suite.tests == len(statuses)
    assert suite.failures == statuses.count("failed")
    assert suite.errors == statuses.count("error")
    assert suite.skipped == statuses.count("skipped")


def test_junit_names_are_stable_and_points_are_properties(tmp_path):
    (suite,) = _read_suites(tmp_path, _graded())
    names = [c.name for c in suite]
    assert names[:3] == ["compile build", "static uses_shared_memory", "case square_64"]
    assert "timing speedup" in names
    # The same check, passed or failed, has the same name: CI histories follow a test by its name.
    other = _graded()
    other.checks[1] = passed("uses_shared_memory", STATIC, 2.5)
    assert [c.name for c in to_junit_suite(other).test_cases] == [c.name for c in to_junit_suite(_graded()).test_cases]
    assert not any("pts" in name or "/" in name for name in names)
    props = {p.name: p.value for p in suite.properties()}
    assert (props["score"], props["max_score"], props["status"], props["outcome"]) == ("15.5", "33.5", "graded",
                                                                                       "graded")
    assert props["points.static uses_shared_memory"] == "0/2.5"
    assert props["points.case square_64"] == "4/4"
    assert props["points.timing speedup"] == "1.5/3"


def test_junit_failure_at_a_line_carries_file_and_line(tmp_path):
    result = SubmissionResult("eve", GRADED, [
        failed("barrier after loading tiles", STATIC, 4, "no __syncthreads() after the loads", metrics={"line": 21}),
        passed("shared-memory tiles", STATIC, 2, "tiles As, Bs", metrics={"line": 9}),
        failed("square_64", CASE, 3, "wrong")])
    path = tmp_path / "eve.xml"
    write_junit(result, path)
    located = {c.get("name"): (c.get("file"), c.get("line")) for c in ElementTree.parse(path).iter("testcase")}
    assert located == {"static barrier after loading tiles": ("kernel.cu", "21"),
                       "static shared-memory tiles": (None, None),  # passed: nothing to point at
                       "case square_64": (None, None)}


def test_junit_gpu_only_checks_are_not_checked_here_never_failures(tmp_path):
    result = SubmissionResult("gil", GRADED, [
        passed("square_64", CASE, 74),
        skipped("large_ragged", CASE, 16, "not run: GPU only", needs_gpu="large cases"),
        skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu="timing")])
    (suite,) = _read_suites(tmp_path, result)
    assert (suite.failures, suite.errors, suite.skipped) == (0, 0, 2)
    (skip,) = list(suite)[2].result
    assert isinstance(skip, Skipped) and skip.message.startswith("not checked here: it needs a GPU (timing)")
    props = {p.name: p.value for p in suite.properties()}
    assert (props["max_score"], props["checkable_max_score"]) == ("100", "74")


def test_junit_elapsed_from_metrics():
    cases = to_junit_suite(_graded()).test_cases
    assert cases[0].elapsed_sec == 1.25
    assert cases[1].elapsed_sec is None


def test_junit_error_submission_has_submission_case(tmp_path):
    (suite,) = _read_suites(tmp_path, _broken())
    (case,) = list(suite)
    assert case.name == "submission"
    assert [type(x) for x in case.result] == [Error]
    assert case.result[0].message == "no kernel file sgemm.cu found"
    assert suite.errors == 1
    assert {p.name: p.value for p in suite.properties()}["status"] == "error"


def test_junit_combined_document(tmp_path):
    suites = _read_suites(tmp_path, xml=to_junit_xml([_graded(), _broken()]))
    assert [s.name for s in suites] == ["alice", "bob"]
    assert [s.tests for s in suites] == [8, 1]


def test_junit_failure_without_message_still_fails(tmp_path):
    r = SubmissionResult("carol", GRADED, [failed("square_64", CASE, 4, "")])
    (suite,) = _read_suites(tmp_path, r)
    assert suite.failures == 1
    assert [type(x) for x in list(suite)[0].result] == [Failure]


# ---------------------------------------------------------------- terminal


def _text(result, **kwargs) -> str:
    console = Console(record=True, width=100, color_system=None)
    render(result, console, **kwargs)
    return console.export_text()


def test_terminal_lists_checks_statuses_and_total():
    r = _graded()
    out = _text(r)
    for check in r.checks:
        assert check.name in out
    for word in ("passed", "failed", "error", "skipped"):
        assert word in out
    assert "Total: 15.5/33.5" in out
    assert "0/2.5" in out


def test_terminal_header():
    out = _text(_graded())
    for piece in ("alice", "pycuda", "NVIDIA H100", "16", "graded on the fallback backend"):
        assert piece in out
    assert "child output" not in out


def test_terminal_shows_failing_messages():
    out = _text(_graded())
    for line in MULTILINE.splitlines():
        assert line in out
    assert "timed out after 10 s" in out
    assert "skipped: huge_2048 did not pass" in out
    assert "µs ≥ limit" in out
    # Messages of passed checks are not repeated under the row.
    assert "compiled cleanly" not in out


def test_terminal_hides_hidden_details_by_default():
    out = _text(_graded())
    assert "secret_1" in out
    assert "secret_shape_777" not in out
    assert "secret_shape_777" in _text(_graded(), show_hidden_details=True)


def test_terminal_does_not_interpret_markup():
    r = SubmissionResult("dave", GRADED, [failed("[bold]tile[/bold]", CASE, 1, "[red]boom[/red]")])
    out = _text(r)
    assert "[bold]tile[/bold]" in out
    assert "[red]boom[/red]" in out


def test_terminal_error_submission():
    out = _text(_broken())
    assert "could not be graded" in out
    assert "no kernel file sgemm.cu found" in out
    assert "Total: 0/0" in out


def test_terminal_without_gpu_says_what_was_checked():
    result = SubmissionResult("gil", GRADED, [
        passed("square_64", CASE, 74),
        skipped("large_ragged", CASE, 16, "not run: GPU only", needs_gpu="large cases"),
        skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu="timing")])
    out = _text(result)
    assert "Total: 74/74 points checkable without a GPU; 26 more need a GPU (large cases, timing)" in out
    assert "not checked here" in out and "skipped" not in out and "failed" not in out
