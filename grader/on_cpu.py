"""A grade without a GPU: nvcc's compile check where nvcc is here, the cases on the CPU emulator, and the checks
only a GPU can make skipped as such. Which checks need a GPU depends on the machine and the config alone."""
from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

from .build_failure import BuildFailure, classify
from .cases import Case, emulator_cases
from .config import Config
from .diagnose.resources import add_compiler_feedback
from .diagnose.speed import timing_without_gpu
from .emulation import emulator_feedback
from .execute.child_run import emulation_built_soon, run_child, take_run
from .execute.confine.sandbox import Sandbox
from .execute.nvcc.without_gpu import compile_without_gpu
from .intake.submission import Submission
from .judge.timing import NAME as TIMING_NAME
from .phases import Phases
from .plan import CPU, CPU_NOTE, RunPlan, sandbox_of
from .result import (
    CASE,
    COMPILE,
    ERROR,
    GRADED,
    GRADER_ERROR,
    NEEDS_GPU_GRADE,
    TIMING,
    CheckResult,
    SubmissionResult,
    errored,
    skipped,
)

if TYPE_CHECKING:
    from .run_events import RunEvents

MODELLED_NOTE = "CPU emulation: correctness checked, timing estimated by the speed model"
# Why a check a CPU run skips needs a GPU (CheckResult.needs_gpu): said once per kind in every report.
# Only the machine and the config decide these: nothing a submission does adds to them.
NEEDS_GPU_TIMING, NEEDS_GPU_LARGE = "timing", "large cases"


def needs_gpu_checks(config: Config, cases: list[Case], large_reason: str) -> list[CheckResult]:
    """The checks a CPU run cannot make (timing, the large cases), skipped as needing a GPU: the machine and
    the config decide them, nothing a submission does."""
    timing = skipped(TIMING_NAME, TIMING, config.points.timing, "not timed: " + CPU_NOTE, needs_gpu=NEEDS_GPU_TIMING)
    return [timing, *(skipped(c.name, CASE, c.points, large_reason, visibility=c.visibility,
                              needs_gpu=NEEDS_GPU_LARGE) for c in cases if not c.emulated)]


def compile_only(submission: Submission, config: Config, plan: RunPlan, result: SubmissionResult,
                 phases: Phases) -> tuple[list[CheckResult], str]:
    """The static check and nvcc's compile, no case run (`grade --no-run`)."""
    result.message = plan.skip_reason
    compiled = compile_without_gpu(submission, config, sandbox_of(plan))
    phases.mark("nvcc_check")
    add_compiler_feedback(result, compiled.check, compiled.cubin, config, sandbox_of(plan), None)
    phases.mark("feedback")
    result.outcome = compiled.outcome
    if compiled.outcome == GRADER_ERROR:
        result.message = compiled.check.message
    return [compiled.check], plan.skip_reason


def grade_on_cpu(submission: Submission, config: Config, cases: list[Case], result: SubmissionResult,
                 plan: RunPlan, phases: Phases) -> tuple[list[CheckResult], str]:
    """The compile check (nvcc's verdict when nvcc is here), the cases the emulator runs, and the checks only
    a GPU can make, skipped as such; and why a case it made no check of was not run."""
    result.message = plan.note or CPU_NOTE
    with emulation_built_soon(submission, config, plan) as built_ahead:  # g++ beside nvcc
        compiled = compile_without_gpu(submission, config, sandbox_of(plan))
        phases.mark("nvcc_check")
        nvcc = compiled.check
        held_timing, *large = needs_gpu_checks(
            config, cases, nvcc.message if compiled.outcome == GRADER_ERROR else
            "not run: the kernel did not compile" if nvcc.status == ERROR else
            "not run: GPU only (its case file says cpu: skip); it runs when graded on a GPU")
        if nvcc.status == ERROR:
            result.outcome = compiled.outcome
            if compiled.outcome == GRADER_ERROR:
                result.message = nvcc.message
            return [nvcc, held_timing, *large], "not run"
        emulated = emulator_cases(cases)
        run = run_child(submission, config, emulated, CPU, plan, built_ahead=built_ahead)
    phases.mark_split(run.phases, "grading_other")
    take_run(result, run)
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
    emulator_feedback(result, run, submission, config)
    shown = next((check for check in made if check.kind == COMPILE), nvcc)
    add_compiler_feedback(result, shown, compiled.cubin, config, sandbox_of(plan), run.tile_size)
    phases.mark("feedback")
    timing = _timing_without_gpu(held_timing, made, result, run, compiled.cubin, config, sandbox_of(plan))
    phases.mark("speed_model")
    return [*made, timing, *large], run.not_run_reason


def _timing_without_gpu(held: CheckResult, made: list[CheckResult], result: SubmissionResult, run: RunEvents,
                        cubin: bytes, config: Config, sandbox: Sandbox) -> CheckResult:
    """The timing check decided by the speed model (timing.without_gpu: model), else held for a GPU; a
    failure of the model's own is logged and holds the points, never costs them."""
    if not (run.compile_check.passed and result.outcome == GRADED):
        return held
    try:
        timing = timing_without_gpu(held, [check for check in made if check.kind == CASE], run.access_profile,
                                    run.tile_size, cubin, result.feedback, config, sandbox)
        if timing.metrics.get("estimated") and result.message.startswith(CPU_NOTE):
            result.message = MODELLED_NOTE + result.message[len(CPU_NOTE):]
        return timing
    except Exception:
        result.log += "\n[grader] the speed model failed:\n" + traceback.format_exc()
        return held


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
