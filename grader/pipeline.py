"""Grades one submission: submission → static check → compile → run cases → compare → time → result.

Each stage is a function returning checks; data flows one way into one SubmissionResult. The cases run
in a child process: the GPU worker, or the CPU emulator when no GPU is at hand.
"""
from __future__ import annotations

import functools
import itertools
import os
import shutil
import socket
import time
import traceback
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .build_failure import BuildFailure, classify
from .cases import SAMPLED, SKIP, WHOLE, Case, sample_seed
from .config import Config
from .contract import WIDTH, KernelContract
from .diagnose.groups import GUARD, Vouched, check_in_group
from .diagnose.profile import profile_lines, profile_submission
from .diagnose.resources import add_compiler_feedback, warm_reference
from .diagnose.run import NAME as SANITIZER_NAME
from .diagnose.run import TOOLS, SanitizerRun, sanitize, sanitizer_path
from .diagnose.safety import CaseSafety, case_safety
from .emulation import (
    Emulation,
    emulate_where_wrong,
    emulation_of,
    merged,
    start_beside,
    with_tool_findings,
)
from .execute.confine.sandbox import Sandbox, detect
from .execute.cpu.build import compiler
from .execute.cpu.evidence import Program
from .execute.cpu.instrument import sites_of
from .execute.cpu.sampling import BlockSample, Tile
from .execute.gpu.device_lock import DeviceLock
from .execute.job import CaseSpec, Job, TimingSpec
from .execute.nvcc import check_cache, cubin_cache
from .execute.nvcc.compile import CompileOutcome, nvcc_path, prepare_source, reference_module_source
from .execute.runner import ChildProgram, Limits, Placement, run_job
from .intake.submission import KERNEL_FILE, Submission, SubmissionError, locate, missing_headers, read_submission
from .judge.access import access_feedback, measured_on_the_gpu
from .judge.timing import NAME as TIMING_NAME
from .judge.warming import Warming
from .leftovers import GRADE, owned_folder
from .phases import Phases
from .result import (
    CASE,
    COMPILE,
    COMPILE_ERROR,
    ERROR,
    FAILED,
    GRADED,
    GRADER_ERROR,
    NEEDS_GPU_GRADE,
    SANITIZER,
    SKIPPED,
    STATIC,
    SUBMISSION_ERROR,
    THROUGHPUT,
    TIMED_OUT,
    TIMING,
    CheckResult,
    Feedback,
    SubmissionResult,
    errored,
    passed,
    skipped,
)
from .rubric import Rubric
from .source.device_side import HOST_CODE_LEFT_OUT, device_side
from .source.include_policy import check_source, drop_host_headers, missing_here
from .source.include_policy import describe as describe_violations
from .source.signature import hip_problem, kernel_parameters, signature_problem
from .source.static_check import find_kernels, static_checks
from .source.tile_size import launched_without_tile_size, tile_constant
from .source.toolkit_headers import toolkit_headers, unneeded_headers

if TYPE_CHECKING:
    from .run_events import RunEvents

GPU, CPU = "gpu", "cpu"
CPU_NOTE = "CPU emulation: correctness checked, timing skipped"
# Why a check a CPU run skips needs a GPU (CheckResult.needs_gpu): said once per kind in every report.
# Only the machine and the config decide these: nothing a submission does adds to them.
NEEDS_GPU_TIMING, NEEDS_GPU_LARGE = "timing", "large cases"


@dataclass
class RunPlan:
    """Where the cases run: "gpu", "cpu" (emulation), or None for the static check and compile only."""

    backend: str | None
    skip_reason: str = ""  # shown on each skipped check when backend is None
    note: str = ""  # why this backend, shown with the result
    placement: Placement | None = None  # which GPU, and its timing lock, in a batch
    # compute-sanitizer's diagnosis is a check (GPU backend): run where it sees what the CPU emulator cannot (a
    # GPU fault, a kernel the emulator cannot build), or on every kernel with sanitize_always (--sanitize).
    sanitize: bool = False
    sanitize_always: bool = False
    # How many emulator workers run one grade's cases side by side (0: one per core it may use). A batch, which
    # grades a student per core, gives each student one; beside a GPU child, the child keeps a core.
    emulator_workers: int = 0
    profile: bool = False  # also measure the kernel and the reference with Nsight Compute (GPU backend, advice)
    sandbox: Sandbox | None = None  # where student code runs; None: the strongest this machine allows
    # In a batch worker: its socket to the batch parent, which checks kernels under the sanitizer in groups
    # (diagnose/groups.py); None grades alone.
    sanitizer_channel: int | None = None


@functools.cache
def _detected_sandbox() -> Sandbox:
    return detect()


def sandbox_of(plan: RunPlan) -> Sandbox:
    return plan.sandbox or _detected_sandbox()


def placement_of(plan: RunPlan, config: Config) -> Placement:
    """The batch's placement, or for one submission the machine's GPU (or the CPU emulator), with its turns
    kept in the cache folder: a single grade and a batch on one machine take turns on the same lock."""
    if plan.placement is not None:
        return plan.placement
    return Placement(lock=device_lock(config, None if plan.backend == GPU else CPU))


