"""Turns a child's events (GPU or CPU emulation) into checks: compile, one verdict per case, timing.

Every message here is for a student: what happened, where, and what to look at.
"""
from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .cases import Case
from .config import MAX_LAUNCHES_PER_CASE, Config
from .execute.cpu.evidence import Program, observed, phases_all_ran, stores_off_c
from .execute.cpu.messages import (
    describe_collision,
    describe_problem,
    describe_races,
    describe_unwritten_in_c,
    unstored_read_hint,
)
from .execute.cpu.sampling import BlockSample, sampled_tiles
from .execute.job import student_output
from .execute.protocol import read_untrusted
from .judge.compare import CaseRun, judge_case, wrong_mask
from .judge.engines import HUNG, LEFT_OUT, STOPPED
from .judge.findings import Finding
from .judge.input_records import GENERATED
from .judge.inputs import split_guarded
from .judge.layout import guarded_size
from .judge.locate import stored_over
from .judge.timing import NAME as TIMING_NAME
from .judge.timing import RETIME_FACTOR, judge_timing, needs_retime
from .judge.truths import case_truth, sampled_case_truth
from .result import (
    CASE,
    COMPILE,
    COMPILE_ERROR,
    ERROR,
    GRADED,
    GRADER_ERROR,
    PASSED,
    SUBMISSION_ERROR,
    TIMED_OUT,
    TIMING,
    CheckResult,
    errored,
    passed,
    skipped,
)
from .source.device_side import HOST_CODE_LEFT_OUT

WRONG_KEPT = 256  # wrong elements of a failed case kept for where they are

FAULTS = (
    ("illegal memory access", "kernel fault: illegal memory access: a load or store went outside A, B or C; "
     "check the bounds on row, col and the k index of every load and store"),
    ("misaligned address", "kernel fault: misaligned address: check the index arithmetic of your pointers"),
    ("illegal instruction", "kernel fault: illegal instruction (a trap, an assert, or a corrupted stack)"),
    ("unspecified launch failure", "kernel fault: the kernel aborted (a trap or an assert)"),
    ("too many resources", "launch failed: the block asks for too many registers or too much shared memory"),
    ("invalid argument", "launch failed: invalid launch configuration (check TILE_SIZE)"),
)


def _output(path: Path, elements: int) -> np.ndarray:
    """A child's .npy of float32, exactly `elements` long; ValueError for anything else."""
    try:
        data = read_untrusted(path, elements * 4 + 4096)
    except OSError as error:
        raise ValueError(str(error)) from None
    array = np.load(io.BytesIO(data), allow_pickle=False)
    if array.dtype != np.float32 or array.size != elements:
        raise ValueError(f"{array.dtype} array of {array.size} elements, expected {elements} float32")
    return array


def _worst_launch(judge: Callable[[np.ndarray], CheckResult], outputs: list[np.ndarray],
                  launches: int) -> CheckResult:
    """A case is right only if every launch was: the first wrong output decides (the outputs after it are
    not judged: a wrong 1000×1000 output costs the parent a CPU-second to describe), and when the launches
    disagreed, the message says the result depends on timing."""
    first = None
    for output in outputs:
        check = judge(output)
        first = first or check
        if check.status != PASSED:
            break
    if len(outputs) > 1 and check.status != PASSED:
        check.message += (f"\nthe same inputs gave {len(outputs)} different results in {launches} launches (after "
                          "the first, the grader holds back every other warp): the result depends on the order "
                          "the threads run in")
        return check
    return first


def _tell(check: CheckResult, finding: Finding | None) -> None:
    """Adds what the launches showed together (none of them alone) to a check judged on one of them."""
    if finding is not None:
        check.message += "\n" + finding.fact
        if finding.fix and finding.fix not in check.fixes:
            check.fixes.append(finding.fix)


def _shape(case: Case) -> str:
    return f"case: m={case.m}, n={case.n}, k={case.k}"


