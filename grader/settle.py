"""The last stage of one submission's journey: the same file scores the same on every path, and the compile
check says which kernel was graded and how it was launched."""
from __future__ import annotations

from pathlib import Path

from .cases import Case
from .config import Config
from .intake.submission import locate
from .result import (
    COMPILE,
    COMPILE_ERROR,
    ERROR,
    SKIPPED,
    STATIC,
    SUBMISSION_ERROR,
    TIMED_OUT,
    CheckResult,
    SubmissionResult,
    skipped,
)
from .rubric import Rubric
from .source.tile_size import launched_without_tile_size

NOT_BUILT = "no points: the code does not compile, so this check of it does not count. It said: "


def settled(result: SubmissionResult, config: Config) -> SubmissionResult:
    """The same file scores the same on every path (CLI, batch, LMS): code that did not compile keeps its
    static points only where the config says so; a submission error (a tile size or declaration the lab does
    not allow, in a file that may compile) scores nothing, with its reason."""
    compiled = _compile_check(result)
    if result.outcome == SUBMISSION_ERROR and compiled is not None:
        result.message = compiled.message
        result.feedback = []  # no advice on making faster a kernel that was not graded
        result.checks = [check if check is compiled else _unscored(check, "not graded: " + compiled.message, True)
                         for check in result.checks]
    elif (result.outcome in (COMPILE_ERROR, TIMED_OUT) and compiled is not None and compiled.status == ERROR
          and not config.points.static_after_compile_error):
        result.checks = [_unscored(check, NOT_BUILT + check.message) if check.kind == STATIC else check
                         for check in result.checks]
    return result


def _unscored(check: CheckResult, message: str, skipped_too: bool = False) -> CheckResult:
    if check.status == SKIPPED and not skipped_too:
        return check
    return skipped(check.name, check.kind, check.max_score, message, visibility=check.visibility,
                   needs_gpu=check.needs_gpu)


def _compile_check(result: SubmissionResult) -> CheckResult | None:
    return next((check for check in result.checks if check.kind == COMPILE), None)


def not_graded(path: Path, config: Config, cases: list[Case], reason: str,
               outcome: str = SUBMISSION_ERROR) -> SubmissionResult:
    """Every check skipped with the reason, so the score reads 0 of the full total, not 0 of 0."""
    return SubmissionResult(locate(path)[0], outcome, Rubric.of(config, cases).results([], reason), message=reason)


def say_how_launched(result: SubmissionResult, source: str, config: Config) -> None:
    """A kernel whose tiles give no size is launched with the config's block size and graded on its values;
    the compile check says so (the static checks say what is missing)."""
    compiled = _compile_check(result)
    kernel = config.kernel
    if compiled is not None and compiled.passed and launched_without_tile_size(source, kernel.name,
                                                                                 tuple(kernel.tile_macros)):
        compiled.message += (f"\nno tile size in the file (no __shared__ tile is sized by a constant, and none of "
                             f"{', '.join(kernel.tile_macros)} is defined): launched with blocks of "
                             f"{kernel.block_size} × {kernel.block_size} threads")


def say_which_kernel(result: SubmissionResult, kernels: list[str], graded: str, accepted: tuple[str, ...]) -> None:
    """A file with more kernels than the lab's (both course families' in one, a naive version kept beside
    the tiled one) is graded on the configured kernel, and the compile check says so; so is a file of a lab
    that accepts several names (the first of them the file defines)."""
    others = [name for name in kernels if name != graded]
    compiled = _compile_check(result)
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
