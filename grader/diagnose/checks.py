"""The diagnose stage of a GPU grade, as checks and advice: compute-sanitizer's diagnosis where it sees what the
CPU emulator cannot, and Nsight Compute's profile where asked (worth no points either)."""
from __future__ import annotations

import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..config import Config
from ..intake.submission import Submission
from ..judge.access import measured_on_the_gpu
from ..judge.engines import LEFT_OUT, hung_on_both, stopped_on_both
from ..plan import RunPlan, placement_of, sandbox_of
from ..result import (
    CASE,
    COMPILE,
    ERROR,
    FAILED,
    HIDDEN,
    SANITIZER,
    STATIC,
    TIMING,
    CheckResult,
    SubmissionResult,
    skipped,
)
from .groups import GUARD, Vouched, check_in_group
from .run import NAME as SANITIZER_NAME
from .run import TOOLS, SanitizerRun, sanitize
from .safety import CaseSafety

if TYPE_CHECKING:
    from ..run_events import RunEvents


def sanitizer_run_of(submission: Submission, config: Config, run: RunEvents) -> SanitizerRun:
    """What the tools check: the module the GPU child graded, launched as the lab launches it."""
    timeouts = config.timeouts
    return SanitizerRun(run.student_cubin, config.kernel.contract(), run.tile_size, submission.source,
                        timeouts.sanitizer_s, timeouts.sanitizer_launch_s)


NOTHING_FAULTED = ("not run: the CPU emulator watched every access, barrier and shared-memory read of the cases it "
                   "ran, and no case faulted on the GPU")
# Counted, not named: a hidden case shows its verdict only.
HUNG_ON_BOTH = ("not run: the kernel hung on the GPU and on the CPU emulator alike, in {count} (those cases say so); "
                "under compute-sanitizer's tools it would only hang again")
STOPPED_ON_BOTH = ("not run: the kernel faulted or hung on the GPU in {count}, and the CPU emulator stopped it in each "
                   "of them for a cause those cases name at your line; compute-sanitizer's tools would only find it "
                   "again")


def diagnosis(submission: Submission, config: Config, run: RunEvents, plan: RunPlan, made: list[CheckResult],
              safety: CaseSafety | None) -> CheckResult | None:
    """compute-sanitizer's diagnosis (worth no points), where it sees what the emulator cannot: what the tools
    found in the cases of a kernel the emulator could not judge (`safety`), or their run where `why_not_run`
    gives no reason to leave them out. None when the kernel did not compile (the rubric says so)."""
    if not run.compile_check.passed or not run.tile_size:
        return None
    if safety is not None:
        return safety.check()
    reason = why_not_run(run.made_cases().values(), made, plan.sanitize_always)
    if reason:
        return skipped(SANITIZER_NAME, SANITIZER, 0, reason)
    return _sanitizer_check(submission, config, run, plan, made)


def why_not_run(on_gpu: Iterable[CheckResult], judged: Iterable[CheckResult], always: bool) -> str:
    """Why the tools are not run over a kernel the emulator judged, as the skipped check says it; "" to run them.
    `on_gpu`: its cases as the GPU run judged them; `judged`: as both engines did (judge/engines.py). They run
    where a case faulted or hung on the GPU and the emulator's run of it did not show why (it passed the case, did
    not run it or not the blocks that faulted, or its own process crashed); and over every kernel where asked
    (`always`: --sanitize). Where the emulator hung in every such case too, each tool would only hang to its
    launch's limit; where it stopped in each for a cause it names (a trap, an access outside A, B and C, a
    divergent barrier), a case the student can read tells that cause at their line already. Either way the tools
    add nothing while they hold the sanitizer's turns, which every case turn waits behind (device_lock.py)."""
    if always:
        return ""
    # A case the GPU left out after a hang (the emulator's divergent barrier) did not fault or hang there itself
    faulted = [case.name for case in on_gpu if case.status == ERROR and LEFT_OUT not in case.metrics]
    if not faulted:
        return NOTHING_FAULTED
    cases = [check for check in judged if check.kind == CASE and check.name in faulted]
    if len(cases) != len(faulted):
        return ""  # a faulted case missing from the judged ones: nothing says what the tools would find there
    count = "1 case" if len(faulted) == 1 else f"{len(faulted)} cases"
    if all(hung_on_both(case) for case in cases):
        return HUNG_ON_BOTH.format(count=count)
    # The stopped cases tell the cause; a hidden one shows the student its verdict alone, so one they can read must
    # tell it, or the tools, whose findings they can read, still run.
    told = any(stopped_on_both(case) and case.visibility != HIDDEN for case in cases)
    if told and all(hung_on_both(case) or stopped_on_both(case) for case in cases):
        return STOPPED_ON_BOTH.format(count=count)
    return ""


def _sanitizer_check(submission: Submission, config: Config, run: RunEvents, plan: RunPlan,
                     made: list[CheckResult]) -> CheckResult:
    """compute-sanitizer's diagnosis. In a batch, a kernel is first offered to a group for the tools it gives
    no reason to expect a finding from; the group can only ever vouch that a tool found nothing, and the
    kernel is checked alone for the rest."""
    sanitizer_run = sanitizer_run_of(submission, config, run)
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


def profile_check(result: SubmissionResult, made: list[CheckResult], config: Config, run: RunEvents,
                  plan: RunPlan, source: str) -> None:
    """Nsight Compute's findings (advice, no points) and its figures on the timing check (or the compile check);
    what it measured at each line the emulator's findings name, said with them."""
    from .profile import profile_lines, profile_submission  # --profile's alone: ncu's CSV reading among it

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