@dataclass
class EmulatorFindings:
    races: list[Finding]
    evidence: list[Finding]
    unsafe_reads: list[Finding] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # what costs no points: a read whose value reached no C


def _emulator_findings(event: dict, case: Case, program: Program) -> EmulatorFindings:
    """What the CPU emulator saw in a case (the GPU child reports none of it): the races, what explains wrong
    elements of C (or stores outside it), and the reads of tile entries no thread of the block stored: unsafe
    where their values reached C, else a hint. Such a read is not told after a store and a read raced, which
    explains it (two stores of one entry do not). Two threads storing one element of C are a fact, and their fix
    only where nothing the emulator saw says more."""
    collisions, seen = event.get("collisions", []), observed(event, program, (case.m, case.n, case.k))
    races = describe_races(event.get("races", []), event.get("schedules_differ", 0), case.m * case.n,
                           len(collisions) + stores_off_c(event, program), program.sites.tile_loop)
    evidence = [describe_collision(collision, event.get("c_collisions", 1)) for collision in collisions]
    if any(finding.fix for finding in seen):
        evidence = [replace(finding, fix="") for finding in evidence]
    found = EmulatorFindings(races, seen + evidence)
    if any(race["kind"] != "store_after_store" for race in event.get("races", [])):
        return found
    reads, reached = event.get("unstored_reads", []), event.get("unwritten_in_c", [])
    found.unsafe_reads = [describe_unwritten_in_c(record, next(iter(reads), None)) for record in reached]
    if not reached:
        found.hints = [unstored_read_hint(read) for read in reads]
    return found


# What to change where a case hung, on every engine: one cause however many cases it hung in, whatever their
# names (report/student_view.py groups by a check's first fix).
HANG_FIX = ("make every loop end and every thread of a block reach each __syncthreads(): a thread that waits for a "
            "value other threads or blocks set may wait forever")


def _timed_out(limit_s: float, where: str) -> str:
    return (f"timed out after {limit_s:g} s of its own time {where}: the kernel did not finish (an endless loop, or "
            "a __syncthreads() that some threads never reach)")


# The faults the emulator names a cause for (execute/cpu/messages.py's describe_problem), as a stopped case's metric
NAMED_FAULTS = ("out_of_bounds", "invalid_address", "trap", "abort", "stack_overflow", "arithmetic")


def _named_cause(problem: dict) -> str:
    """What stopped an emulated case, where it is the kernel's own doing (a fault of a kind the emulator names, a
    divergent barrier); "" for a crash of the emulated process or a fault of no known kind, which name no cause."""
    if problem["event"] != "fault":
        return problem["event"]  # divergence, warp_divergence
    return problem["what"] if problem["what"] in NAMED_FAULTS else ""


def describe_fault(error: str) -> str:
    lowered = error.lower()
    for needle, message in FAULTS:
        if needle in lowered:
            return message
    return f"kernel fault: {error.strip()}"