def device_lock(config: Config, gpu: int | str | None) -> DeviceLock:
    """The lock of one GPU (by its index among the visible ones), of the GPU a child sees by default
    (None), or of "cpu" for the emulator."""
    if gpu is None:
        gpu = Placement().gpu_name()
    # Per host: cluster workers whose cache sits in one shared home folder (NFS) must not queue for each
    # other's "gpu0".
    turns = config.cache_dir / "turns" / socket.gethostname()
    if gpu == CPU:
        return DeviceLock(turns, CPU, shared_kinds=frozenset({"case"}))
    return DeviceLock(turns, f"gpu{gpu}", shared_kinds=frozenset({"sanitizer"}))


def grade(path: Path, config: Config, cases: list[Case], plan: RunPlan) -> SubmissionResult:
    started = time.perf_counter()
    phases = Phases(started)
    if plan.backend == GPU:  # where no child has reported this GPU's toolchain yet, the parent learns it meanwhile
        cubin_cache.guess_soon(str(config.cache_dir), (plan.placement or Placement()).gpu_name())
    try:
        result = _grade(path, config, cases, plan, phases)
    except SubmissionError as exc:
        result = not_graded(path, config, cases, str(exc))
    except Exception:  # a grader bug must cost one submission, never the batch
        result = not_graded(path, config, cases, "internal grader error: tell your instructor", GRADER_ERROR)
        result.log = traceback.format_exc()
    phases.mark("grading_other")
    result.duration_s = round(time.perf_counter() - started, 3)
    result.phases = phases.rounded()
    return result


def _grade(path: Path, config: Config, cases: list[Case], plan: RunPlan, phases: Phases) -> SubmissionResult:
    submission = read_submission(path, config.compile.handed_in_headers)
    _drop_host_headers(submission, config.compile.host_only_headers)
    kernels = find_kernels(submission.source)
    accepted = config.kernel.names
    config = config.for_kernels(kernels)  # the kernel graded, decided once, before anything compiles
    result = _graded(submission, kernels, config, cases, plan, phases, accepted)
    _say_which_kernel(result, kernels, config.kernel.name, accepted)
    _say_how_launched(result, _with_headers_after(submission), config)
    return result


def _drop_host_headers(submission: Submission, host_only: list[str]) -> None:
    """Before anything compiles, on every machine and every engine alike: the lab's host-only headers (wb.h),
    and the toolkit's library headers no device code uses (cuBLAS's for a host wrapper), whose packages a
    grading machine may lack (toolkit_headers.py). Host code that needed them is then left out as usual."""
    files = [submission.source, *submission.headers.values()]
    libraries = unneeded_headers(files, submission.headers)
    submission.source = drop_host_headers(submission.source, host_only, libraries)
    submission.headers = {name: drop_host_headers(text, host_only, libraries)
                          for name, text in submission.headers.items()}


def _say_how_launched(result: SubmissionResult, source: str, config: Config) -> None:
    """A kernel whose tiles give no size is launched with the config's block size and graded on its values;
    the compile check says so (the static checks say what is missing)."""
    compiled = next((check for check in result.checks if check.kind == COMPILE), None)
    kernel = config.kernel
    if compiled is not None and compiled.passed and launched_without_tile_size(source, kernel.name,
                                                                                 tuple(kernel.tile_macros)):
        compiled.message += (f"\nno tile size in the file (no __shared__ tile is sized by a constant, and none of "
                             f"{', '.join(kernel.tile_macros)} is defined): launched with blocks of "
                             f"{kernel.block_size} × {kernel.block_size} threads")


def _say_which_kernel(result: SubmissionResult, kernels: list[str], graded: str, accepted: tuple[str, ...]) -> None:
    """A file with more kernels than the lab's (both course families' in one, a naive version kept beside
    the tiled one) is graded on the configured kernel, and the compile check says so; so is a file of a lab
    that accepts several names (the first of them the file defines)."""
    others = [name for name in kernels if name != graded]
    compiled = next((check for check in result.checks if check.kind == COMPILE), None)
    if graded not in kernels or compiled is None:
        return
    if len(accepted) > 1:
        compiled.message += (f"\ngraded {graded}, the first of the names this lab accepts "
                             f"({', '.join(accepted)}) that the file defines")
        if others:
            compiled.message += f"; the file also defines {', '.join(others)}, which the grader does not run"
    elif others:
        compiled.message += (f"\ngraded {graded}, the kernel this lab names; the file also defines "
                             f"{', '.join(others)}, which the grader does not run")


