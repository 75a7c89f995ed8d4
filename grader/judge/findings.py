"""A finding: what went wrong in one case, and what to change. Kept apart because a report says each fix
once, with the cases it explains, where the facts (which elements, which thread, which line) are said
per case."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    fact: str  # what happened, in this case
    fix: str = ""  # what to change, in words that hold for every case it shows in


def facts_and_fixes(findings: list[Finding]) -> tuple[list[str], list[str]]:
    """The facts in order, and the fixes in order without repeats."""
    fixes: list[str] = []
    for finding in findings:
        if finding.fix and finding.fix not in fixes:
            fixes.append(finding.fix)
    return [finding.fact for finding in findings], fixes
