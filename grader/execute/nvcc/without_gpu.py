"""nvcc's verdict on a machine without a GPU: the file compiled for `compile.arch_without_gpu`, as SourceModule
would compile it, and on failure its device side alone (host code left out)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import Config
from ...intake.submission import Submission
from ...result import (
    COMPILE,
    COMPILE_ERROR,
    GRADED,
    GRADER_ERROR,
    SUBMISSION_ERROR,
    TIMED_OUT,
    CheckResult,
    errored,
    passed,
    skipped,
)
from ...source.device_side import HOST_CODE_LEFT_OUT, device_side
from ...source.include_policy import missing_here
from ...source.toolkit_headers import toolkit_headers
from ..confine.sandbox import Sandbox
from . import check_cache
from .compile import CompileOutcome, nvcc_path


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
