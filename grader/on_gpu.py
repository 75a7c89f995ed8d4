"""A grade on a GPU: the GPU child runs every case and times the kernel, the CPU emulator runs beside it (its
view decides each case's safety and explains it), compute-sanitizer where the emulator cannot judge, and
Nsight Compute where asked."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from .cases import WHOLE, Case, emulated_first, emulator_cases
from .config import Config
from .diagnose.checks import diagnosis, profile_check, sanitizer_run_of
from .diagnose.resources import add_compiler_feedback, warm_reference
from .diagnose.run import NAME as SANITIZER_NAME
from .diagnose.run import sanitizer_path
from .diagnose.safety import CaseSafety, case_safety
from .emulation import (
    Emulation,
    emulate_where_wrong,
    emulation_of,
    emulator_feedback,
    merged,
    start_beside,
    with_tool_findings,
)
from .execute.child_run import run_child, take_run
from .execute.cpu.compiler import compiler
from .execute.hang_notices import GpuHangs
from .execute.runner import Placement
from .intake.submission import Submission
from .phases import Phases
from .plan import CPU, GPU, RunPlan, device_lock, placement_of, sandbox_of
from .result import ERROR, GRADED, GRADER_ERROR, CheckResult, SubmissionResult
from .rubric import Rubric

if TYPE_CHECKING:
    from .run_events import RunEvents

# Heads the emulator's own words in the log where it could not judge a kernel (bench/batch_300.py finds them there)
NOT_JUDGED_LOG = "[grader] the CPU emulator could not judge this kernel:"


def grade_on_gpu(submission: Submission, config: Config, cases: list[Case], result: SubmissionResult,
                 plan: RunPlan, phases: Phases, rubric: Rubric,
                 statics: list[CheckResult]) -> tuple[list[CheckResult], str]:
    """Run (the GPU child, the emulator beside it) → judge by both → diagnose → profile; the checks made and why a
    check none made was not run. The static checks tell the sanitizer's groups what to expect."""
    # The cases the GPU hangs in (the emulator beside it gives them the GPU's seconds, no more), and the emulator's
    # verdicts (after a hang, the GPU leaves out the cases it stopped for a divergent barrier)
    hangs = GpuHangs()
    beside = _emulate_beside(submission, config, cases, plan, hangs)
    run = run_child(submission, config, emulated_first(cases), GPU, plan, _reference_warmer(config, plan),
                    gpu_hangs=hangs)
    phases.mark_split(run.phases, "grading_other")
    take_run(result, run)
    if run.compile_check.passed:
        add_compiler_feedback(result, run.compile_check, run.student_cubin, config, sandbox_of(plan), run.tile_size)
    phases.mark("feedback")
    emulation = emulation_of(beside, submission, "no C++ compiler (g++) for the CPU emulator on this host")
    phases.mark("emulator_wait")
    made, safety = _judged_by_both(submission, config, cases, result, plan, run, emulation)
    phases.mark("judge")
    checked = (diagnosis(submission, config, run, plan, [*made, *statics], safety) if rubric.has(SANITIZER_NAME)
               else None)
    phases.mark("sanitizer")
    if checked is not None:
        made.append(checked)
        if checked.status == ERROR and result.outcome == GRADED:
            result.outcome = GRADER_ERROR  # the diagnosis could not run: graded again by --resume
    if plan.profile and run.compile_check.passed and run.tile_size:
        profile_check(result, made, config, run, plan, submission.source)
        phases.mark("profile")
    return made, run.not_run_reason


def _reference_warmer(config: Config, plan: RunPlan):
    """Once the child names the GPU's architecture, the reference's compiled figures are made meanwhile."""
    reference = config.reference_path.read_text(encoding="utf-8")
    return lambda arch: warm_reference(reference, arch, config.compile.options, config.timeouts.compile_s,
                                       sandbox_of(plan), config.cache_dir)


def _emulate_beside(submission: Submission, config: Config, cases: list[Case], plan: RunPlan,
                    hangs: GpuHangs) -> Future | None:
    """The emulator's run of every case it can run (a large one by sampled blocks), started now, beside the GPU
    child: None where this host has no C++ compiler for it (the tools then judge safety)."""
    emulated = emulator_cases(cases)
    if not emulated or compiler() is None:
        return None
    # Before the GPU child starts: after a hang, it waits for the emulator's verdicts on these
    hangs.emulator_beside([case.name for case in emulated])
    run = functools.partial(run_child, submission, config, emulated, CPU, _emulator_plan(config, plan), gpu_hangs=hangs)
    return start_beside(functools.partial(_told_when_finished, run, hangs))


def _told_when_finished(run: Callable[[], RunEvents], hangs: GpuHangs) -> RunEvents:
    """The emulator's run; its end told to the GPU run, which may be waiting for a verdict it will never give."""
    try:
        return run()
    finally:
        hangs.emulator_finished()


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
                            lambda missed, extra: run_child(submission, quiet, missed, CPU, on_cpu, extra_tiles=extra))
        emulator_feedback(result, emulation.run, submission, config)
        # where the emulator's time went, beside the GPU's (bench/grade_time.py)
        run.compile_check.metrics["emulator_phases"] = {phase: round(seconds, 3)
                                                        for phase, seconds in emulation.run.phases.items()}
        # whether the parent built the emulation as the emulator's driver started (build_ahead.py)
        run.compile_check.metrics["emulator_compiled_ahead"] = emulation.run.compile_check.metrics.get(
            "compiled_ahead", "no")
        return merged(made, emulation), None
    if emulation.log:
        result.log += f"\n{NOT_JUDGED_LOG}\n{emulation.log}\n"
    emulated = [case for case in cases if case.on_cpu == WHOLE]  # the tools' small launches: not the large cases
    safety = case_safety(sanitizer_run_of(submission, config, run), emulated, placement_of(plan, config),
                         sandbox_of(plan), config.cache_dir) if emulated else CaseSafety()
    run.compile_check.metrics["safety_tools_s"] = round(safety.tools_s, 3)
    run.compile_check.metrics["emulator_why_not"] = emulation.why_not  # for the instructor: why the tools judged
    if safety.problem:
        result.message = _joined(result.message, f"Not checked for out-of-bounds accesses, races or divergent "
                                 f"barriers: {emulation.why_not}, and compute-sanitizer could not check it "
                                 f"({safety.problem})")
        if result.outcome == GRADED and sanitizer_path() is not None:
            result.outcome = GRADER_ERROR  # the tools could not run here this time: graded again by --resume
    return with_tool_findings(made, safety.findings), safety


def _joined(*parts: str) -> str:
    return ". ".join(part for part in parts if part)
