"""Whether compute-sanitizer's tools run over a GPU grade's kernel (diagnose/checks.py's why_not_run), decided from
the cases' checks alone: a kernel whose every failing case on the GPU hung there and on the CPU emulator beside it
(the `hang` student) is not run under the tools, which could only hang again; nor one the emulator stopped in each
such case for a cause it names at the student's line (a trap, an access outside A, B and C, a divergent barrier:
`trap`, `illegal_address`, `conditional_barrier`). A fault or hang the emulator did not show the cause of (it
passed the case, or its own process crashed), or --sanitize, still runs them. The checks are made as a grade makes
them: each engine's run reads its child's events (run_events.py) and the two are merged (emulation.py), so the data
is the grade's, not a mock's."""
import json
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from grader.cases import Case
from grader.config import Config
from grader.diagnose.checks import HUNG_ON_BOTH, NOTHING_FAULTED, STOPPED_ON_BOTH, why_not_run
from grader.diagnose.run import NAME as SANITIZER_NAME
from grader.emulation import Emulation, merged
from grader.judge.engines import EMULATOR_HUNG, EMULATOR_STOPPED, HUNG, LEFT_OUT, STOPPED, stopped_on_both
from grader.report.gradescope import to_gradescope
from grader.report.json_report import to_json
from grader.report.junit_report import to_junit_xml
from grader.report.prairielearn import to_prairielearn
from grader.report.student_view import cause_groups
from grader.report.terminal import render
from grader.result import CASE, GRADED, PASSED, SANITIZER, SKIPPED, SubmissionResult, passed, skipped
from grader.rubric import Rubric
from grader.run_events import HANG_FIX, RunEvents

# Two cases of unrelated names: a hang is one cause however its cases are named.
CASES = [Case("square_16", 16, 16, 16, seed=101, points=3), Case("ragged_all", 100, 75, 50, seed=204, points=4),
         Case("rect_hidden", 129, 257, 65, seed=304, points=4, visibility="hidden")]
GPU_LIMIT_S = 3.0  # timeouts.gpu_hang_s: the limit the emulator beside the GPU is given too (hang_notices.py)


def on_gpu(tmp_path, **events):
    """The GPU run's case checks, from the events its parent reads: `hang` (a case past the GPU's hang limit) or
    `fault` (the CUDA error the child reported), by case name."""
    run = RunEvents(Config(), CASES, tmp_path)
    run.tile_size = 16
    for name, event in events.items():
        if event == "hang":
            run.handle({"event": "timeout", "phase": "case", "case": name, "limit_s": GPU_LIMIT_S})
        else:
            run.handle({"event": "fault", "phase": "case", "case": name, "error": event})
    return run


# What the emulator's driver reports where it stopped a case (case_files.py's case_error), as the harness told it:
# trap, illegal_address and conditional_barrier's, and a crash of the emulated process, which names no cause.
THREAD, BLOCK = [0, 3, 0], [0, 4, 0]
STOPS = {
    "trap": {"event": "fault", "what": "trap", "line": 10, "thread": THREAD, "block": BLOCK},
    "invalid_address": {"event": "fault", "what": "invalid_address", "access": "read", "line": 28, "thread": THREAD,
                        "block": BLOCK},
    "divergence": {"event": "divergence", "kind": "different_barriers", "line": 21, "thread": [0, 0, 0],
                   "other_line": 25, "other_thread": THREAD, "block": BLOCK},
    "crashed": {"event": "fault", "what": "crashed", "returncode": -11},
}


def on_emulator(tmp_path, **events):
    """The emulator's checks: `hang` (its driver stopped the case at a limit, as it reports a time-out), `fault`
    (its child ended in the case), a stop of STOPS, `pass`."""
    run = RunEvents(Config(), CASES, tmp_path, child="the CPU emulation process")
    run.tile_size = 16
    for name, event in events.items():
        if event == "hang":
            run.handle({"event": "case_error", "case": name, "problem": {"event": "timeout", "limit_s": GPU_LIMIT_S}})
        elif event in STOPS:
            run.handle({"event": "case_error", "case": name, "schedule": "forward", "problem": STOPS[event]})
        elif event == "fault":
            run.handle({"event": "fault", "phase": "case", "case": name, "error": "segmentation fault"})
    made = run.made_cases()
    made |= {name: passed(name, CASE, 3, "correct (16×16×16)") for name, event in events.items() if event == "pass"}
    return Emulation(made, run=run)