class RunEvents:
    def __init__(self, config: Config, cases: list[Case], workdir: Path, timed: bool = False,
                 child: str = "the GPU process", program: Program | None = None,
                 samples: dict[str, BlockSample] | None = None):
        self.config, self.workdir, self.timed = config, workdir, timed
        # The cases this run ran by sampled blocks (the CPU emulator's large ones): judged on those blocks' tiles
        self.samples = samples or {}
        # Where a large case run whole (on the GPU) was wrong (rows, columns; at most WRONG_KEPT, spread over them):
        # the blocks a GPU grade has the emulator run too when its sample missed them (emulation.py)
        self.wrong_at: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # What the CPU emulator's reports refer to (its sites, the kernel's names; the tile once compiled)
        self.program = program or Program(x=config.kernel.contract().x)
        self.child = child  # what the messages call the child: the GPU process or the CPU emulator's
        self.cases = {case.name: case for case in cases}
        self.case_results: dict[str, CheckResult] = {}
        # Cases whose outputs are read but not yet judged: judging waits until a verdict is needed (the
        # timing decision, the results), so the parent reads on and gives the GPU back as soon as the
        # child is done with it, not after the float64 comparisons.
        self.unjudged: dict[str, Callable[[], CheckResult]] = {}
        self.compile_check = skipped("compile", COMPILE, config.points.compile, "the GPU run did not start")
        self.timing: CheckResult | None = None
        self.timing_rounds: list[dict] = []  # each measurement the child made, in order
        self.waited_s = 0.0  # for turns on the device: never counted against the student
        self.held_s: dict[str, float] = {}  # per kind of turn: the device time this submission took
        self.inputs_from: dict[str, str] = {}  # per case its child ran: cached or generated (judge/input_files.py)
        self.not_run_reason = "not run"
        self.broken_cases: list[str] = []
        self.grader_error = ""
        self.emulator_compile_error = False  # the CPU emulator's build failed (maybe where nvcc would not)
        self.emulator_log = ""  # then what its compiler printed: whose failure it was (grader/build_failure.py)
        self.compile_timed_out = False
        # The file compiled but breaks the lab's rules (a tile size it does not allow, a declaration the
        # launchers cannot call): a submission error, not a compile error.
        self.submission_problem = ""
        self.device, self.tile_size, self.log = "", None, ""
        self.student_cubin = ""  # the GPU child's cached cubin of the student's file, when there is one
        self.phases: dict[str, float] = {}  # where the children's time went, on the parent's clock (phases.py)
        self.access_profile: dict | None = None  # the CPU emulator's access_profile event (issue 26)

    @property
    def outcome(self) -> str:
        """The submission's outcome as this run decided it."""
        if self.grader_error or self.timing_lost:
            return GRADER_ERROR
        if self.submission_problem:
            return SUBMISSION_ERROR
        if self.compile_check.status == ERROR:
            return TIMED_OUT if self.compile_timed_out else COMPILE_ERROR
        return GRADED

    def correct_so_far(self) -> bool:
        self.judge_outputs()
        return len(self.case_results) == len(self.cases) and all(c.passed for c in self.case_results.values())

    @property
    def timing_lost(self) -> bool:
        """Every case passed, so the kernel was due its timing, and no measurement came: the grader's fault."""
        return self.timed and self.timing is None and self.compile_check.passed and self.correct_so_far()

    def timing_turn(self) -> int:
        """Repetitions for the child's next measurement; 0 for none. A correct kernel is timed once, and once
        more with more repetitions when the first measurement is too close to the limit to decide."""
        if not self.correct_so_far():
            return 0
        timing = self.config.timing
        if not self.timing_rounds:
            return timing.repetitions
        if len(self.timing_rounds) == 1 and needs_retime(self.timing_rounds[0], timing.max_ratio):
            return timing.repetitions * RETIME_FACTOR
        return 0

    def handle(self, event: dict) -> None:
        getattr(self, "on_" + event["event"])(event)

    # -- compile -------------------------------------------------------------------------------

    def on_compiled(self, event: dict) -> None:
        self.device, self.tile_size = event["device"], event["tile_size"]
        self.student_cubin = event.get("student_cubin", "")
        contract = self.config.kernel.contract()
        points, allowed = self.config.points.compile, contract.tile_sizes
        sizes = ", ".join(map(str, allowed))
        if "reference_tile" in event and event["reference_tile"] is None:
            self.grader_error = "grader error: the reference kernel defines none of the tile size macros"
            self._compile_error("not run: the grader's reference kernel is broken")
        elif self.tile_size is None:
            self._compile_error("the grader could not tell the tile size; the kernel was not run")
        elif self.tile_size not in allowed:
            self.submission_problem = (f"the tile size is {self.tile_size}; this lab allows {sizes}: size the "
                                       "__shared__ tiles (and the blocks) with one of those")
            self._compile_error(self.submission_problem)
        else:
            note = f" ({HOST_CODE_LEFT_OUT})" if event.get("host_code_left_out") else ""
            self.compile_check = passed("compile", COMPILE, points,
                                        f"compiled for {event['arch']}, tile size {self.tile_size}{note}",
                                        metrics={"ready_after_s": event["elapsed_s"],
                                                 "child_cpu_s": event.get("cpu_s"), **_child_figures(event)})

    def on_compile_error(self, event: dict) -> None:
        self.emulator_compile_error = bool(event.get("emulator"))
        self.emulator_log = event.get("log", "")
        if event["target"] == "reference":
            self.grader_error = "grader error: the reference kernel does not compile:\n" + event["message"]
            self._compile_error("not run: the grader's reference kernel does not compile")
        else:
            if event.get("mismatch"):
                self.submission_problem = event["message"]
            self._compile_error(event["message"])

    def on_kernel_missing(self, event: dict) -> None:
        if event["target"] == "reference":
            self.grader_error = "grader error: " + event["message"] + " (reference)"
        self._compile_error(event["message"])

    def _compile_error(self, message: str) -> None:
        self.compile_check = errored("compile", COMPILE, self.config.points.compile, message)
        self.not_run_reason = "not run: the kernel did not compile or load"

    # -- cases ---------------------------------------------------------------------------------

    def on_case(self, event: dict) -> None:
        case = self.cases.get(event["case"])
        if case is None:
            self._broken(event, f"the grading process reported a case it was not given ({event['case'][:40]!r})")
            return
        self.inputs_from[case.name] = event.get("inputs", GENERATED)
        launches = event.get("launches", 1)
        distinct = event.get("distinct_outputs", 1)
        if not 1 <= distinct <= launches <= MAX_LAUNCHES_PER_CASE:
            self._broken(event, f"the grading process reported {distinct} outputs of {launches} launches")
            return
        folder = Path(event["folder"])
        try:
            buffers = [_output(folder / f"{case.name}.{student_output(i)}.npy", guarded_size(case.m, case.n))
                       for i in range(distinct)]
            # The CPU backend runs no reference kernel.
            reference = folder / f"{case.name}.reference.npy"
            reference = _output(reference, case.m * case.n) if reference.exists() else None
        except ValueError as error:
            self._broken(event, f"the kernel's output could not be read back ({error})")
            return
        if reference is not None:
            reference = reference.reshape(case.m, case.n)
        found = _emulator_findings(event, case, self._program())

        def judge() -> CheckResult:
            tolerance = self.config.tolerance
            a, b, truth = self._truth(case)
            check = _worst_launch(
                lambda buffer: judge_case(
                    case.name, case.points, a, b,
                    CaseRun(buffer=buffer.ravel(), reference=reference, a_changed=event["a_changed"],
                            b_changed=event["b_changed"], seconds=event["seconds"], races=found.races,
                            evidence=found.evidence, unsafe_reads=found.unsafe_reads, hints=found.hints,
                            phase_count_right=phases_all_ran(event, self._program(), (case.m, case.n, case.k))),
                    self.tile_size, tolerance.k_factor, tolerance.abs, case.visibility, truth),
                buffers, launches)
            if check.status != PASSED and case.sampled and case.name not in self.samples:  # a large one, run whole
                self._keep_wrong_at(case, buffers, truth)
            if len(buffers) > 1 and check.status != PASSED and truth.checked is None:
                _tell(check, stored_over([split_guarded(x.ravel(), case.m, case.n)[1] for x in buffers], truth))
            return check

        self.unjudged[case.name] = judge  # the outputs as they were now: what the child writes later is not read

    def _keep_wrong_at(self, case: Case, buffers: list[np.ndarray], truth) -> None:
        """The wrong elements of the first launch that had some, a spread of at most WRONG_KEPT of them."""
        for buffer in buffers:
            at = np.flatnonzero(wrong_mask(split_guarded(buffer.ravel(), case.m, case.n)[1], truth))
            if at.size:  # rows and columns of the picked ones alone: a wrong stride makes a million wrong
                pick = np.unique(np.linspace(0, at.size - 1, min(WRONG_KEPT, at.size)).astype(np.int64))
                self.wrong_at[case.name] = np.divmod(at[pick], case.n)
                return

    def _truth(self, case: Case):
        """The case's inputs and truth: of the whole of C, or of a sampled case's tiles alone (the same tiles the
        driver ran, computed here from the same sample and tile size: never the child's word)."""
        sample = self.samples.get(case.name)
        if sample is None:
            return case_truth(case, self.config)
        tiles = sampled_tiles(case.m, case.n, self.tile_size, sample)
        return sampled_case_truth(case, self.config, tiles.all, self.tile_size, tiles.describe(), keep=not tiles.extra)

    def judge_outputs(self) -> None:
        """Judge every case whose outputs were read."""
        for name, judge in list(self.unjudged.items()):
            self.case_results[name] = judge()
            del self.unjudged[name]

    def made_cases(self) -> dict[str, CheckResult]:
        """Each case this run judged, by name."""
        self.judge_outputs()
        return dict(self.case_results)

    def on_case_error(self, event: dict) -> None:
        """The CPU emulator stopped one case (fault, divergence, or past its time limit: told as the parent's
        timeout is); the next case runs as usual."""
        case = self.cases.get(event["case"])
        if case is None:
            self._broken(event, "the grading process reported a case it was not given")
            return
        if event["problem"]["event"] == "timeout":
            limit = event["problem"]["limit_s"]
            self._broken({"phase": "case", "case": case.name}, _timed_out(limit, f"in case {case.name}"), limit)
            return
        problem = describe_problem(event["problem"], (case.m, case.n, case.k), self._program())
        cause = _named_cause(event["problem"])
        self.case_results[case.name] = errored(
            case.name, CASE, case.points, f"{problem.fact}\n({_shape(case)}; thread order: {event['schedule']})",
            visibility=case.visibility, fixes=[problem.fix] if problem.fix else [],
            unsafe=[problem.unsafe] if problem.unsafe else [], metrics={STOPPED: cause} if cause else {})

    def _program(self) -> Program:
        return replace(self.program, tile=self.tile_size or 0)

    def on_fault(self, event: dict) -> None:
        self._broken(event, describe_fault(event.get("error", "")))

    def on_timeout(self, event: dict) -> None:
        limit = event["limit_s"]
        if event["phase"] in ("startup", "compile"):
            what = "compilation" if event["phase"] == "compile" else f"starting {self.child}"
            self._compile_error(f"{what} timed out after {limit:g} s of its own time")
            self.compile_timed_out = True
            return
        where = {"timing": "while being timed", "profile": "in the access profile"}.get(
            event["phase"], f"in case {event.get('case')}")
        self._broken(event, _timed_out(limit, where), limit)

    def on_crash(self, event: dict) -> None:
        message = f"{self.child} ended unexpectedly (exit code {event['returncode']})"
        if event["phase"] in ("startup", "compile"):
            self.grader_error = "grader error: " + message
            self._compile_error("not run: " + message)
        else:
            self._broken(event, message)

    def _broken(self, event: dict, message: str, timed_out_s: float | None = None) -> None:
        """A fault, hang or crash: it ends the case (or stage) it happened in. `timed_out_s`: a hang's limit, kept
        in the case's metrics (judge/engines.py tells a hang on both engines in the GPU's words)."""
        name = event.get("case")
        if event.get("phase") == "profile":  # after every case: no advice, and nothing else changes
            self.log += f"\n[grader] no access profile (advice only): {message}\n"
            return
        if event.get("phase") == "timing":
            self.timing = errored(TIMING_NAME, TIMING, self.config.points.timing, message)
        elif name in self.case_results or name in self.unjudged:
            self.log += f"\n[grader] after case {name} was judged: {message}\n"
        elif name in self.cases:
            case = self.cases[name]
            hung = timed_out_s is not None
            self.case_results[name] = errored(name, CASE, case.points, f"{message}\n({_shape(case)})",
                                              visibility=case.visibility, fixes=[HANG_FIX] if hung else [],
                                              metrics={HUNG: timed_out_s} if hung else {})
            self.broken_cases.append(name)
            self.not_run_reason = (f"not run: the kernel crashed or hung in {len(self.broken_cases)} cases "
                                   f"({', '.join(self.broken_cases)}), so the grader stopped running it")
        else:
            self._compile_error(message)

    def on_protocol_error(self, event: dict) -> None:
        self._broken(event, f"the kernel's process broke the grader's protocol and was stopped ({event['error']})")

    def on_left_out(self, event: dict) -> None:
        """Cases the GPU run left out after hanging in one (hang_notices.py): the emulator beside it stopped each for
        a divergent barrier, and its check, unsafe, is the case's (judge/engines.py); this one only says why the GPU
        gave no values."""
        for name in event["cases"]:
            case = self.cases[name]
            self.case_results[name] = errored(
                name, CASE, case.points, f"not run on the GPU: the kernel hung there in case {event['after']}, and the "
                f"CPU emulator stopped this case too for a barrier that not every thread reaches\n({_shape(case)})",
                visibility=case.visibility, metrics={LEFT_OUT: event["after"]})
        self.log += (f"\n[grader] after case {event['after']} hung, the GPU left out the cases the CPU emulator "
                     f"stopped for a divergent barrier: {', '.join(event['cases'])}\n")

    def on_restart(self, event: dict) -> None:
        fresh = self.child.removeprefix("the ")
        self.log += f"\n[grader] case {event['after']} crashed or hung: a fresh {fresh} runs the rest\n"

    def on_timing(self, event: dict) -> None:
        timing = self.config.timing
        self.timing_rounds.append(event)
        self.timing = judge_timing(self.timing_rounds, self.config.points.timing, timing.max_ratio,
                                   timing.min_plausible_ratio)
        self.timing.metrics.update(done_after_s=event["elapsed_s"],
                                   phase_s=round(sum(r.get("phase_s", 0) for r in self.timing_rounds), 3))

    def on_turn(self, event: dict) -> None:
        self.waited_s += event["waited_s"]

    def on_turns_held(self, event: dict) -> None:
        for kind, seconds in event["held_s"].items():
            self.held_s[kind] = self.held_s.get(kind, 0.0) + seconds

    def on_output(self, event: dict) -> None:
        self.log += event["text"]
        for phase, seconds in event.get("phases", {}).items():  # a restarted child's add up
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def on_done(self, event: dict) -> None:
        pass

    def on_access_profile(self, event: dict) -> None:
        self.access_profile = event  # judged into feedback by the pipeline, once the run's outcome is known

    # -- results -------------------------------------------------------------------------------

    def made_checks(self) -> list[CheckResult]:
        """The checks this run decided: compile, each case that ran, timing when it was measured or lost.
        The rubric says why the others were not made (not_run_reason when nothing else does)."""
        self.judge_outputs()
        made = [self.compile_check, *self.case_results.values()]
        if self.timing:
            made.append(self.timing)
        elif self.timing_lost:
            made.append(errored(TIMING_NAME, TIMING, self.config.points.timing, "grader error: every case passed but "
                                "the GPU process ended before it was timed; it will be timed when graded again "
                                "(--resume)"))
        return made


def _child_figures(event: dict) -> dict:
    """What the GPU child says its start took: CUDA's initialisation, its context, each compile (side by side),
    and whether they were compiled ahead, on the toolchain hint, while CUDA started."""
    return {key: event[key] for key in ("init_s", "context_s", "student_compile_s", "reference_compile_s",
                                        "compiled_ahead") if key in event}