def _graded(submission: Submission, kernels: list[str], config: Config, cases: list[Case],
            plan: RunPlan, phases: Phases, accepted: tuple[str, ...] = ()) -> SubmissionResult:
    sandbox = sandbox_of(plan)
    result = SubmissionResult(submission.name, GRADED, backend=plan.backend or "none", sandbox=sandbox.level,
                              sandbox_note=sandbox.note)
    rubric = Rubric.of(config, cases, sanitize=plan.sanitize and plan.backend == GPU)
    statics = static_checks(_with_headers_after(submission), config.kernel.name, vars(config.points.static))
    result.feedback += _barrier_cost(statics)
    refusal, outcome = _refusal_before_compiling(submission.source, kernels, config, accepted, submission.headers)
    phases.mark("static")
    if refusal:
        result.checks = rubric.results([errored("compile", COMPILE, config.points.compile, refusal), *statics])
        result.outcome = outcome
        return _settled(result, config)
    if plan.backend is None:
        result.message = plan.skip_reason
        compiled = compile_without_gpu(submission, config, sandbox)
        phases.mark("nvcc_check")
        add_compiler_feedback(result, compiled.check, compiled.cubin, config, sandbox, None)
        phases.mark("feedback")
        result.checks = rubric.results([compiled.check, *statics], plan.skip_reason)
        result.outcome = compiled.outcome
        if compiled.outcome == GRADER_ERROR:
            result.message = compiled.check.message
        return _settled(result, config)
    if plan.backend == CPU:
        result.message = plan.note or CPU_NOTE
        made, not_run = _checks_on_cpu(submission, config, cases, result, plan, phases)
        result.checks = rubric.results([*made, *statics], not_run)
        return _settled(result, config)
    beside = _emulate_beside(submission, config, cases, plan)
    run = run_child(submission, config, _emulated_first(cases), GPU, plan)
    phases.mark_split(run.phases, "grading_other")
    _take_run(result, run)
    if run.compile_check.passed:
        add_compiler_feedback(result, run.compile_check, run.student_cubin, config, sandbox, run.tile_size)
    phases.mark("feedback")
    emulation = emulation_of(beside, submission, "no C++ compiler (g++) for the CPU emulator on this host")
    phases.mark("emulator_wait")
    judged, safety = _judged_by_both(submission, config, cases, result, plan, run, emulation)
    made = [*judged, *statics]
    phases.mark("judge")
    diagnosis = _diagnosis(submission, config, run, plan, made, safety) if rubric.has(SANITIZER_NAME) else None
    phases.mark("sanitizer")
    if diagnosis is not None:
        made.append(diagnosis)
        if diagnosis.status == ERROR and result.outcome == GRADED:
            result.outcome = GRADER_ERROR  # the diagnosis could not run: graded again by --resume
    if plan.profile and run.compile_check.passed and run.tile_size:
        _profile(result, made, config, run, plan, submission.source)
        phases.mark("profile")
    result.checks = rubric.results(made, run.not_run_reason)
    return _settled(result, config)


def _emulated_first(cases: list[Case]) -> list[Case]:
    """Both engines' order: the cases the emulator runs whole first, in the config's order, then the large ones
    (those it runs by sampled blocks, then those it does not run). Both engines then launch the kernel in the same
    sequence, so a kernel that counts its launches in a device global behaves the same on both (execute/cpu:
    launches per case), and one that counts its blocks (a grid's last block) sees the same counts in every case
    run whole: a sampled case runs some of its blocks only."""
    return [case for kind in (WHOLE, SAMPLED, SKIP) for case in cases if case.on_cpu == kind]


def _emulate_beside(submission: Submission, config: Config, cases: list[Case], plan: RunPlan) -> Future | None:
    """The emulator's run of every case it can run (a large one by sampled blocks), started now, beside the GPU
    child: None where this host has no C++ compiler for it (the tools then judge safety)."""
    emulated = [case for case in _emulated_first(cases) if case.emulated]
    if not emulated or compiler() is None:
        return None
    return start_beside(functools.partial(run_child, submission, config, emulated, CPU, _emulator_plan(config, plan)))


def _emulator_plan(config: Config, plan: RunPlan) -> RunPlan:
    """How the emulator runs beside a GPU grade: on the CPU's turns, with every core but the GPU child's."""
    workers = plan.emulator_workers or max(1, len(os.sched_getaffinity(0)) - 1)
    return replace(plan, backend=CPU, placement=Placement(lock=device_lock(config, CPU)), sanitizer_channel=None,
                   emulator_workers=workers)


def _judged_by_both(submission: Submission, config: Config, cases: list[Case], result: SubmissionResult,
                    plan: RunPlan, run: RunEvents, emulation: Emulation) -> tuple[list[CheckResult],
                                                                                    CaseSafety | None]:
    """The GPU run's checks, each case decided by the rule for every engine: right values (the GPU's) and
    nothing unsafe (the emulator's view; where it cannot judge, compute-sanitizer's on the same cases, whose
    run is returned too)."""
    made = run.made_checks()
    if not run.compile_check.passed or not run.tile_size:
        return made, None
    if emulation.judged:
        quiet = replace(config, feedback=replace(config.feedback, emulator=False))  # the advice is the first run's
        on_cpu = _emulator_plan(config, plan)
        emulate_where_wrong(run, emulation, [case for case in cases if case.sampled],
                            lambda missed, extra: run_child(submission, quiet, missed, CPU, on_cpu, extra))
        _emulator_feedback(result, emulation.run, submission, config)
        # where the emulator's time went, beside the GPU's (bench/grade_time.py)
        run.compile_check.metrics["emulator_phases"] = {phase: round(seconds, 3)
                                                        for phase, seconds in emulation.run.phases.items()}
        return merged(made, emulation), None
    if emulation.log:
        result.log += f"\n[grader] the CPU emulator could not judge this kernel:\n{emulation.log}\n"
    emulated = [case for case in cases if case.on_cpu == WHOLE]  # the tools' small launches: not the large cases
    safety = case_safety(_sanitizer_run(submission, config, run), emulated, placement_of(plan, config),
                         sandbox_of(plan), config.cache_dir) if emulated else CaseSafety()
    run.compile_check.metrics["safety_tools_s"] = round(safety.tools_s, 3)
    if safety.problem:
        result.message = _joined(result.message, f"Not checked for out-of-bounds accesses, races or divergent "
                                 f"barriers: {emulation.why_not}, and compute-sanitizer could not check it "
                                 f"({safety.problem})")
        if result.outcome == GRADED and sanitizer_path() is not None:
            result.outcome = GRADER_ERROR  # the tools could not run here this time: graded again by --resume
    return with_tool_findings(made, safety.findings), safety


