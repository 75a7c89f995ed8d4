"""The rubric: each check declared once; a check no stage made is skipped for what its dependencies say."""
from grader.cases import load_cases
from grader.config import load_config
from grader.pipeline import not_graded
from grader.result import CASE, COMPILE, SKIPPED, TIMING, errored, failed, passed
from grader.rubric import Rubric

CONFIG = load_config()
CASES = load_cases(CONFIG.testcases_dir)
RUBRIC = Rubric.of(CONFIG, CASES)
FIRST, SECOND = CASES[0], CASES[1]


def test_every_check_in_order_with_the_configs_points():
    results = RUBRIC.results([], "no GPU here")
    assert [c.name for c in results] == ["compile", "shared-memory tiles", "barrier after loading tiles",
                                         "barrier after using tiles", *(c.name for c in CASES), "speed vs reference"]
    assert sum(c.max_score for c in results) == 100
    assert {c.status for c in results} == {SKIPPED} and {c.message for c in results} == {"no GPU here"}
    assert [c.visibility for c in results[4:-1]] == [c.visibility for c in CASES]


def test_a_failed_compile_stops_the_cases_and_timing_and_says_so():
    results = RUBRIC.results([errored("compile", COMPILE, 0, "compile error: line 3")], "not run")
    after_compile = {c.message for c in results if c.kind in (CASE, TIMING)}
    assert after_compile == {"not run: the kernel did not compile"}


def test_timing_waits_for_every_case_and_counts_those_that_did_not_pass():
    made = [passed("compile", COMPILE, 0), failed(FIRST.name, CASE, FIRST.points, "wrong"),
            passed(SECOND.name, CASE, SECOND.points)]
    timing = RUBRIC.results(made, "not run: the kernel crashed")[-1]
    assert timing.status == SKIPPED
    assert timing.message == (f"not timed: {len(CASES) - 1} of {len(CASES)} cases did not pass; "
                              "timing needs a correct kernel")


def test_what_a_stage_made_is_kept_as_it_made_it():
    compiled = passed("compile", COMPILE, 0, "compiled for sm_90")
    assert RUBRIC.results([compiled])[0] is compiled


def test_a_check_the_rubric_does_not_declare_is_a_grader_bug_not_a_silent_extra():
    try:
        RUBRIC.results([passed("bonus", CASE, 50)])
    except ValueError as error:
        assert "bonus" in str(error)
    else:
        raise AssertionError("an undeclared check was accepted")


def test_a_submission_that_got_nowhere_shows_the_same_checks_worth_the_same_points(tmp_path):
    result = not_graded(tmp_path / "alice", CONFIG, CASES, "not graded: the archive is empty")
    assert [(c.name, c.max_score) for c in result.checks] == [(c.name, c.max_score) for c in RUBRIC.results([])]
    assert result.score == 0 and result.max_score == 100


def test_the_sanitizer_diagnosis_is_in_the_rubric_only_when_it_runs():
    assert not RUBRIC.has("compute-sanitizer")
    diagnosis = Rubric.of(CONFIG, CASES, sanitize=True).checks[-1]
    assert (diagnosis.name, diagnosis.points, diagnosis.depends_on) == ("compute-sanitizer", 0, ("compile",))
