"""What the source decides before anything compiles: the headers left out, whether the file is compiled at all,
and what the barriers cost where the static check found them."""
from __future__ import annotations

from ..config import Config
from ..execute.confine.sandbox import Sandbox
from ..execute.macros import pastes_judged
from ..intake.submission import KERNEL_FILE, Submission, missing_headers
from ..result import COMPILE_ERROR, GRADED, SUBMISSION_ERROR, THROUGHPUT, CheckResult, Feedback
from .include_policy import check_source, drop_host_headers, needs_expansion, unproven_pasting_macros
from .include_policy import describe as describe_violations
from .signature import hip_problem, signature_problem
from .toolkit_headers import compile_patterns, unneeded_headers


def drop_unneeded_headers(submission: Submission, host_only: list[str]) -> None:
    """Before anything compiles, on every machine and every engine alike: the lab's host-only headers (wb.h),
    and the toolkit's library headers no device code uses (cuBLAS's for a host wrapper), whose packages a
    grading machine may lack (toolkit_headers.py). Host code that needed them is then left out as usual."""
    files = [submission.source, *submission.headers.values()]
    libraries = unneeded_headers(files, submission.headers)
    submission.source = drop_host_headers(submission.source, host_only, libraries)
    submission.headers = {name: drop_host_headers(text, host_only, libraries)
                          for name, text in submission.headers.items()}


def warm_source_stage(reference: str, config: Config) -> None:
    """What this stage makes once per process and keeps, made now on the reference's text: the toolkit headers'
    patterns, the compilers' include folders (a `g++ -E -v` per compiler and an `nvcc --dryrun`) and the include
    policy's expressions. A batch's template calls it, so that none of the workers it forks makes them again."""
    compile_patterns()
    unneeded_headers([reference])
    check_source(reference, config.compile.allowed_headers, config.compile.handed_in_headers)


def with_headers_after(submission: Submission) -> str:
    """kernel.cu with the handed-in headers' text after it, for the static checks and the tile size: the
    helpers, macros and constants a header defines are found, and every line of kernel.cu keeps its number."""
    return "\n".join([submission.source, *submission.headers.values()])


def refusal_before_compiling(source: str, kernels: list[str], config: Config, sandbox: Sandbox,
                             accepted: tuple[str, ...] = (), headers: dict[str, str] | None = None) -> tuple[str, str]:
    """Why the file is not compiled at all, or '', and the outcome that makes: HIP, no such kernel, or
    anything that could make a compiler open a file (no byte of one may reach a report), in kernel.cu or a
    header handed in with it; a handed-in header that is included but missing, or a declaration the
    launchers cannot call, is a submission error (the file may well compile)."""
    hip = hip_problem(source)
    if hip:
        return hip, COMPILE_ERROR
    if config.kernel.name not in kernels:
        return _no_such_kernel(kernels, accepted or config.kernel.names), SUBMISSION_ERROR
    refused = _include_refusal({KERNEL_FILE: source, **(headers or {})}, config, sandbox)
    if refused:
        return refused, COMPILE_ERROR
    missing = missing_headers([source, *(headers or {}).values()], config.compile.handed_in_headers, headers or {})
    if missing:
        return missing, SUBMISSION_ERROR
    declared = signature_problem(source, config.kernel.contract())
    return (declared, SUBMISSION_ERROR) if declared else ("", GRADED)


def _no_such_kernel(kernels: list[str], names: tuple[str, ...]) -> str:
    """The file defines no kernel of the lab's names: a submission error (it may well compile), saying which
    kernels it does define and what to rename."""
    wanted = " or ".join(names)
    if not kernels:
        return (f"kernel {wanted} not found; found no __global__ kernel: define `__global__ void {names[0]}(…)` "
                "with the lab's parameters")
    which = kernels[0] if len(kernels) == 1 else "the tiled one of them"
    return (f"kernel {wanted} not found; found: {', '.join(kernels)}. Rename {which} to {names[0]}, the name the "
            "grader launches, keeping its parameters")


def _include_refusal(files: dict[str, str], config: Config, sandbox: Sandbox) -> str:
    """The include policy's refusal of kernel.cu or of a handed-in header (named: its line numbers are its own).
    A paste the text alone cannot judge is judged by what the files' macros expand to, in the sandbox."""
    allowed, handed_in = config.compile.allowed_headers, config.compile.handed_in_headers
    pasting = unproven_pasting_macros(files.values())
    found = {name: check_source(text, allowed, handed_in, pasting=pasting) for name, text in files.items()}
    if needs_expansion([v for violations in found.values() for v in violations]):
        found, _ = pastes_judged(files, found, config.compile.options, config.compile.arch_without_gpu, sandbox,
                                 config.timeouts.compile_s)
    for name, violations in found.items():
        if violations:
            described = describe_violations(violations, allowed, handed_in)
            if name == KERNEL_FILE:
                return described
            return described.replace("these lines", f"these lines of {name} (handed in with it)", 1)
    return ""


def barrier_cost(statics: list[CheckResult]) -> list[Feedback]:
    """What a barrier that counts costs where it runs more often than it needs to (advice, no points)."""
    return [Feedback(THROUGHPUT, f"line {check.metrics['line']}: the __syncthreads() inside the inner loop runs "
                     "once per iteration of it, a whole block waiting each time",
                     "move it after the inner loop: one barrier there keeps the next tiles from overwriting these",
                     line=check.metrics["line"], source="static check")
            for check in statics if check.passed and check.metrics.get("in_inner_loop")]
