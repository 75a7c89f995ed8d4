"""JUnit XML report: one testsuite per submission, one testcase per check.

Why these choices: CI pages chart a test's history by its name, so a name is the check's kind and name
only, the same whatever the outcome (points and status would make every run a new test); points go in
the suite's <properties> ("points.<test name>" = "3/4"), where the Jenkins schema (tests/junit-10.xsd)
allows them. A check that failed at a line of the kernel says so in the testcase's `file` and `line`
attributes, which GitLab and GitHub annotations read. A check that needs a GPU, on a run without one, is
skipped ("not checked here"), never a failure. The result's performance advice (issue 26: no points) is the
suite properties "how_to_make_it_faster.1", ".2", ..., one finding each.
"""
from __future__ import annotations

from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from grader.intake.submission import KERNEL_FILE
from grader.report.faster import feedback_line
from grader.report.points import format_points
from grader.report.status import status_label
from grader.report.student_view import NOT_CHECKED, grouped_messages
from grader.result import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    CheckResult,
    SubmissionResult,
)


def _points(check: CheckResult) -> str:
    return f"{format_points(check.score)}/{format_points(check.max_score)}"


def _attach(case: TestCase, status: str, message: str) -> None:
    # junit_xml drops a failure/error with no text, which would make it read as passed.
    text = message or status
    # XML parsers fold newlines inside attributes into spaces, so the element text carries
    # the message verbatim as well.
    if status == FAILED:
        case.add_failure_info(message=text, output=text)
    elif status == ERROR:
        case.add_error_info(message=text, output=text)
    elif status == SKIPPED:
        case.add_skipped_info(message=text, output=text)
    elif status != PASSED:
        # An unknown status must not look like a pass.
        case.add_error_info(message=f"unknown status {status!r}: {message}", output=message)


def case_name(check: CheckResult) -> str:
    """Stable across runs and outcomes: never a score or a status in it."""
    return f"{check.kind} {check.name}"


def _line(check: CheckResult) -> int | None:
    """The kernel line a failed check points at (the static check stores it), if any."""
    line = check.metrics.get("line")
    if check.status in (FAILED, ERROR) and isinstance(line, int) and not isinstance(line, bool) and line > 0:
        return line
    return None


def _check_case(submission: str, check: CheckResult, told: str) -> TestCase:
    line = _line(check)
    case = TestCase(case_name(check), classname=f"{submission}.{check.kind}",
                    elapsed_sec=check.metrics.get("seconds"),
                    file=KERNEL_FILE if line else None, line=str(line) if line else None)
    if check.needs_gpu:
        _attach(case, SKIPPED, f"{NOT_CHECKED}: it needs a GPU ({check.needs_gpu}), and this run had none")
        return case
    _attach(case, check.status, told)
    return case


def _properties(result: SubmissionResult) -> dict[str, str]:
    props = {
        "score": format_points(result.score),
        "max_score": format_points(result.max_score),
        "checkable_max_score": format_points(result.checkable_max),
        "status": result.status,
        "outcome": result.outcome,
    }
    for key in ("backend", "sandbox", "device", "tile_size"):
        value = getattr(result, key)
        if value not in ("", None):
            props[key] = str(value)
    for check in result.checks:
        props[f"points.{case_name(check)}"] = _points(check)
    # Advice, no points: a property a finding (XML folds newlines in an attribute, so never one joined text).
    for number, item in enumerate(result.feedback, start=1):
        props[f"how_to_make_it_faster.{number}"] = feedback_line(item)
    return props


def to_junit_suite(result: SubmissionResult, student_facing: bool = True) -> TestSuite:
    # A student's own file goes to an LMS or CI they see: hidden cases show only their verdict, texts are
    # capped, a cause is told in full once. The class-wide file is the instructor's and keeps everything.
    told = (grouped_messages(result, with_fixes=True) if student_facing
            else {check.name: check.explained for check in result.checks})
    cases = [_check_case(result.submission, c, told[c.name]) for c in result.checks]
    if not result.graded:
        # Keep the failure visible to CI even when there is no check to hang it on.
        case = TestCase("submission", classname=f"{result.submission}.submission")
        _attach(case, ERROR, result.message)
        cases.insert(0, case)
    return TestSuite(result.submission, cases, properties=_properties(result))


def to_junit_xml(results: list[SubmissionResult]) -> str:
    return to_xml_report_string([to_junit_suite(r) for r in results])


def _student_label(result: SubmissionResult) -> str:
    who = result.student_name or result.student_id
    if result.student_name and result.student_id:
        who = f"{result.student_name} ({result.student_id})"
    return f"{who} [{result.submission}]" if who else result.submission


def to_combined_junit(results: list[SubmissionResult]) -> str:
    """The whole class in one file: one testsuite per student, named by who handed it in.

    Why: a CI page or an LMS plugin loads one JUnit file per run; each suite is to_junit_suite's
    (same cases, same verdicts), renamed for the student and with their id, name and status label
    added to its properties. Instructor-facing: messages are complete, hidden cases included.
    """
    suites = []
    for result in results:
        suite = to_junit_suite(result, student_facing=False)
        suite.name = _student_label(result)
        suite.properties.update({"submission": result.submission, "student_id": result.student_id,
                                 "student_name": result.student_name, "status_label": status_label(result)})
        suites.append(suite)
    return to_xml_report_string(suites)


def write_junit(result: SubmissionResult, path: str | Path) -> None:
    Path(path).write_text(to_junit_xml([result]), encoding="utf-8")
