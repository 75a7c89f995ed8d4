"""Reporters: pure renderings of grader.result.SubmissionResult."""
from grader.report.json_report import to_json, write_json
from grader.report.junit_report import format_points, to_junit_suite, to_junit_xml, write_junit
from grader.report.terminal import render

__all__ = ["format_points", "render", "to_json", "to_junit_suite", "to_junit_xml", "write_json", "write_junit"]