def _joined(*parts: str) -> str:
    return ". ".join(part for part in parts if part)


def _profile(result: SubmissionResult, made: list[CheckResult], config: Config, run: RunEvents,
             plan: RunPlan, source: str) -> None:
    """Nsight Compute's findings (advice, no points) and its figures on the timing check (or the compile check);
    what it measured at each line the emulator's findings name, said with them."""
    t = config.timing
    contract, shape = config.kernel.contract(), (t.m, t.n, t.k)
    placement, sandbox = placement_of(plan, config), sandbox_of(plan)
    try:
        found, figures = profile_submission(run.student_cubin, contract, run.tile_size, shape,
                                            config.reference_path.read_text(encoding="utf-8"),
                                            config.compile.options, run.device, placement, sandbox, config.cache_dir,
                                            config.timeouts.compile_s)
        lines, problem = profile_lines(run.student_cubin, source, contract, run.tile_size, shape, placement,
                                       sandbox, config.cache_dir)
    except Exception:  # advice must never cost a grade
        result.log += "\n[grader] Nsight Compute's profile failed:\n" + traceback.format_exc()
        return
    result.feedback = measured_on_the_gpu(result.feedback, lines) + found
    by_line = {str(line): counters.figures() for line, counters in sorted(lines.items())}
    figures["lines"] = {line: measured for line, measured in by_line.items()
                        if any(value is not None for value in measured.values())}
    if problem and "skipped" not in figures:  # ncu ran, but its lines could not be read
        figures["lines_problem"] = problem
    shown = next((c for c in made if c.kind == TIMING), run.compile_check)
    shown.metrics["ncu"] = figures


def _barrier_cost(statics: list[CheckResult]) -> list[Feedback]:
    """What a barrier that counts costs where it runs more often than it needs to (advice, no points)."""
    return [Feedback(THROUGHPUT, f"line {check.metrics['line']}: the __syncthreads() inside the inner loop runs "
                     "once per iteration of it, a whole block waiting each time",
                     "move it after the inner loop: one barrier there keeps the next tiles from overwriting these",
                     line=check.metrics["line"], source="static check")
            for check in statics if check.passed and check.metrics.get("in_inner_loop")]


def _with_headers_after(submission: Submission) -> str:
    """kernel.cu with the handed-in headers' text after it, for the static checks and the tile size: the
    helpers, macros and constants a header defines are found, and every line of kernel.cu keeps its number."""
    return "\n".join([submission.source, *submission.headers.values()])


def _refusal_before_compiling(source: str, kernels: list[str], config: Config, accepted: tuple[str, ...] = (),
                              headers: dict[str, str] | None = None) -> tuple[str, str]:
    """Why the file is not compiled at all, or '', and the outcome that makes: HIP, no such kernel, or
    anything that could make a compiler open a file (no byte of one may reach a report), in kernel.cu or a
    header handed in with it; a handed-in header that is included but missing, or a declaration the
    launchers cannot call, is a submission error (the file may well compile)."""
    hip = hip_problem(source)
    if hip:
        return hip, COMPILE_ERROR
    if config.kernel.name not in kernels:
        found = f"found: {', '.join(kernels)}" if kernels else "found no __global__ kernel"
        return f"kernel {' or '.join(accepted or config.kernel.names)} not found; {found}", COMPILE_ERROR
    refused = _include_refusal({KERNEL_FILE: source, **(headers or {})}, config)
    if refused:
        return refused, COMPILE_ERROR
    missing = missing_headers([source, *(headers or {}).values()], config.compile.handed_in_headers, headers or {})
    if missing:
        return missing, SUBMISSION_ERROR
    declared = signature_problem(source, config.kernel.contract())
    return (declared, SUBMISSION_ERROR) if declared else ("", GRADED)


def _include_refusal(files: dict[str, str], config: Config) -> str:
    """The include policy's refusal of kernel.cu or of a handed-in header (named: its line numbers are its own)."""
    allowed, handed_in = config.compile.allowed_headers, config.compile.handed_in_headers
    for name, text in files.items():
        violations = check_source(text, allowed, handed_in)
        if violations:
            described = describe_violations(violations, allowed, handed_in)
            if name == KERNEL_FILE:
                return described
            return described.replace("these lines", f"these lines of {name} (handed in with it)", 1)
    return ""


