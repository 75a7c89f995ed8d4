"""A finding: what went wrong in one case, and what to change. Kept apart because a report says each fix
once, with the cases it explains, where the facts (which elements, which thread, which line) are said
per case.

A finding may also say the kernel did something unsafe (`unsafe`, one of the kinds below): the rule for a
case's verdict, on every engine, is that it passes only when its values are right and nothing unsafe was seen
computing them. Values are what the GPU decides; these are what the CPU emulator (or, where it cannot run the
kernel, compute-sanitizer) sees. A read of a shared entry no thread of its block stored is unsafe only where its
value reaches an element of C the kernel stores; one whose value is discarded is a hint (a CheckResult's
`hints`): how to make the kernel cleaner, worth no points.
"""
from __future__ import annotations

from dataclasses import dataclass

# What the kernel did that makes a case fail whatever its values.
OUT_OF_BOUNDS_READ = "out-of-bounds read"
OUT_OF_BOUNDS_WRITE = "out-of-bounds write"
INVALID_ADDRESS = "invalid address"
SHARED_RACE = "shared-memory race"
# A value read from a shared entry no thread of its block stored, reaching an element of C the kernel stores
UNWRITTEN_READ = "read of a shared entry never written, reaching C"
DIVERGENT_BARRIER = "divergent barrier"
DIVERGENT_WARP = "divergent warp collective"
UNSAFE_KINDS = (OUT_OF_BOUNDS_READ, OUT_OF_BOUNDS_WRITE, INVALID_ADDRESS, SHARED_RACE, UNWRITTEN_READ,
                DIVERGENT_BARRIER, DIVERGENT_WARP)

# Fixes several stages give for one cause, in one wording, so a report says each once with every check it
# explains (the static check that finds the barrier missing, and each case where the emulator saw the race).
FIX_LOAD_BARRIER = ("the barrier after loading the tiles is missing: add __syncthreads() after the loads, "
                    "before any thread reads the tiles")
FIX_USE_BARRIER = ("the barrier after using the tiles is missing: add __syncthreads() after the loop that reads "
                   "the tiles, so no thread loads the next phase's tiles while others still read these")
FIX_BARRIER_DIVERGENCE = ("every thread of a block must reach every __syncthreads(): do not put one inside an if, or "
                          "return early, on a condition only some threads meet")


@dataclass(frozen=True)
class Finding:
    fact: str  # what happened, in this case
    fix: str = ""  # what to change, in words that hold for every case it shows in
    unsafe: str = ""  # one of UNSAFE_KINDS when what happened is unsafe whatever the values
    # For the instructor, not the student: (key, value) pairs the check's metrics keep under "notes" (the
    # config under which the kernel would be right, say)
    notes: tuple[tuple[str, str], ...] = ()


def facts_and_fixes(findings: list[Finding]) -> tuple[list[str], list[str]]:
    """The facts in order, and the fixes in order without repeats."""
    fixes: list[str] = []
    for finding in findings:
        if finding.fix and finding.fix not in fixes:
            fixes.append(finding.fix)
    return [finding.fact for finding in findings], fixes


def unsafe_kinds(findings: list[Finding]) -> list[str]:
    """The unsafe kinds among the findings, each once, in order."""
    return list(dict.fromkeys(finding.unsafe for finding in findings if finding.unsafe))
