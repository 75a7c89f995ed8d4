"""The rule that merges a GPU run's case verdict with the CPU emulator's (grader/judge/engines.py)."""
import numpy as np

from grader.cases import Case
from grader.emulation import Emulation, emulate_where_wrong, merged, with_tool_findings
from grader.judge.engines import merged_case
from grader.judge.findings import OUT_OF_BOUNDS_READ, SHARED_RACE, Finding
from grader.result import CASE, ERROR, FAILED, PASSED, TIMING, errored, failed, passed

RIGHT = passed("ragged_n", CASE, 4, "correct (64×67×64)", metrics={"wrong_elements": 0, "seconds": 0.001})
OUT_OF_BOUNDS = errored("ragged_n", CASE, 4, "out-of-bounds read of B at line 19: ...", fixes=["check B's bounds"],
                        unsafe=[OUT_OF_BOUNDS_READ])


def wrong(count: int, words: str = "C = A×B with m=64, n=67, k=64: 12 of 4288 elements of C are wrong") -> object:
    return failed("ragged_n", CASE, 4, words, metrics={"wrong_elements": count}, fixes=["check the bound"])


def test_a_case_the_emulator_saw_do_something_unsafe_fails_in_its_words_though_the_gpu_values_were_right():
    case = merged_case(RIGHT, OUT_OF_BOUNDS)
    assert (case.status, case.score, case.message, case.fixes, case.unsafe) == (
        ERROR, 0.0, OUT_OF_BOUNDS.message, OUT_OF_BOUNDS.fixes, [OUT_OF_BOUNDS_READ])
    assert case.metrics["seconds"] == 0.001 and case.metrics["emulator"] == ERROR  # the GPU's figures stay


def test_where_both_engines_find_the_same_wrong_values_the_emulator_explains_them():
    emulated = wrong(12, "C = A×B ...: 12 of 4288 elements wrong; threads (1, 0) and (0, 1) both store C[0][1]")
    case = merged_case(wrong(12, "gpu words"), emulated)
    assert (case.status, case.message, case.fixes) == (FAILED, emulated.message, emulated.fixes)


def test_where_both_engines_find_c_wrong_the_emulator_explains_even_where_the_wrong_elements_differ():
    """A result that depends on the threads' order is wrong in other places on each engine: the emulator saw
    which threads stored where."""
    emulated = wrong(7, "C = A×B ...: threads (1, 0) and (0, 1) of block (0, 0) both store C[0][1] (line 23)")
    assert merged_case(wrong(12, "gpu words"), emulated).message == emulated.message


def test_where_the_engines_disagree_on_the_values_the_gpu_stands_and_says_so():
    stopped = errored("ragged_n", CASE, 4, "timed out after 10 s of its own time in case ragged_n")
    for on_gpu, emulated in ((RIGHT, wrong(12)), (wrong(3, "gpu words"), RIGHT), (wrong(3, "gpu words"), stopped)):
        case = merged_case(on_gpu, emulated)
        assert case.status == on_gpu.status and case.message.startswith(on_gpu.message)
        assert "the CPU emulator's result in this case differs" in case.message and "GPU's values count" in case.message


def test_a_case_only_the_gpu_ran_is_the_gpus():
    assert merged_case(RIGHT, None) is RIGHT


def test_a_fault_on_both_engines_is_told_in_the_emulators_words_and_a_gpu_fault_stands_otherwise():
    on_gpu = errored("ragged_n", CASE, 4, "kernel fault: the kernel aborted (a trap or an assert)")
    trapped = errored("ragged_n", CASE, 4, "kernel aborted: __trap() at line 10 (thread (0, 0) of block (0, 0))")
    assert merged_case(on_gpu, trapped).message == trapped.message
    assert merged_case(on_gpu, wrong(12)).message == on_gpu.message