def _settled(result: SubmissionResult, config: Config) -> SubmissionResult:
    """The same file scores the same on every path (CLI, batch, LMS): code that did not compile keeps its
    static points only where the config says so; a submission error (a tile size or declaration the lab does
    not allow, in a file that may compile) scores nothing, with its reason."""
    compiled = next((check for check in result.checks if check.kind == COMPILE), None)
    if result.outcome == SUBMISSION_ERROR and compiled is not None:
        result.message = compiled.message
        result.checks = [check if check is compiled else _unscored(check, "not graded: " + compiled.message, True)
                         for check in result.checks]
    elif (result.outcome in (COMPILE_ERROR, TIMED_OUT) and compiled is not None and compiled.status == ERROR
          and not config.points.static_after_compile_error):
        result.checks = [_unscored(check, NOT_BUILT + check.message) if check.kind == STATIC else check
                         for check in result.checks]
    return result


NOT_BUILT = "no points: the code does not compile, so this check of it does not count. It said: "


def _unscored(check: CheckResult, message: str, skipped_too: bool = False) -> CheckResult:
    if check.status == SKIPPED and not skipped_too:
        return check
    return skipped(check.name, check.kind, check.max_score, message, visibility=check.visibility,
                   needs_gpu=check.needs_gpu)


def _take_run(result: SubmissionResult, run: RunEvents) -> None:
    """What the child's run says of the submission as a whole: device, tile, log and the outcome."""
    result.device, result.tile_size, result.log = run.device, run.tile_size, run.log
    result.outcome = run.outcome
    run.compile_check.metrics["turn_wait_s"] = round(run.waited_s, 3)  # the instructor's figure: not its time
    run.compile_check.metrics["turn_held_s"] = {kind: round(s, 3) for kind, s in run.held_s.items()}
    if run.grader_error:
        result.message = run.grader_error


def _sanitizer_run(submission: Submission, config: Config, run: RunEvents) -> SanitizerRun:
    """What the tools check: the module the GPU child graded, launched as the lab launches it."""
    timeouts = config.timeouts
    return SanitizerRun(run.student_cubin, config.kernel.contract(), run.tile_size, submission.source,
                        timeouts.sanitizer_s, timeouts.sanitizer_launch_s)


def _diagnosis(submission: Submission, config: Config, run: RunEvents, plan: RunPlan, made: list[CheckResult],
               safety: CaseSafety | None) -> CheckResult | None:
    """compute-sanitizer's diagnosis (worth no points), where it sees what the emulator cannot: what the tools
    found in the cases of a kernel the emulator could not judge (`safety`), or their run over a kernel a case
    of which faulted or hung on the GPU itself (a case the emulator found unsafe is told already); over every
    kernel where asked (--sanitize). None when the kernel did not compile (the rubric says so)."""
    if not run.compile_check.passed or not run.tile_size:
        return None
    if safety is not None:
        return safety.check()
    faulted = any(check.status == ERROR for check in run.made_cases().values())  # on the GPU itself
    if plan.sanitize_always or faulted:
        return _sanitizer_check(submission, config, run, plan, made)
    return skipped(SANITIZER_NAME, SANITIZER, 0, "not run: the CPU emulator watched every access, barrier and "
                   "shared-memory read of the cases it ran, and no case faulted on the GPU")


def _sanitizer_check(submission: Submission, config: Config, run: RunEvents, plan: RunPlan,
                     made: list[CheckResult]) -> CheckResult:
    """compute-sanitizer's diagnosis. In a batch, a kernel is first offered to a group for the tools it gives
    no reason to expect a finding from; the group can only ever vouch that a tool found nothing, and the
    kernel is checked alone for the rest."""
    sanitizer_run = _sanitizer_run(submission, config, run)
    placement = placement_of(plan, config)
    offered = groupable_tools(made) if plan.sanitizer_channel is not None else ()  # groups are a batch's
    vouched = Vouched({})
    if offered:
        vouched = check_in_group(sanitizer_run, placement.gpu, plan.sanitizer_channel, offered)
    check = sanitize(sanitizer_run, placement, sandbox_of(plan), config.cache_dir, vouched.tools)
    if vouched.tools:
        check.metrics |= {"sanitizer_group": vouched.group, "sanitizer_grouped": sorted(vouched.tools)}
    return check


