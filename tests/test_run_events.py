"""The parent's reading of a GPU case: several launches of the student's kernel on the same inputs, each
distinct output judged, the case right only if every launch was."""
import numpy as np
import pytest

from grader.cases import Case
from grader.config import Config
from grader.judge.inputs import guarded_c, make_inputs
from grader.judge.layout import GUARD_BEFORE
from grader.result import ERROR, FAILED, PASSED
from grader.run_events import RunEvents

CASE = Case("square_16", 16, 16, 16, seed=101, points=3)


def right_output() -> np.ndarray:
    a, b = make_inputs(CASE.m, CASE.n, CASE.k, CASE.seed, CASE.distribution)
    buffer = guarded_c(CASE.m, CASE.n)
    buffer[GUARD_BEFORE:GUARD_BEFORE + CASE.m * CASE.n] = (a.astype(np.float64) @ b.astype(np.float64)).ravel()
    return buffer


def judged(tmp_path, outputs: list[np.ndarray], launches: int):
    for index, output in enumerate(outputs):
        np.save(tmp_path / ("square_16.student.npy" if index == 0 else f"square_16.student.{index}.npy"), output)
    events = RunEvents(Config(), [CASE], tmp_path)
    events.tile_size = 16
    events.handle({"event": "case", "case": "square_16", "seconds": 0.001, "a_changed": False, "b_changed": False,
                   "launches": launches, "distinct_outputs": len(outputs), "folder": str(tmp_path)})
    return {c.name: c for c in events.made_checks()}["square_16"]


def test_a_case_right_in_every_launch_passes(tmp_path):
    assert judged(tmp_path, [right_output()], launches=3).status == PASSED


def test_a_case_is_judged_on_its_outputs_as_they_were_when_it_was_reported(tmp_path):
    """Judging waits until a verdict is needed (the GPU is given back first), but what the child writes
    after reporting a case is never read: the outputs are read when the case is reported."""
    np.save(tmp_path / "square_16.student.npy", right_output())
    events = RunEvents(Config(), [CASE], tmp_path)
    events.tile_size = 16
    events.handle({"event": "case", "case": "square_16", "seconds": 0.001, "a_changed": False, "b_changed": False,
                   "launches": 1, "distinct_outputs": 1, "folder": str(tmp_path)})
    np.save(tmp_path / "square_16.student.npy", np.zeros_like(right_output()))
    assert {c.name: c for c in events.made_checks()}["square_16"].status == PASSED


def test_one_wrong_launch_among_right_ones_fails_the_case_and_says_it_depends_on_timing(tmp_path):
    """A racy kernel that was right in two launches and read poison in the third is wrong: luck in the
    other launches does not make it right."""
    raced = right_output()
    raced[GUARD_BEFORE:GUARD_BEFORE + 32] = np.nan  # one warp read a tile before it was written
    check = judged(tmp_path, [right_output(), raced], launches=3)
    assert check.status == FAILED and check.score == 0
    assert "32 of 256 elements of C are wrong" in check.message
    assert "2 different results in 3 launches" in check.message


@pytest.mark.parametrize("distinct, launches", [(3, 2), (0, 3), (1, 11)])
def test_a_child_that_claims_impossible_launch_counts_breaks_the_case(tmp_path, distinct, launches):
    check = judged(tmp_path, [right_output()] * distinct, launches)
    assert check.status == ERROR and "outputs of" in check.message


def test_a_case_truth_is_computed_once_per_machine_and_read_back_the_same(tmp_path):
    """The float64 truth is stored in the grader's cache: a batch's workers read it instead of each
    recomputing it; a damaged file is computed again, never trusted."""
    from grader.judge import truths

    config = Config()
    config.compile.cache_dir = str(tmp_path)
    _, _, first = truths.case_truth(CASE, config)
    stored = list((tmp_path / "truths").glob("*.npz"))
    assert len(stored) == 1
    truths._case_truth.cache_clear()
    _, _, again = truths.case_truth(CASE, config)
    assert np.array_equal(again.value, first.value) and np.array_equal(again.bound, first.bound)
    stored[0].write_bytes(b"not an npz")
    truths._case_truth.cache_clear()
    _, _, recomputed = truths.case_truth(CASE, config)
    assert np.array_equal(recomputed.value, first.value)


def test_a_hang_in_the_access_profile_costs_the_advice_and_nothing_else(tmp_path):
    np.save(tmp_path / "square_16.student.npy", right_output())
    events = RunEvents(Config(), [CASE], tmp_path)
    events.tile_size = 16
    events.handle({"event": "case", "case": "square_16", "seconds": 0.001, "a_changed": False, "b_changed": False,
                   "launches": 1, "distinct_outputs": 1, "folder": str(tmp_path)})
    events.handle({"event": "timeout", "phase": "profile", "case": None, "limit_s": 60})
    checks = {c.name: c for c in events.made_checks()}
    assert checks["square_16"].status == PASSED and not events.compile_timed_out
    assert "no access profile (advice only): timed out after 60 s of its own time in the access profile" in events.log