def decided(tmp_path, gpu: dict, emulator: dict, always: bool = False) -> str:
    gpu_run = on_gpu(tmp_path / "gpu", **gpu)
    judged = merged(gpu_run.made_checks(), on_emulator(tmp_path / "cpu", **emulator))
    return why_not_run(gpu_run.made_cases().values(), judged, always)


@pytest.fixture(autouse=True)
def folders(tmp_path):
    (tmp_path / "gpu").mkdir()
    (tmp_path / "cpu").mkdir()


def test_a_kernel_that_hung_on_both_engines_in_every_case_it_failed_is_not_run_under_the_tools(tmp_path):
    reason = decided(tmp_path, {"square_16": "hang", "ragged_all": "hang"}, {"square_16": "hang", "ragged_all": "hang"})
    assert reason == HUNG_ON_BOTH.format(count="2 cases")
    assert "hung on the GPU and on the CPU emulator" in reason and "would only hang again" in reason
    one = decided(tmp_path, {"ragged_all": "hang"}, {"square_16": "pass", "ragged_all": "hang"})
    assert one == HUNG_ON_BOTH.format(count="1 case")


def test_a_hang_the_emulator_did_not_share_still_runs_the_tools(tmp_path):
    """It passed the case (a kernel that waits on the GPU's own scheduling), did not run it (a case its file keeps
    for GPUs), or stopped it for something else: the tools may see what it could not."""
    hung = {"square_16": "hang", "ragged_all": "hang"}
    assert decided(tmp_path, hung, {"square_16": "hang", "ragged_all": "pass"}) == ""
    assert decided(tmp_path, hung, {"square_16": "hang"}) == ""
    assert decided(tmp_path, hung, {"square_16": "hang", "ragged_all": "fault"}) == ""


def test_a_real_fault_on_the_gpu_still_runs_the_tools_beside_a_shared_hang(tmp_path):
    for error in ("an illegal memory access was encountered", "unspecified launch failure"):
        gpu = {"square_16": "hang", "ragged_all": error}
        assert decided(tmp_path, gpu, {"square_16": "hang", "ragged_all": "hang"}) == "", error


def test_sanitize_runs_the_tools_over_a_hung_kernel_too(tmp_path):
    assert decided(tmp_path, {"square_16": "hang"}, {"square_16": "hang"}, always=True) == ""
    assert decided(tmp_path, {}, {"square_16": "pass"}, always=True) == ""


def test_a_kernel_nothing_faulted_in_is_not_run_under_the_tools_as_before(tmp_path):
    assert decided(tmp_path, {}, {"square_16": "pass"}) == NOTHING_FAULTED


def test_a_case_hung_on_both_engines_keeps_both_limits_in_its_metrics(tmp_path):
    gpu_run = on_gpu(tmp_path / "gpu", square_16="hang")
    (case,) = [c for c in merged(gpu_run.made_checks(), on_emulator(tmp_path / "cpu", square_16="hang"))
               if c.name == "square_16"]
    assert case.metrics[HUNG] == case.metrics[EMULATOR_HUNG] == GPU_LIMIT_S and case.metrics["emulator"] == "error"
    passed_beside = merged(on_gpu(tmp_path / "gpu", square_16="hang").made_checks(),
                           on_emulator(tmp_path / "cpu", square_16="pass"))
    assert EMULATOR_HUNG not in passed_beside[-1].metrics