def groupable_tools(made: list[CheckResult]) -> tuple[str, ...]:
    """The sanitizer tools a kernel is offered to a group for, on the GPU run's evidence. None where it did not
    compile, or where a case gives a sign of it reaching outside its buffers (a fault or hang, a store outside
    C, a changed input): memcheck (GUARD) holds every student of a group, and one finding there costs the
    whole group its word. Where a static check failed: never racecheck, since a missing barrier races and the
    wrong values a race makes say nothing of where the kernel reads; synccheck unless a barrier is under a
    thread-dependent condition (what synccheck reports); memcheck. Where every static check passed, every tool,
    unless a wrong value is a NaN or inf the kernel stored (the poison the grader puts past A and B, read)."""
    compiled = [check for check in made if check.kind == COMPILE]
    cases = [check for check in made if check.kind == CASE]
    if not compiled or not all(check.passed for check in compiled) or not cases \
            or not all(_kept_inside(case) for case in cases):
        return ()
    statics = [check for check in made if check.kind == STATIC]
    if not all(check.passed for check in statics):
        return (GUARD, "synccheck") if _barriers_only_missing(statics) else (GUARD,)
    return tuple(TOOLS) if all(case.metrics.get("stored_nonfinite", 0) == 0 for case in cases) else ()


def _barriers_only_missing(statics: list[CheckResult]) -> bool:
    """Every static check that did not pass failed for a barrier (or tile loop) that is not there, none for a
    barrier under a thread-dependent condition: a missing barrier races, which is racecheck's finding, not
    synccheck's; a barrier some threads skip is synccheck's. A check that could not run says neither."""
    return all(check.passed or (check.status == FAILED and "condition_line" not in check.metrics)
               for check in statics)


def _kept_inside(case: CheckResult) -> bool:
    """A case that gives no sign of the kernel reaching outside its buffers: it ran to its end and judged,
    nothing stored outside C, neither input changed."""
    return case.passed or (case.status == FAILED and case.metrics.get("stray_stores") == 0
                           and case.metrics.get("inputs_changed") is False)


def _checks_on_cpu(submission: Submission, config: Config, cases: list[Case], result: SubmissionResult,
                   plan: RunPlan, phases: Phases) -> tuple[list[CheckResult], str]:
    """The compile check (nvcc's verdict when nvcc is here), the cases the emulator runs, and the checks only
    a GPU can make, skipped as such; and why a case it made no check of was not run. Which checks need a GPU
    depends on the machine and the config alone."""
    compiled = compile_without_gpu(submission, config, sandbox_of(plan))
    phases.mark("nvcc_check")
    nvcc = compiled.check
    needs_gpu = [skipped(TIMING_NAME, TIMING, config.points.timing, "not timed: " + CPU_NOTE,
                         needs_gpu=NEEDS_GPU_TIMING)]
    reason = (nvcc.message if compiled.outcome == GRADER_ERROR else
              "not run: the kernel did not compile" if nvcc.status == ERROR else
              "not run: GPU only (its case file says cpu: skip); it runs when graded on a GPU")
    needs_gpu += [skipped(c.name, CASE, c.points, reason, visibility=c.visibility, needs_gpu=NEEDS_GPU_LARGE)
                  for c in cases if not c.emulated]
    if nvcc.status == ERROR:
        result.outcome = compiled.outcome
        if compiled.outcome == GRADER_ERROR:
            result.message = nvcc.message
        return [nvcc, *needs_gpu], "not run"
    emulated = [case for case in _emulated_first(cases) if case.emulated]
    run = run_child(submission, config, emulated, CPU, plan)
    phases.mark_split(run.phases, "grading_other")
    _take_run(result, run)
    made = [check for check in run.made_checks() if check.kind != TIMING]
    phases.mark("judge")
    if run.emulator_compile_error:
        failure = classify(run.emulator_log or run.compile_check.message, submission.source, submission.headers)
        if not failure.students:
            made = _grader_fault(result, nvcc, emulated, failure, run)
        elif nvcc.passed or failure.header:  # a toolkit header the emulator lacks: nvcc's verdict or none
            made = _held_for_gpu(result, nvcc, emulated, failure, run)
    elif run.compile_check.passed and nvcc.passed:
        run.compile_check.message = f"{nvcc.message}; emulated on the CPU with tile size {run.tile_size}"
    _emulator_feedback(result, run, submission, config)
    shown = next((check for check in made if check.kind == COMPILE), nvcc)
    add_compiler_feedback(result, shown, compiled.cubin, config, sandbox_of(plan), run.tile_size)
    phases.mark("feedback")
    return [*made, *needs_gpu], run.not_run_reason


def _emulator_feedback(result: SubmissionResult, run: RunEvents, submission: Submission, config: Config) -> None:
    """How to make it faster, from the emulator's access profile of the kernel beside the reference's."""
    if run.access_profile and run.compile_check.passed and result.outcome == GRADED:
        profile = run.access_profile
        run.compile_check.metrics["feedback_s"] = profile.get("seconds")  # what the advice cost (bench)
        result.feedback += access_feedback(profile["student"], profile["reference"], profile["size"],
                                           _matrix_names(submission.source, config.kernel.contract()))


def _matrix_names(source: str, contract: KernelContract) -> dict[str, str]:
    """What the kernel calls the matrices A, B and C (ECE408's M, N, P), by the parameters' roles."""
    return {role: name for role, name in _role_names(source, contract) if role in ("A", "B", "C")}


