"""JUnit XML report: one testsuite per submission, one testcase per check."""
from __future__ import annotations

from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from grader.result import ERROR, FAILED, PASSED, SKIPPED, SUBMISSION_ERROR, CheckResult, SubmissionResult


def format_points(value: float) -> str:
    """4.0 -> "4", 2.5 -> "2.5"; fixed-point so large or tiny values never turn into exponents."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


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


def _check_case(submission: str, check: CheckResult) -> TestCase:
    case = TestCase(
        f"{check.kind} {check.name} [{_points(check)} pts]",
        classname=f"{submission}.{check.kind}",
        elapsed_sec=check.metrics.get("seconds"),
    )
    _attach(case, check.status, check.message)
    return case


def _properties(result: SubmissionResult) -> dict[str, str]:
    props = {
        "score": format_points(result.score),
        "max_score": format_points(result.max_score),
        "status": result.status,
    }
    for key in ("backend", "device", "tile_size"):
        value = getattr(result, key)
        if value not in ("", None):
            props[key] = str(value)
    for check in result.checks:
        props[f"points.{check.name}"] = _points(check)
    return props


def to_junit_suite(result: SubmissionResult) -> TestSuite:
    cases = [_check_case(result.submission, c) for c in result.checks]
    if result.status == SUBMISSION_ERROR:
        # Keep the failure visible to CI even when there is no check to hang it on.
        case = TestCase("submission", classname=f"{result.submission}.submission")
        _attach(case, ERROR, result.message)
        cases.insert(0, case)
    return TestSuite(result.submission, cases, properties=_properties(result))


def to_junit_xml(results: list[SubmissionResult]) -> str:
    return to_xml_report_string([to_junit_suite(r) for r in results])


def write_junit(result: SubmissionResult, path: str | Path) -> None:
    Path(path).write_text(to_junit_xml([result]), encoding="utf-8")
