"""One submission's journey: intake → source (static check, what is refused before compiling) → compile and run
on the engines (the GPU child with the CPU emulator beside it, the emulator alone, or nvcc alone) → judge →
diagnose → settle. Each stage's details live in its own module; this one reads as the journey.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import replace
from pathlib import Path

from .cases import Case
from .config import Config
from .execute.early import start_early
from .execute.spawn import EarlyChildren
from .intake.submission import Submission, SubmissionError, read_submission
from .on_cpu import compile_only, grade_on_cpu, needs_gpu_checks
from .phases import Phases

# the grade's plan, as the commands, the class stage and the service name it
from .plan import CPU, GPU, RunPlan, device_lock, placement_of, sandbox_of  # noqa: F401
from .prepare import prepare_soon
from .provenance import graded_with
from .result import COMPILE, GRADED, GRADER_ERROR, SubmissionResult, errored
from .rubric import Rubric
from .settle import not_graded, say_how_launched, say_which_kernel, settled  # noqa: F401  (not_graded: the class's)
from .source.before_compile import barrier_cost, drop_unneeded_headers, refusal_before_compiling, with_headers_after
from .source.static_check import find_kernels, static_checks


def grade(path: Path, config: Config, cases: list[Case], plan: RunPlan,
          early: EarlyChildren | None = None) -> SubmissionResult:
    """One submission graded: never an exception, a grader bug costs this submission alone (a grader error).
    `early`: its children, started already by the command (execute/early.py); else started here, first."""
    started = time.perf_counter()
    phases = Phases(started)
    if early is None:
        early = start_early(config, cases, plan)  # their start overlaps the static check
        if early.pids():  # a grade that runs nothing starts nothing
            phases.mark("child_spawn")
    with early:  # what no run took (a refusal, an error, an interruption) is killed and removed at the end
        return _grade_timed(path, config, cases, replace(plan, early=early), phases, started)


def _grade_timed(path: Path, config: Config, cases: list[Case], plan: RunPlan, phases: Phases,
                 started: float) -> SubmissionResult:
    if plan.backend is not None:  # a cold cache: the emulator's own builds made while the children start
        prepare_soon(config, plan.sandbox if plan.backend == CPU else None)  # the reference's: a CPU grade's
    try:
        result = _grade(path, config, cases, plan, phases)
    except SubmissionError as exc:
        result = not_graded(path, config, cases, str(exc))
    except Exception:  # a grader bug must cost one submission, never the batch
        result = not_graded(path, config, cases, "internal grader error: tell your instructor", GRADER_ERROR)
        result.log = traceback.format_exc()
    result.provenance = graded_with(config, cases, path, plan.provenance)
    phases.mark("grading_other")
    result.duration_s = round(time.perf_counter() - started, 3)
    result.phases = phases.rounded()
    return result


def _grade(path: Path, config: Config, cases: list[Case], plan: RunPlan, phases: Phases) -> SubmissionResult:
    # intake: the folder or file, read once
    submission = read_submission(path, config.compile.handed_in_headers)
    drop_unneeded_headers(submission, config.compile.host_only_headers)
    # source: the kernel graded, decided once, before anything compiles
    kernels = find_kernels(submission.source)
    accepted = config.kernel.names
    config = config.for_kernels(kernels)
    result = _graded(submission, kernels, config, cases, plan, phases, accepted)
    # settle: what the compile check says of the kernel graded and its launch
    say_which_kernel(result, kernels, config.kernel.name, accepted)
    say_how_launched(result, with_headers_after(submission), config)
    return result


def _graded(submission: Submission, kernels: list[str], config: Config, cases: list[Case],
            plan: RunPlan, phases: Phases, accepted: tuple[str, ...] = ()) -> SubmissionResult:
    sandbox = sandbox_of(plan)
    result = SubmissionResult(submission.name, GRADED, backend=plan.backend or "none", sandbox=sandbox.level,
                              sandbox_note=sandbox.note)
    rubric = Rubric.of(config, cases, sanitize=plan.sanitize and plan.backend == GPU)
    # static check, and what is refused before anything compiles
    statics = static_checks(with_headers_after(submission), config.kernel.name, vars(config.points.static))
    result.feedback += barrier_cost(statics)
    refusal, outcome = refusal_before_compiling(submission.source, kernels, config, sandbox, accepted,
                                                submission.headers)
    phases.mark("static")
    # compile and run on the engines, judge, diagnose
    if refusal:  # on the CPU, its total is still the points checkable here (the GPU's are said as such)
        result.outcome = outcome
        made, not_run = [errored("compile", COMPILE, config.points.compile, refusal)], "not run"
        if plan.backend == CPU:
            made += needs_gpu_checks(config, cases, "not run: " + refusal)
    elif plan.backend is None:
        made, not_run = compile_only(submission, config, plan, result, phases)
    elif plan.backend == CPU:
        made, not_run = grade_on_cpu(submission, config, cases, result, plan, phases)
    else:
        from .on_gpu import grade_on_gpu  # the GPU's stages and the tools' (sanitizer, ncu): a GPU grade's alone

        made, not_run = grade_on_gpu(submission, config, cases, result, plan, phases, rubric, statics)
    # settle: every check of the rubric, scored the same on every path
    result.checks = rubric.results([*made, *statics], not_run)
    return settled(result, config)
