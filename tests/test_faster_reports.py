"""Issue 26's advice where people look: Gradescope, PrairieLearn, JUnit and the class summary page show
result.feedback (constructed here: reporters are pure functions of the result), and no point moves."""
import xml.etree.ElementTree as ET

from conftest import ROOT
from test_exports import GRADESCOPE_SCHEMA, PL_SCHEMA, PNG_MAGIC, validate

from grader.report.faster import TITLE, faster_lines
from grader.report.gradescope import to_gradescope
from grader.report.junit_report import to_junit_xml
from grader.report.prairielearn import to_prairielearn
from grader.report.summary_html import GFLOPS_PNG, class_gflops, common_findings, write_summary
from grader.result import (
    BANK_CONFLICT,
    CASE,
    COMPILE,
    GRADED,
    OCCUPANCY,
    TIMING,
    UNCOALESCED_LOAD,
    Feedback,
    SubmissionResult,
    failed,
    passed,
)

HOSTILE = '<script>alert("x")</script>'
OCCUPANCY_SAID = ("registers: 96 per thread allow 2 blocks of 256 threads per SM on sm_90 (25% occupancy); "
                  "the reference uses 32 (100%)")


def advice() -> list[Feedback]:
    return [
        Feedback(UNCOALESCED_LOAD, "line 12: each warp's load of B touches 16 sectors where 2 would do",
                 "consecutive threadIdx.x should read consecutive columns of B", line=12, value=16,
                 reference_value=2, unit="sectors per request", source="emulator"),
        Feedback(OCCUPANCY, OCCUPANCY_SAID, "use fewer registers per thread", value=25, reference_value=100,
                 unit="%", source="compiler"),
        Feedback(BANK_CONFLICT, f"line 14: 32-way bank conflict on {HOSTILE}", "pad it to [32][33]", line=14,
                 value=32, reference_value=1, unit="way", source="emulator"),
    ]


def timed(name: str, gflops: float, reference: float = 4000.0, feedback=None, wrong: bool = False):
    metrics = {"student_ms": 1.0, "reference_ms": 1.0, "ratio": reference / gflops, "max_ratio": 2.0,
               "student_gflops": gflops, "reference_gflops": reference}
    checks = [passed("compile", COMPILE, 1, "compiled"),
              failed("square_64", CASE, 3, "wrong") if wrong else passed("square_64", CASE, 3),
              passed("speed vs reference", TIMING, 10, "fast enough", metrics=metrics)]
    return SubmissionResult(name, GRADED, checks, feedback=list(feedback or []))


def test_the_advice_is_one_line_a_finding_after_a_title_saying_it_is_worth_nothing():
    lines = faster_lines(timed("s", 1000, feedback=advice()))
    assert lines[0] == TITLE and "no points" in TITLE
    assert lines[1] == ("- line 12: each warp's load of B touches 16 sectors where 2 would do — try: consecutive "
                        "threadIdx.x should read consecutive columns of B")
    assert lines[2] == f"- {OCCUPANCY_SAID} — try: use fewer registers per thread"
    assert faster_lines(timed("s", 1000)) == []


def test_gradescope_output_says_how_to_make_it_faster_after_what_to_fix_and_scores_the_same():
    plain, advised = timed("s", 1000, wrong=True), timed("s", 1000, feedback=advice(), wrong=True)
    plain.checks[1].fixes = advised.checks[1].fixes = ["check the index of B"]
    data, before = to_gradescope(advised), to_gradescope(plain)
    validate(data, GRADESCOPE_SCHEMA)
    assert data["score"] == before["score"] and data["tests"] == before["tests"]
    output = data["output"]
    assert output.index("What to fix:") < output.index(TITLE)
    assert OCCUPANCY_SAID in output and "line 14: 32-way bank conflict" in output
    assert TITLE not in before["output"]


def test_prairielearn_output_carries_it_and_the_score_is_the_same():
    data, before = to_prairielearn(timed("s", 1000, feedback=advice())), to_prairielearn(timed("s", 1000))
    validate(data, PL_SCHEMA)
    assert data["score"] == before["score"] == 1.0
    assert TITLE in data["output"] and "consecutive columns of B" in data["output"]
    assert TITLE not in before["output"]


def test_junit_has_a_property_a_finding(tmp_path):
    import xmlschema

    text = to_junit_xml([timed("s", 1000, feedback=advice())])
    assert xmlschema.XMLSchema(str(ROOT / "tests" / "junit-10.xsd")).is_valid(text)
    props = {p.get("name"): p.get("value") for p in ET.fromstring(text).iter("property")}
    said = [props[f"how_to_make_it_faster.{number}"] for number in (1, 2, 3)]
    assert said[1].startswith(OCCUPANCY_SAID) and HOSTILE in said[2] and "how_to_make_it_faster.4" not in props
    assert props["points.case square_64"] == "3/3"
    assert "how_to_make_it_faster" not in to_junit_xml([timed("s", 1000)])


def test_the_class_summary_plots_gflops_against_the_reference_and_lists_common_findings(tmp_path):
    results = [timed("fast", 3900, feedback=advice()[1:2]), timed("slow", 800, feedback=advice()),
               timed("mid", 2000, reference=4100, feedback=advice()[:1]), timed("none", 4200)]
    assert [name for name, *_ in class_gflops(results)] == ["none", "fast", "mid", "slow"]
    # ties keep the order first seen in
    assert common_findings(results)[:2] == [(OCCUPANCY, 2, OCCUPANCY_SAID), (UNCOALESCED_LOAD, 2, advice()[0].message)]
    page = write_summary(results, tmp_path)
    text = page.read_text(encoding="utf-8")
    assert (tmp_path / GFLOPS_PNG).read_bytes().startswith(PNG_MAGIC)
    assert "GFLOP/s against the reference" in text and text.count("data:image/png;base64,") == 3
    assert "Most common findings" in text and f"<td>{BANK_CONFLICT}</td><td class=n>1</td>" in text
    assert "<script>" not in text


def test_a_class_with_no_advice_and_no_timing_shows_neither(tmp_path):
    untimed = SubmissionResult("s", GRADED, [passed("compile", COMPILE, 1, "compiled")])
    text = write_summary([untimed], tmp_path).read_text(encoding="utf-8")
    assert "Most common findings" not in text and not (tmp_path / GFLOPS_PNG).exists()
