"""The rubric: every check a submission can get, declared once, in report order, with its points and what
it depends on.

Stages make the checks they ran; `Rubric.results` lays them out in rubric order and gives each check no
stage made a skip whose reason follows from its dependencies, as check50 does: a case whose compile did
not pass is "not run: the kernel did not compile"; timing whose cases did not all pass is "not timed".
No other code builds a list of checks, so the reports of a submission that got nowhere (a refused file,
a grader error) show the same checks, worth the same points, as one that got everywhere.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .cases import Case
from .config import Config
from .judge.timing import NAME as TIMING_NAME
from .result import CASE, COMPILE, PUBLIC, SANITIZER, SKIPPED, STATIC, TIMING, CheckResult, skipped
from .source.static_check import STATIC_CHECKS

COMPILE_NAME = "compile"


@dataclass(frozen=True)
class Check:
    name: str
    kind: str
    points: float
    depends_on: tuple[str, ...] = ()  # names of checks that must pass before this one can run
    visibility: str = PUBLIC

    def skipped(self, reason: str) -> CheckResult:
        return skipped(self.name, self.kind, self.points, reason, visibility=self.visibility)


def _why_not_run(check: Check, unmet: list[CheckResult], reason: str) -> str:
    """Why a check no stage made was not made: its dependencies that did not pass say, unless each of them
    was itself only skipped (then the same `reason` holds)."""
    if not unmet or all(u.status == SKIPPED for u in unmet):
        return reason
    if any(u.kind == COMPILE for u in unmet):
        return "not run: the kernel did not compile"
    cases = sum(1 for name in check.depends_on if name != COMPILE_NAME)
    return f"not timed: {len(unmet)} of {cases} cases did not pass; timing needs a correct kernel"


@dataclass(frozen=True)
class Rubric:
    checks: tuple[Check, ...]

    @classmethod
    def of(cls, config: Config, cases: Iterable[Case], sanitize: bool = False) -> Rubric:
        """The lab's rubric: compile, the static checks, each case, timing, and (feedback worth no points)
        compute-sanitizer's diagnosis when it runs."""
        cases = list(cases)
        static = vars(config.points.static)
        checks = [Check(COMPILE_NAME, COMPILE, config.points.compile),
                  *(Check(name, STATIC, float(static.get(key, 0.0))) for key, name in STATIC_CHECKS),
                  *(Check(case.name, CASE, case.points, (COMPILE_NAME,), case.visibility) for case in cases),
                  Check(TIMING_NAME, TIMING, config.points.timing, (COMPILE_NAME, *(case.name for case in cases)))]
        if sanitize:  # the tools' module (the sanitizer's runs, its log's reading) only where they run: a GPU grade
            from .diagnose.run import NAME as SANITIZER_NAME

            checks.append(Check(SANITIZER_NAME, SANITIZER, 0.0, (COMPILE_NAME,)))
        return cls(tuple(checks))

    def results(self, made: Iterable[CheckResult], reason: str = "not run") -> list[CheckResult]:
        """Every check in rubric order: the one a stage made, else skipped for what its dependencies say,
        else for `reason`."""
        made = {check.name: check for check in made}
        unknown = set(made) - {check.name for check in self.checks}
        if unknown:
            raise ValueError(f"checks not in the rubric: {sorted(unknown)}")
        laid_out: dict[str, CheckResult] = {}
        for check in self.checks:  # dependencies come first in the rubric, so they are laid out already
            unmet = [laid_out[name] for name in check.depends_on if not laid_out[name].passed]
            laid_out[check.name] = made.get(check.name) or check.skipped(_why_not_run(check, unmet, reason))
        return list(laid_out.values())

    def has(self, name: str) -> bool:
        return any(check.name == name for check in self.checks)