def test_a_hang_on_both_engines_is_told_in_the_gpus_words_whichever_limit_the_emulator_reached():
    """The emulator beside the GPU stops a case the GPU hung in at the GPU's limit once told, or at its own where it
    got there first (hang_notices.py): the case's words must not depend on which came first."""
    def hung(limit: float) -> object:
        return errored("ragged_n", CASE, 4, f"timed out after {limit:g} s of its own time in case ragged_n",
                       metrics={"timed_out_s": limit})

    on_gpu = hung(3)
    for emulated in (hung(3), hung(10)):
        case = merged_case(on_gpu, emulated)
        assert (case.status, case.message, case.metrics["timed_out_s"]) == (ERROR, on_gpu.message, 3)
    trapped = errored("ragged_n", CASE, 4, "kernel aborted: __trap() at line 10 (thread (0, 0) of block (0, 0))")
    assert merged_case(on_gpu, trapped).message == trapped.message  # what the emulator found first names the line


def test_timing_goes_when_a_case_no_longer_passes():
    timing = passed("timing", TIMING, 10, "1.2× the reference")
    made = merged([RIGHT, timing], Emulation({"ragged_n": OUT_OF_BOUNDS}))
    assert [c.kind for c in made] == [CASE] and made[0].status == ERROR
    kept = merged([RIGHT, timing], Emulation({"ragged_n": RIGHT}))
    assert [c.status for c in kept] == [PASSED, PASSED]


def test_what_compute_sanitizer_found_in_a_case_fails_it_after_the_gpus_words():
    found = [Finding("compute-sanitizer racecheck: shared-memory race between the store at line 12 and the read at "
                     "line 18", "", SHARED_RACE)]
    case, = with_tool_findings([RIGHT], {"ragged_n": found})
    assert case.status == FAILED and case.score == 0 and case.unsafe == [SHARED_RACE]
    assert case.message == f"{RIGHT.message}\n{found[0].fact}"
    assert with_tool_findings([RIGHT], {}) == [RIGHT]


def test_a_large_case_the_emulator_ran_by_sampled_blocks_right_where_the_gpu_found_it_wrong_says_so():
    """Its blocks are a sample: the GPU's wrong elements lie in others, so the engines do not disagree on them."""
    scope = "the 129 edge tiles and 16 sampled interior tiles of 4,160"
    sampled = passed("large_ragged", CASE, 6, f"correct (1031×1009×1013): {scope}; every element of them right",
                     metrics={"checked": scope})
    case = merged_case(wrong(3, "gpu words"), sampled)
    assert case.status == FAILED and case.message.startswith("gpu words")
    assert f"the CPU emulator ran {scope} of this case and saw nothing wrong in them" in case.message
    assert "differs" not in case.message


class _Judged:
    """What emulate_where_wrong reads of a run: its judged cases, where a large case's wrong elements were, the tile."""

    def __init__(self, cases: dict, wrong_at: dict | None = None):
        self.cases, self.wrong_at, self.tile_size = cases, wrong_at or {}, 16

    def made_cases(self) -> dict:
        return self.cases


def test_a_large_case_the_sample_saw_right_and_the_gpu_wrong_is_emulated_again_on_the_gpus_wrong_tiles():
    large, other = (Case(name, 1031, 1009, 1013, 1, 6, cpu="sampled") for name in ("large_ragged", "large_hidden"))
    gpu = _Judged({"large_ragged": wrong(3), "large_hidden": wrong(3)},
                  {"large_ragged": (np.array([180, 181, 900]), np.array([150, 151, 20]))})  # large_hidden: a fault
    emulation = Emulation({"large_ragged": RIGHT, "large_hidden": RIGHT})
    asked = []

    def rerun(cases, extra):
        asked.append(([case.name for case in cases], extra))
        return _Judged({"large_ragged": wrong(256, "emulator words")})

    emulate_where_wrong(gpu, emulation, [large, other], rerun)
    assert asked == [(["large_ragged"], {"large_ragged": ((11, 9), (56, 1))})]
    assert emulation.cases["large_ragged"].message == "emulator words"
    emulate_where_wrong(_Judged({"large_ragged": RIGHT}), Emulation({"large_ragged": RIGHT}), [large], rerun)
    assert len(asked) == 1  # nothing to look for where the GPU found the case right