def _role_names(source: str, contract: KernelContract) -> list[tuple[str, str]]:
    """What the kernel calls each role, by its parameters, in their order: the matrices, and the sizes m, n, k,
    a size under each of its names (ECE408's numARows and numCRows are m; a square lab's one size is all three)."""
    parameters = kernel_parameters(source, contract.name) or []
    if len(parameters) != len(contract.roles):
        return []
    named = [(role, p.name) for role, p in zip(contract.roles, parameters) if p.name]
    return [(size, name) for role, name in named for size in (("m", "n", "k") if role == WIDTH else (role,))]


def _held_for_gpu(result: SubmissionResult, nvcc: CheckResult, emulated: list[Case], failure: BuildFailure,
                  run: RunEvents) -> list[CheckResult]:
    """nvcc compiles the kernel and the emulator cannot build what the student wrote: its cases are not
    passed and stay in the total (no construct may move points out of it); the grade waits for a GPU."""
    result.outcome = NEEDS_GPU_GRADE
    reason = failure.student_reason
    result.message = f"{result.message}. Needs a GPU grade: the kernel {reason}"
    result.log += f"\n[grader] the CPU emulator's compiler said:\n{run.emulator_log or run.compile_check.message}\n"
    line = {"line": failure.line} if failure.line else {}
    return [nvcc, *(errored(c.name, CASE, c.points, reason, visibility=c.visibility, metrics=dict(line))
                    for c in emulated)]


def _grader_fault(result: SubmissionResult, nvcc: CheckResult, emulated: list[Case], failure: BuildFailure,
                  run: RunEvents) -> list[CheckResult]:
    """The emulator's build or start failed for a reason that is not the student's: a grader error with the reason,
    graded again by --resume; never "not checked here"."""
    result.outcome = GRADER_ERROR
    reason = (f"grader error: the CPU emulator could not build or start the kernel, for a reason that is not "
              f"the student's ({failure.grader_reason}); it will be graded again (--resume)")
    result.message = reason
    result.log += f"\n[grader] the CPU emulator's build failed:\n{run.emulator_log or run.compile_check.message}\n"
    return [nvcc, *(errored(c.name, CASE, c.points, reason, visibility=c.visibility) for c in emulated)]


def not_graded(path: Path, config: Config, cases: list[Case], reason: str,
               outcome: str = SUBMISSION_ERROR) -> SubmissionResult:
    """Every check skipped with the reason, so the score reads 0 of the full total, not 0 of 0."""
    return SubmissionResult(locate(path)[0], outcome, Rubric.of(config, cases).results([], reason), message=reason)


@dataclass
class CompiledWithoutGpu:
    check: CheckResult
    outcome: str  # graded, compile error or timed out
    cubin: bytes = field(default=b"", repr=False)  # nvcc's cubin for compile.arch_without_gpu, when it compiled


def compile_without_gpu(submission: Submission, config: Config, sandbox: Sandbox) -> CompiledWithoutGpu:
    points = config.points.compile
    if nvcc_path() is None:
        return CompiledWithoutGpu(skipped("compile", COMPILE, points, "not compiled: nvcc is not on PATH"), GRADED)
    lacking = missing_here(toolkit_headers([submission.source, *submission.headers.values()]))
    if lacking:  # as without nvcc: the emulator's verdict, never a compile error for a package not installed here
        names = ", ".join(f"<{name}>" for name in lacking)
        return CompiledWithoutGpu(skipped("compile", COMPILE, points,
                                          f"not compiled: this machine's CUDA toolkit does not have {names}"), GRADED)
    compiled = _compile_with_fallback(submission, config, sandbox)
    if compiled.grader_fault:
        reason = (f"grader error: nvcc could not compile the kernel, for a reason that is not the student's "
                  f"({compiled.grader_fault}); it will be graded again (--resume)")
        return CompiledWithoutGpu(errored("compile", COMPILE, points, reason), GRADER_ERROR)
    if not compiled.ok:
        outcome = TIMED_OUT if compiled.timed_out else SUBMISSION_ERROR if compiled.mismatch else COMPILE_ERROR
        return CompiledWithoutGpu(errored("compile", COMPILE, points, compiled.message), outcome)
    message = f"{compiled.message} (for {config.compile.arch_without_gpu}, no GPU run)"
    return CompiledWithoutGpu(passed("compile", COMPILE, points, message), GRADED, compiled.cubin)


def _compile_with_fallback(submission: Submission, config: Config, sandbox: Sandbox) -> CompileOutcome:
    """nvcc on the whole file, as SourceModule would; on failure, on its device side alone."""
    options, arch, timeout = config.compile.options, config.compile.arch_without_gpu, config.timeouts.compile_s
    contract, source, headers = config.kernel.contract(), submission.source, submission.headers
    outcome = check_cache.checked(config.cache_dir, source, arch, options, timeout, sandbox, contract, headers)
    device = device_side(source, headers)
    if outcome.ok or outcome.timed_out or outcome.grader_fault or device == source:
        return outcome
    fallback = check_cache.checked(config.cache_dir, device, arch, options, timeout, sandbox, contract, headers)
    if fallback.mismatch:
        return fallback
    return (CompileOutcome(True, f"{fallback.message} ({HOST_CODE_LEFT_OUT})", cubin=fallback.cubin) if fallback.ok
            else outcome)