def hung_students_result(tmp_path) -> SubmissionResult:
    """`hang` graded on a GPU with the diagnosis on, laid out by the rubric as the pipeline lays it out."""
    gpu_run = on_gpu(tmp_path / "gpu", square_16="hang", ragged_all="hang", rect_hidden="hang")
    judged = merged(gpu_run.made_checks(), on_emulator(tmp_path / "cpu", square_16="hang", ragged_all="hang",
                                                       rect_hidden="hang"))
    compiled = passed("compile", "compile", 0, "compiled for sm_90, tile size 16")
    diagnosis = skipped(SANITIZER_NAME, SANITIZER, 0, why_not_run(gpu_run.made_cases().values(), judged, False))
    cases = [check for check in judged if check.kind == CASE]  # the events gave no compile: it is made here
    checks = Rubric.of(Config(), CASES, sanitize=True).results([compiled, *cases, diagnosis])
    return SubmissionResult("hang", GRADED, checks, backend="gpu", device="NVIDIA H200", tile_size=16)


def test_the_skip_and_its_reason_reach_every_export_and_the_hang_is_one_cause(tmp_path):
    result = hung_students_result(tmp_path)
    reason = HUNG_ON_BOTH.format(count="3 cases")
    stored = next(c for c in json.loads(to_json(result))["checks"] if c["kind"] == SANITIZER)
    assert (stored["status"], stored["message"]) == (SKIPPED, reason)
    suite = ET.fromstring(to_junit_xml([result]))
    (case,) = [c for c in suite.iter("testcase") if c.get("name") == f"{SANITIZER} {SANITIZER_NAME}"]
    assert case.find("skipped").get("message") == reason
    (test,) = [t for t in to_gradescope(result)["tests"] if t["name"] == f"{SANITIZER}: {SANITIZER_NAME}"]
    assert test["output"] == reason and test["extra_data"]["status"] == SKIPPED
    (test,) = [t for t in to_prairielearn(result)["tests"] if t["name"] == SANITIZER_NAME]
    assert (test["message"], test["output"]) == (SKIPPED, reason)
    # the student reads one cause, at the hang's fix, for both cases they may see (the hidden one only counted)
    (group,) = cause_groups(result)
    assert (group.fix, group.names, group.hidden) == (HANG_FIX, ["square_16", "ragged_all"], 1)
    console = Console(record=True, width=200)
    render(result, console)
    shown = console.export_text()
    assert shown.count(HANG_FIX) == 1 and "not run: the kernel hung on the GPU" in shown
    assert all(c.status != PASSED for c in result.checks if c.kind == CASE)


TRAPPED, ILLEGAL = "unspecified launch failure", "an illegal memory access was encountered"


def test_a_fault_the_emulator_stopped_at_for_a_cause_it_names_is_not_run_under_the_tools(tmp_path):
    """`trap` and `illegal_address`: every case faulted on the GPU, and the emulator stopped each at the student's
    line; `conditional_barrier`: it hung on the GPU, and the emulator stopped each at the divergent barrier."""
    both = ["square_16", "ragged_all"]
    for gpu, emulator in ((TRAPPED, "trap"), (ILLEGAL, "invalid_address"), ("hang", "divergence")):
        reason = decided(tmp_path, dict.fromkeys(both, gpu), dict.fromkeys(both, emulator))
        assert reason == STOPPED_ON_BOTH.format(count="2 cases"), (gpu, emulator)
    assert "would only find it again" in reason and "at your line" in reason
    # a case that hung on both beside one the emulator stopped: the same reason, every faulted case counted
    mixed = decided(tmp_path, {"square_16": "hang", "ragged_all": TRAPPED}, {"square_16": "hang", "ragged_all": "trap"})
    assert mixed == STOPPED_ON_BOTH.format(count="2 cases")
    # only the cases that faulted on the GPU count: one the emulator stopped in alone is told by the emulator already
    one = decided(tmp_path, {"ragged_all": TRAPPED}, {"square_16": "divergence", "ragged_all": "trap"})
    assert one == STOPPED_ON_BOTH.format(count="1 case")


