"""The CPU emulator's run beside a GPU run: what it can judge of the submission, and its verdicts merged in.

On the GPU path the emulator runs the cases it can (all but those marked `cpu: skip`, the large ones by sampled
blocks) in a child of its own, in a thread of the parent, while the GPU child runs: the GPU host's cores are idle
while the GPU works. Its run
decides each case's safety and supplies the words (judge/engines.py); the GPU's values and timing stand.
Where it cannot judge (it cannot build what the student wrote, or could not run at all), `why_not` says why,
and compute-sanitizer decides the same facts (diagnose/safety.py).
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .build_failure import classify
from .config import Config
from .execute.cpu.sampling import Tile, tiles_of_elements
from .judge.access import access_feedback
from .judge.engines import merged_case
from .judge.findings import Finding, facts_and_fixes, unsafe_kinds
from .result import CASE, FAILED, GRADED, PASSED, TIMING, CheckResult, SubmissionResult
from .source.signature import matrix_names

if TYPE_CHECKING:
    from .cases import Case
    from .intake.submission import Submission
    from .run_events import RunEvents


def start_beside(run: Callable[[], RunEvents]) -> Future:
    """`run` (the emulator's child run) in a thread of its own, its outputs judged there too: the GPU child
    runs meanwhile, and its grade waits for no float64 comparison of the emulator's."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="emulator")
    future = pool.submit(_judged, run)
    pool.shutdown(wait=False)
    return future


def _judged(run: Callable[[], RunEvents]) -> RunEvents:
    events = run()
    events.judge_outputs()
    return events


@dataclass
class Emulation:
    """The emulator's verdicts by case name, or why it has none (then cases is empty)."""

    cases: dict[str, CheckResult] = field(default_factory=dict)
    why_not: str = ""
    run: RunEvents | None = None
    log: str = ""  # for the instructor: what went wrong on the grader's side, when something did

    @property
    def judged(self) -> bool:
        return not self.why_not


def emulation_of(beside: Future | None, submission: Submission, no_emulator: str) -> Emulation:
    """What the emulator's run beside the GPU's can judge (waits for it). `no_emulator`: why there was none."""
    if beside is None:
        return Emulation(why_not=no_emulator)
    try:
        run = beside.result()
    except Exception:  # the grader's own bug: the tools judge instead, and the trace goes to the log
        return Emulation(why_not="the CPU emulator failed (a grader error)", log=traceback.format_exc())
    if run.emulator_compile_error:
        failure = classify(run.emulator_log or run.compile_check.message, submission.source, submission.headers)
        why = (f"the kernel {failure.student_reason}" if failure.students
               else f"the CPU emulator could not build it ({failure.grader_reason})")
        return Emulation(why_not=why, run=run, log=run.emulator_log)
    if not run.compile_check.passed:
        return Emulation(why_not=f"the CPU emulator did not run it ({run.compile_check.message})", run=run,
                         log=run.log)
    return Emulation({name: check for name, check in run.made_cases().items()}, run=run)


EXTRA_TILES = 8  # tiles holding the GPU's wrong elements a large case's second emulation runs, at most


def emulate_where_wrong(run: RunEvents, emulation: Emulation, sampled: list[Case],
                        rerun: Callable[[list[Case], dict[str, tuple[Tile, ...]]], RunEvents]) -> None:
    """A large case the GPU (`run`) found wrong where the emulator's sampled blocks were all right: the emulator
    runs it again (`rerun`: those cases, with extra tiles) with the tiles holding the GPU's wrong elements too, known
    only once the GPU's run is judged, so the case is told by what it saw there. Its verdicts replace the first
    run's for those cases."""
    made = run.made_cases()
    missed = [case for case in sampled if case.name in run.wrong_at and case.name in made
              and not made[case.name].passed and getattr(emulation.cases.get(case.name), "status", None) == PASSED]
    if not missed:
        return
    extra = {case.name: tiles_of_elements(*run.wrong_at[case.name], run.tile_size, EXTRA_TILES) for case in missed}
    emulation.cases.update(rerun(missed, extra).made_cases())


def merged(made: list[CheckResult], emulation: Emulation) -> list[CheckResult]:
    """The GPU run's checks with each case merged with the emulator's verdict on it; timing is dropped when a
    case no longer passes (the rubric then says it was not timed, as for a wrong kernel)."""
    cases = [merged_case(check, emulation.cases.get(check.name)) if check.kind == CASE else check
             for check in made]
    return _timed_only_if_correct(cases)


def with_tool_findings(made: list[CheckResult], findings: dict[str, list[Finding]]) -> list[CheckResult]:
    """The GPU run's checks with what compute-sanitizer found in each case (diagnose/safety.py): a case where it
    found something unsafe fails, told the tool's sentences after the GPU's own words."""
    checks = []
    for check in made:
        found = findings.get(check.name, []) if check.kind == CASE else []
        if found:
            facts, fixes = facts_and_fixes(found)
            status = FAILED if check.status == PASSED else check.status
            check = replace(check, status=status, score=0.0, message="\n".join([check.message, *facts]),
                            fixes=[*check.fixes, *(fix for fix in fixes if fix not in check.fixes)],
                            unsafe=list(dict.fromkeys([*check.unsafe, *unsafe_kinds(found)])))
        checks.append(check)
    return _timed_only_if_correct(checks)


def _timed_only_if_correct(checks: list[CheckResult]) -> list[CheckResult]:
    if all(check.passed for check in checks if check.kind == CASE):
        return checks
    return [check for check in checks if check.kind != TIMING]


def emulator_feedback(result: SubmissionResult, run: RunEvents, submission: Submission, config: Config) -> None:
    """How to make it faster, from the emulator's access profile of the kernel beside the reference's."""
    if run.access_profile and run.compile_check.passed and result.outcome == GRADED and config.feedback.emulator:
        profile = run.access_profile
        run.compile_check.metrics["feedback_s"] = profile.get("seconds")  # what the advice cost (bench)
        result.feedback += access_feedback(profile["student"], profile["reference"], profile["size"],
                                           matrix_names(submission.source, config.kernel.contract()))
