"""Every JUnit file the grader writes is valid against the Jenkins JUnit schema (tests/junit-10.xsd)."""
from __future__ import annotations

import pytest
from conftest import ROOT

from grader.report.junit_report import to_combined_junit, to_junit_xml
from grader.result import CASE, GRADED, STATIC, SUBMISSION_ERROR, TIMING, SubmissionResult, failed, passed, skipped

SCHEMA = ROOT / "tests" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema():
    # A plain import (the `test` extra installs xmlschema), inside so a GPU machine without it still collects.
    import xmlschema

    return xmlschema.XMLSchema(str(SCHEMA))


def results() -> list[SubmissionResult]:
    located = failed("barrier after loading tiles", STATIC, 4, "no barrier <after> the loads & more",
                     metrics={"line": 21})
    return [
        SubmissionResult("alice", GRADED, [located, passed("square_64", CASE, 3, metrics={"seconds": 0.25}),
                                           skipped("speed vs reference", TIMING, 10, "not timed", needs_gpu="timing")],
                         student_id="1", student_name="Alice Ärcher", backend="cpu", tile_size=16),
        SubmissionResult("bob", SUBMISSION_ERROR, message="kernel.cu: not found"),
    ]


def test_the_schema_refuses_what_jenkins_refuses(schema):
    # The schema is not a rubber stamp: a testcase without a name, or a stray attribute, is refused.
    assert not schema.is_valid('<testsuites><testsuite tests="1"><testcase/></testsuite></testsuites>')
    assert not schema.is_valid('<testsuites><testsuite tests="1"><testcase name="x" points="3"/>'
                               '</testsuite></testsuites>')


def test_per_submission_junit_is_valid(schema):
    for result in results():
        schema.validate(to_junit_xml([result]))


def test_class_junit_is_valid_and_keeps_file_and_line(schema):
    xml = to_combined_junit(results())
    schema.validate(xml)
    assert 'file="kernel.cu"' in xml and 'line="21"' in xml