def test_a_fault_whose_cause_the_emulator_did_not_show_still_runs_the_tools(tmp_path):
    """It passed the case (a large case whose sampled blocks missed the faulting one), its process crashed (no
    cause), or it stopped only some of the cases the GPU faulted in: the tools may see what it did not."""
    faulted = {"square_16": TRAPPED, "ragged_all": TRAPPED}
    assert decided(tmp_path, faulted, {"square_16": "trap", "ragged_all": "pass"}) == ""
    assert decided(tmp_path, faulted, {"square_16": "trap", "ragged_all": "crashed"}) == ""
    assert decided(tmp_path, faulted, {"square_16": "trap"}) == ""
    assert decided(tmp_path, faulted, dict.fromkeys(faulted, "trap"), always=True) == ""


def test_a_stopped_case_keeps_the_emulators_words_and_cause(tmp_path):
    """The merged check is the emulator's, naming the line, with what stopped it; where the GPU's values were right,
    the emulator's unsafe stop decides the case but is no GPU fault to spare the tools."""
    gpu_run = on_gpu(tmp_path / "gpu", square_16=TRAPPED)
    (case,) = [c for c in merged(gpu_run.made_checks(), on_emulator(tmp_path / "cpu", square_16="trap"))
               if c.name == "square_16"]
    assert case.message.startswith("kernel aborted: __trap() at line 10") and case.metrics[EMULATOR_STOPPED] == "trap"
    assert stopped_on_both(case)
    emulated = on_emulator(tmp_path / "cpu", ragged_all="divergence", square_16="crashed").cases
    assert emulated["ragged_all"].metrics[STOPPED] == "divergence" and STOPPED not in emulated["square_16"].metrics
    right = passed("ragged_all", CASE, 4, "correct (100×75×50)")
    (case,) = [c for c in merged([right], on_emulator(tmp_path / "cpu", ragged_all="divergence")) if c.kind == CASE]
    assert case.status != PASSED and EMULATOR_STOPPED not in case.metrics and not stopped_on_both(case)


def test_a_fault_told_only_in_a_hidden_case_still_runs_the_tools(tmp_path):
    """rect_hidden shows the student its verdict alone: where the emulator's cause is told there only, the tools'
    findings are what the student can read; where a case they can read tells it too, they are not run."""
    assert decided(tmp_path, {"rect_hidden": TRAPPED}, {"rect_hidden": "trap"}) == ""
    both = {"ragged_all": TRAPPED, "rect_hidden": TRAPPED}
    assert decided(tmp_path, both, dict.fromkeys(both, "trap")) == STOPPED_ON_BOTH.format(count="2 cases")


def test_a_case_the_gpu_left_out_after_a_hang_is_the_emulators_divergent_barrier(tmp_path):
    """After hanging in ragged_all, the GPU run left out rect_hidden, which the emulator stopped for the same divergent
    barrier (hang_notices.py): the case reads as a CPU grade's, at the student's line, says why the GPU gave no
    values in its metrics, and the tools are spared as where it hung in both."""
    gpu_run = on_gpu(tmp_path / "gpu", ragged_all="hang")
    gpu_run.handle({"event": "left_out", "after": "ragged_all", "cases": ["rect_hidden"]})
    gpu_run.handle({"event": "restart", "after": "ragged_all", "restarts": 1})
    emulation = on_emulator(tmp_path / "cpu", ragged_all="divergence", rect_hidden="divergence", square_16="pass")
    judged = {c.name: c for c in merged(gpu_run.made_checks(), emulation) if c.kind == CASE}
    left_out = judged["rect_hidden"]
    assert left_out.message == emulation.cases["rect_hidden"].message
    assert left_out.message.startswith("barrier divergence in block (0, 4): thread (0, 0) waits at the __syncthreads() "
                                       "on line 21")
    assert left_out.metrics[LEFT_OUT] == "ragged_all" and left_out.metrics[EMULATOR_STOPPED] == "divergence"
    assert "the GPU left out the cases the CPU emulator stopped for a divergent barrier: rect_hidden" in gpu_run.log
    # the case it hung in is the one fault on the GPU: the one left out did not run there
    assert why_not_run(gpu_run.made_cases().values(), list(judged.values()), False) == STOPPED_ON_BOTH.format(
        count="1 case")