def run_child(submission: Submission, config: Config, cases: list[Case], backend: str,
              plan: RunPlan, extra_tiles: dict[str, tuple[Tile, ...]] | None = None) -> RunEvents:
    """Runs the cases in a child process of the backend's kind; the parent only reads its events. `extra_tiles`:
    tiles a CPU run of a sampled case runs beside its sample (where the GPU found wrong elements)."""
    samples = block_samples(cases, config, extra_tiles or {}) if backend == CPU else {}
    workdir = str(owned_folder(GRADE))  # named for this process: a later start clears it if we die unclean
    os.chmod(workdir, 0o711)  # the sandbox uid must reach its own folder inside; nobody may list it
    sandbox = sandbox_of(plan)
    # the judge ready by the time the first outputs are judged (a sampled case's truth is small: made when judged)
    warming = Warming([case for case in cases if backend == GPU or not case.sampled], config)
    device = device_side(submission.source, submission.headers)  # what the emulator builds, its sites numbered
    try:
        job = _job(submission, device, config, cases, workdir, sandbox, timed=backend == GPU,
                   emulator_workers=plan.emulator_workers, samples=samples)
        limits = Limits(startup_s=config.timeouts.compile_s, compile_s=config.timeouts.compile_s,
                        run_s=config.timeouts.run_s, max_restarts=config.timeouts.max_restarts,
                        case_s=config.timeouts.gpu_hang_s if backend == GPU else None)
        program = ChildProgram.cpu_driver() if backend == CPU else ChildProgram.gpu_child(sandbox)
        events = run_job(job, limits, lambda: run.timing_turn(), program, placement_of(plan, config))
        first = next(events)  # the child has started meanwhile, and the judge's import with it (warming.py)
        run = _run_events(config, cases, Path(workdir), timed=job.timing is not None, backend=backend,
                          submission=submission, device=device, samples=samples)
        for event in itertools.chain([first], events):
            if event["event"] == "compiled" and backend == GPU:
                warm_reference(config.reference_path.read_text(encoding="utf-8"), event["arch"],
                               config.compile.options, config.timeouts.compile_s, sandbox, config.cache_dir)
            run.handle(event)
        return run
    finally:
        warming.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _run_events(config: Config, cases: list[Case], workdir: Path, timed: bool, backend: str,
                submission: Submission, device: str, samples: dict[str, BlockSample]) -> RunEvents:
    from .run_events import RunEvents  # the judge, numpy among it: imported once the child has started

    program = _emulated_program(submission, device, config.kernel.contract()) if backend == CPU else None
    return RunEvents(config, cases, workdir, timed=timed,
                     child="the CPU emulation process" if backend == CPU else "the GPU process", program=program,
                     samples=samples)


def _emulated_program(submission: Submission, device: str, contract: KernelContract) -> Program:
    """What the CPU emulator's reports refer to: the sites instrument.py numbers in the device side it builds
    (`device`), the kernel's names for the lab's matrices and sizes, and what the launch's x runs over."""
    return Program(sites_of(device), names=tuple(_role_names(submission.source, contract)), x=contract.x)


def block_samples(cases: list[Case], config: Config,
                  extra_tiles: dict[str, tuple[Tile, ...]]) -> dict[str, BlockSample]:
    """How the CPU emulator samples each case it runs by blocks (the large ones): every edge block,
    `sampling.interior_blocks` interior ones drawn by a seed from the case's (secret-mixed) seed, and the extra
    tiles asked for."""
    return {case.name: BlockSample(sample_seed(case), config.sampling.interior_blocks,
                                   extra_tiles.get(case.name, ())) for case in cases if case.sampled}


def _job(submission: Submission, device: str, config: Config, cases: list[Case], workdir: str, sandbox: Sandbox,
         timed: bool, emulator_workers: int = 0, samples: dict[str, BlockSample] | None = None) -> Job:
    """The child's job; `device`: the submission's device side (device_side.py); `samples`: the cases a CPU run
    runs by sampled blocks (the GPU child runs every case whole)."""
    samples = samples or {}
    reference = config.reference_path.read_text(encoding="utf-8")
    t = config.timing
    contract = config.kernel.contract()
    tile = contract.tile_source(tile_constant(_with_headers_after(submission), contract.name))
    return Job(
        student_source=prepare_source(submission.source, tile=tile),
        reference_source=reference_module_source(reference),
        contract=contract, options=config.compile.options, cache_dir=str(config.cache_dir), workdir=workdir,
        cases=[CaseSpec(c.name, c.m, c.n, c.k, c.seed, c.distribution,
                        samples[c.name].to_wire() if c.name in samples else None) for c in cases],
        timing=TimingSpec(t.m, t.n, t.k, t.seed, t.warmup, t.repetitions,
                          config.tolerance.k_factor, config.tolerance.abs) if timed else None,
        original_source=submission.source,
        device_side_source=(prepare_source(device, tile=tile)
                            if device != submission.source else ""),
        tile_constant=tile.constant, launches_per_case=config.kernel.launches_per_case, headers=submission.headers,
        sandbox=asdict(sandbox), access_profile=config.feedback.emulator and not timed, reference_original=reference,
        parallel_cases=emulator_workers,
    )

