"""Grades one submission: submission → static check → compile → run cases → compare → time → result.

Each stage is a function returning checks; data flows one way into one SubmissionResult.
"""
from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from .cases import Case
from .compile import compile_check, nvcc_path, prepare_source
from .config import Config
from .gpu_events import GpuRun
from .job import CaseSpec, Job, TimingSpec
from .result import (
    CASE,
    COMPILE,
    GRADED,
    SUBMISSION_ERROR,
    TIMING,
    CheckResult,
    SubmissionResult,
    errored,
    passed,
    skipped,
)
from .runner import Limits, run_job
from .static_check import find_kernels, skipped_static_checks, static_checks
from .submission import Submission, SubmissionError, locate, read_submission
from .timing import NAME as TIMING_NAME


@dataclass
class RunPlan:
    """Whether GPU checks run, and if not, the reason shown on each skipped check."""

    run: bool
    skip_reason: str = ""


def grade(path: Path, config: Config, cases: list[Case], plan: RunPlan) -> SubmissionResult:
    started = time.perf_counter()
    try:
        result = _grade(path, config, cases, plan)
    except SubmissionError as exc:
        result = not_graded(path, config, cases, str(exc))
    except Exception:  # a grader bug must cost one submission, never the batch
        result = not_graded(path, config, cases, "internal grader error: tell your instructor")
        result.log = traceback.format_exc()
    result.duration_s = round(time.perf_counter() - started, 3)
    return result


def _grade(path: Path, config: Config, cases: list[Case], plan: RunPlan) -> SubmissionResult:
    submission = read_submission(path)
    result = SubmissionResult(submission.name, GRADED, backend="gpu" if plan.run else "none")
    statics = static_checks(submission.source, config.kernel.name, vars(config.points.static))
    kernels = find_kernels(submission.source)
    if config.kernel.name not in kernels:
        found = f"found: {', '.join(kernels)}" if kernels else "found no __global__ kernel"
        message = f"kernel {config.kernel.name} not found; {found}"
        result.checks = [errored("compile", COMPILE, config.points.compile, message), *statics,
                         *_skip_gpu_checks(config, cases, f"not run: {message}")]
        return result
    if not plan.run:
        result.message = plan.skip_reason
        result.checks = [compile_without_gpu(submission, config), *statics,
                         *_skip_gpu_checks(config, cases, plan.skip_reason)]
        return result
    run = run_on_gpu(submission, config, cases)
    result.device, result.tile_size, result.log = run.device, run.tile_size, run.log
    if run.grader_error:
        result.status, result.message = SUBMISSION_ERROR, run.grader_error
    result.checks = [run.compile_check, *statics, *run.case_checks(), run.timing_result()]
    return result


def not_graded(path: Path, config: Config, cases: list[Case], reason: str) -> SubmissionResult:
    """Every check skipped with the reason, so the score reads 0 of the full total, not 0 of 0."""
    checks = [skipped("compile", COMPILE, config.points.compile, reason),
              *skipped_static_checks(vars(config.points.static), reason), *_skip_gpu_checks(config, cases, reason)]
    return SubmissionResult(locate(path)[0], SUBMISSION_ERROR, checks, message=reason)


def compile_without_gpu(submission: Submission, config: Config) -> CheckResult:
    points = config.points.compile
    if nvcc_path() is None:
        return skipped("compile", COMPILE, points, "not compiled: nvcc is not on PATH")
    outcome = compile_check(submission.source, config.compile.arch_without_gpu, config.compile.options,
                            config.timeouts.compile_s)
    if not outcome.ok:
        return errored("compile", COMPILE, points, outcome.message)
    return passed("compile", COMPILE, points, f"{outcome.message} (for {config.compile.arch_without_gpu}, no GPU run)")


def run_on_gpu(submission: Submission, config: Config, cases: list[Case]) -> GpuRun:
    workdir = tempfile.mkdtemp(prefix="sgemm-grade-")
    try:
        job = _job(submission, config, cases, workdir)
        limits = Limits(startup_s=config.timeouts.compile_s, compile_s=config.timeouts.compile_s,
                        run_s=config.timeouts.run_s, max_restarts=config.timeouts.max_restarts)
        run = GpuRun(config, cases, Path(workdir))
        for event in run_job(job, limits, want_timing=run.correct_so_far):
            run.handle(event)
        return run
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _job(submission: Submission, config: Config, cases: list[Case], workdir: str) -> Job:
    reference = config.reference_path.read_text(encoding="utf-8")
    t = config.timing
    return Job(
        student_source=prepare_source(submission.source),
        reference_source=prepare_source(reference, "reference.cu"),
        kernel_name=config.kernel.name, arg_order=config.kernel.args, tile_sizes=config.kernel.tile_sizes,
        options=config.compile.options, cache_dir=str(config.cache_dir), workdir=workdir,
        cases=[CaseSpec(c.name, c.m, c.n, c.k, c.seed, c.distribution) for c in cases],
        timing=TimingSpec(t.m, t.n, t.k, t.seed, t.warmup, t.repetitions,
                          config.tolerance.k_factor, config.tolerance.abs),
    )


def _skip_gpu_checks(config: Config, cases: list[Case], reason: str) -> list[CheckResult]:
    checks = [skipped(c.name, CASE, c.points, reason, visibility=c.visibility) for c in cases]
    return [*checks, skipped(TIMING_NAME, TIMING, config.points.timing, reason)]
