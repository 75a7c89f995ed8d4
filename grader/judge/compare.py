"""Judges one case: the kernel's C (with its guard bands) against a float64 truth.

Pure numpy, no GPU: the parent judges what the child brought back. Diagnosis (locate.py) turns the
pattern of wrong elements into a hint a student can act on.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..result import CASE, CheckResult, errored, failed, passed
from .findings import OUT_OF_BOUNDS_WRITE, Finding, facts_and_fixes, unsafe_kinds
from .inputs import split_guarded
from .layout import GUARD_BEFORE, GUARD_BITS, POISON_BITS
from .locate import locate_errors
from .tolerance import error_bound, errors_within

SHOWN_ELEMENTS = 5


@dataclass
class Truth:
    value: np.ndarray  # float64 A @ B
    bound: np.ndarray  # per-element tolerance
    # A case run by sampled blocks (execute/cpu/sampling.py): the elements of C checked (the others hold no truth),
    # and what they are in words ("the 129 edge tiles and 32 sampled interior tiles of 4,160"). None: all of C.
    checked: np.ndarray | None = None
    scope: str = ""
    # The order as kept beside the truth in the cache (truths.py: read, or sorted and kept); None: sorted here.
    kept_order: Callable[[Truth], np.ndarray] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def order(self) -> np.ndarray:
        """The flat indices of the values, by value: sorted once per case, for locate.sources_of's search."""
        return self.kept_order(self) if self.kept_order is not None else stable_argsort(self.value.ravel())

    @cached_property
    def checked_at(self) -> np.ndarray | None:
        """The flat indices of the elements checked, ascending (None: all of C)."""
        return None if self.checked is None else np.flatnonzero(self.checked)

    def of_checked(self, array: np.ndarray) -> np.ndarray:
        """The elements checked of an m×n array, flat, in C's order."""
        flat = array.ravel()
        return flat if self.checked_at is None else flat[self.checked_at]

    @cached_property
    def checked_value(self) -> np.ndarray:
        return self.of_checked(self.value)

    @cached_property
    def checked_bound(self) -> np.ndarray:
        return self.of_checked(self.bound)

    @cached_property
    def magnitude(self) -> np.ndarray:
        """What an error of each element checked is relative to: |value|, never below 1e-30."""
        magnitude = np.abs(self.checked_value)
        return np.maximum(magnitude, 1e-30, out=magnitude)

    @cached_property
    def widest(self) -> float:
        return float(self.bound.max())

    def precomputed(self) -> Truth:
        """The truth with every figure a judgment of it reads computed now: a batch's template computes them once
        for the truths it holds (classroom/zygote.py), not each worker it forks on its first judgment."""
        for figure in ("checked_at", "checked_value", "checked_bound", "magnitude", "widest"):
            getattr(self, figure)
        return self


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """np.argsort(values, kind="stable"), made faster: each batch worker sorts a large case's million truths for
    its first wrong kernel, and the stable sort took 0.14 CPU-s of it. The unstable sort (vectorised) orders the
    values; where some are equal (or NaN) their indices are then put in ascending order, as the stable sort leaves
    them."""
    order = np.argsort(values, kind="quicksort")
    ordered = values[order]
    same = ordered[1:] == ordered[:-1]
    if values.size and np.isnan(ordered[-1]):  # NaN sorts last, and equals nothing
        same |= np.isnan(ordered[1:]) & np.isnan(ordered[:-1])
    if not same.any():
        return order
    tied = np.zeros(values.size, bool)  # every position in a run of equal values
    tied[1:] |= same
    tied[:-1] |= same
    at = np.flatnonzero(tied)
    run = np.cumsum(np.concatenate(([True], ~same))[at])  # the run each tied position is in, ascending
    key = np.sort(run * values.size + order[at])  # within each run, its indices in ascending order
    order[at] = key % values.size
    return order


def truth_of(a: np.ndarray, b: np.ndarray, k_factor: float, abs_tol: float) -> Truth:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return Truth(a64 @ b64, error_bound(a64, b64, k_factor, abs_tol))


def sampled_truth_of(a: np.ndarray, b: np.ndarray, tiles: list[tuple[int, int]], tile: int, k_factor: float,
                     abs_tol: float, scope: str) -> Truth:
    """The truth of the given tiles of C alone (tile row, tile column): A[rows, :] @ B[:, cols] in float64, one
    product per tile row over the columns of its tiles, not the whole of A @ B."""
    m, n = a.shape[0], b.shape[1]
    value, bound, checked = np.zeros((m, n)), np.zeros((m, n)), np.zeros((m, n), bool)
    by_row: dict[int, list[int]] = {}
    for r, c in tiles:
        by_row.setdefault(r, []).append(c)
    for r, columns in by_row.items():
        rows = np.arange(r * tile, min((r + 1) * tile, m))
        cols = np.concatenate([np.arange(c * tile, min((c + 1) * tile, n)) for c in sorted(columns)])
        a64, b64 = a[rows, :].astype(np.float64), b[:, cols].astype(np.float64)
        at = np.ix_(rows, cols)
        value[at], bound[at], checked[at] = a64 @ b64, error_bound(a64, b64, k_factor, abs_tol), True
    return Truth(value, bound, checked, scope)


def tiles_checked(shape: tuple[int, int], tiles: list[tuple[int, int]], tile: int) -> np.ndarray:
    """The m×n mask of the given tiles' elements: what sampled_truth_of's truth checks."""
    checked = np.zeros(shape, bool)
    for r, c in tiles:
        checked[r * tile:(r + 1) * tile, c * tile:(c + 1) * tile] = True
    return checked


def sampled_truth_from(checked: np.ndarray, value: np.ndarray, bound: np.ndarray, scope: str) -> Truth:
    """A sampled truth from its checked elements' values and bounds alone (flat, in C's order), as kept in a
    cache: the others hold 0, as sampled_truth_of leaves them."""
    whole_value, whole_bound = np.zeros(checked.shape), np.zeros(checked.shape)
    whole_value[checked], whole_bound[checked] = value, bound
    return Truth(whole_value, whole_bound, checked, scope)


def wrong_mask(c: np.ndarray, truth: Truth) -> np.ndarray:
    """True where C is off by more than the bound; NaN and inf are always wrong. Of a sampled truth, only the
    elements it checks can be."""
    return _errors(c, truth)[1]


def _errors(c: np.ndarray, truth: Truth) -> tuple[np.ndarray, np.ndarray]:
    """|C - truth| of the elements checked (flat: the error figures read it), and wrong_mask: one pass over C for
    both, and over the checked elements alone (a sampled truth's are a tenth of C)."""
    diff, right = errors_within(truth.of_checked(c), truth.checked_value, truth.checked_bound)
    if truth.checked_at is None:
        return diff, ~right.reshape(c.shape)
    wrong = np.zeros(c.shape, bool)
    wrong.ravel()[truth.checked_at] = ~right
    return diff, wrong


@dataclass
class CaseRun:
    """What the child brought back for one case."""

    buffer: np.ndarray  # C with guard bands, as laid out by inputs.guarded_c
    reference: np.ndarray | None  # the reference kernel's C (m×n), or None if it was not run
    a_changed: bool = False
    b_changed: bool = False
    seconds: float = 0.0
    races: list[Finding] = field(default_factory=list)  # what the CPU emulator saw; the GPU backend cannot tell
    # What the emulator saw that explains wrong elements (two threads storing one element of C, an index off its
    # matrix, ...): told only when C is wrong or a store landed outside it, in place of the guess from the pattern.
    evidence: list[Finding] = field(default_factory=list)
    # What the emulator saw that fails the case whatever the GPU's C holds (a value read from a tile entry no
    # thread of its block stored reached C): on a GPU that entry holds whatever was there before.
    unsafe_reads: list[Finding] = field(default_factory=list)
    # The emulator saw every thread's tile loop run ceil(k / TILE) times: no guess that the phase count is wrong.
    phase_count_right: bool = False
    # What costs no points, whatever the verdict: such a read whose value reached no element of C.
    hints: list[str] = field(default_factory=list)


def judge_case(
    name: str, points: float, a: np.ndarray, b: np.ndarray, run: CaseRun, tile: int,
    k_factor: float, abs_tol: float, visibility: str = "public", truth: Truth | None = None,
) -> CheckResult:
    """`truth` may be passed in when it is already known (a batch grades every student on the same case)."""
    m, k = a.shape
    n = b.shape[1]
    truth = truth or truth_of(a, b, k_factor, abs_tol)
    before, c, after = split_guarded(run.buffer, m, n)
    metrics = {"m": m, "n": n, "k": k, "seconds": round(run.seconds, 6)}
    extra = {"visibility": visibility, "metrics": metrics, "hints": list(run.hints)}

    if run.reference is not None and wrong_mask(run.reference, truth).any():
        return errored(name, CASE, points, "grader error: the reference kernel fails this case; "
                       "tell your instructor (the tolerance or the reference is wrong)", **extra)

    hit_before, hit_after = (np.nonzero(band.view(np.uint32) != GUARD_BITS)[0] for band in (before, after))
    stray = _stray_stores(hit_before, hit_after, m, n)
    if stray and any(finding.fix for finding in run.evidence):  # what the emulator saw says where, not a guess
        stray = [replace(finding, fix="") for finding in stray]
    problems = [*run.races, *run.unsafe_reads, *stray, *_changed_inputs(run)]
    diff, wrong = _errors(c, truth)
    metrics.update(_error_figures(c, truth, wrong, diff))
    if truth.checked is not None:
        metrics.update(checked_elements=int(truth.checked.sum()), checked=truth.scope)
    # Where the kernel may have reached outside its buffers, as figures (diagnose/checks.py groupable_tools reads them)
    metrics.update(stray_stores=int(hit_before.size + hit_after.size),
                   inputs_changed=bool(run.a_changed or run.b_changed))
    if run.reference is not None:
        apart = c.astype(np.float64)
        apart -= run.reference  # in place, as each pass over a large C costs
        metrics["max_diff_vs_reference"] = _finite_max(np.abs(apart, out=apart))
    if wrong.any():
        # After a race the pattern of wrong elements says nothing about indexing, and what the emulator saw
        # says more than the pattern: no location hint then.
        hint = None if run.races or run.evidence or run.unsafe_reads else (a, b, tile, k_factor, abs_tol)
        at = len(run.races)
        problems[at:at] = [_wrong_elements(c, truth, wrong, hint, run.phase_count_right), *run.evidence]
    elif stray:
        problems[len(run.races):len(run.races)] = run.evidence
    if problems:
        facts, fixes = facts_and_fixes(problems)
        notes = dict(note for finding in problems for note in finding.notes)
        if notes:
            metrics["notes"] = notes
        return failed(name, CASE, points, f"C = A×B with m={m}, n={n}, k={k}: " + "\n".join(facts), fixes=fixes,
                      unsafe=unsafe_kinds(problems), **extra)
    # The error figure stays in the metrics: the words of a right case are the same whichever engine ran it.
    checked = f": {truth.scope}; every element of them right" if truth.checked is not None else ""
    return passed(name, CASE, points, f"correct ({m}×{n}×{k}){checked}", **extra)


def _wrong_elements(c, truth, wrong, hint, phase_count_right: bool = False) -> Finding:
    m, n = c.shape
    at = np.flatnonzero(wrong)  # found once: every later look at the wrong elements starts from it
    count = at.size
    of = (f"the {truth.checked_at.size:,} elements of C checked ({truth.scope})" if truth.checked is not None
          else f"{m * n} elements of C")
    lines = [f"{count} of {of} are wrong: {_how_wrong(c[wrong], truth.value[wrong])}"]
    for r, col in zip(*np.divmod(at[:SHOWN_ELEMENTS], n)):
        lines.append(f"  C[{r}][{col}]: expected {truth.value[r, col]:.6g}, got {c[r, col]:.6g}")
    if count > SHOWN_ELEMENTS:
        lines.append(f"  ... and {count - SHOWN_ELEMENTS} more")
    if hint is None:
        return Finding("\n".join(lines))
    unwritten = c.view(np.uint32) == POISON_BITS
    located = locate_errors(wrong, unwritten, c, *hint, truth=truth, phase_count_right=phase_count_right, at=at)
    return Finding("\n".join([*lines, located.fact]), located.fix)


def _how_wrong(got: np.ndarray, expected: np.ndarray) -> str:
    """The wrong elements (what C holds, and their truth) as they are: never written (still the poison), NaN or
    inf the kernel stored, or off by how much. The figures are over the wrong elements that are finite: never
    over the right ones."""
    unwritten, finite = got.view(np.uint32) == POISON_BITS, np.isfinite(got)
    never, stored_nonfinite, off = int(unwritten.sum()), int((~unwritten & ~finite).sum()), int(finite.sum())
    parts = []
    if never:
        parts.append(f"{_count(never, got.size)} never written (they still hold the NaN the grader fills C with)")
    if stored_nonfinite:
        parts.append(f"{_count(stored_nonfinite, got.size)} NaN or infinite, stored by the kernel")
    if off:
        diff = np.abs(got[finite].astype(np.float64) - expected[finite])
        rel = diff / np.maximum(np.abs(expected[finite]), 1e-30)
        up_to = "up to " if off > 1 else ""
        parts.append(f"{_count(off, got.size)} off by {up_to}{diff.max():.3g} (relative {rel.max():.3g})")
    return "; ".join(parts)


def _count(part: int, wrong: int) -> str:
    """How many of the `wrong` elements a part holds: "all" when it is every one of them."""
    return "all" if part == wrong and part > 1 else str(part)


def _stray_stores(hit_before: np.ndarray, hit_after: np.ndarray, m: int, n: int) -> list[Finding]:
    """The stores into C's guard bands (the indices of the words hit before C and after it), told."""
    problems = []
    if hit_after.size:
        first = int(hit_after[0])
        problems.append(Finding(
            f"out-of-bounds write: {hit_after.size} stores past the end of C (the first lands where "
            f"C[{m + first // n}][{first % n}] would be, but C has {m} row{'s' if m != 1 else ''})",
            "check the bounds row < m and col < n before storing to C", OUT_OF_BOUNDS_WRITE))
    if hit_before.size:
        first = GUARD_BEFORE - int(hit_before[0])
        problems.append(Finding(f"out-of-bounds write: {hit_before.size} stores before the start of C "
                                f"(the furthest {first} elements before C[0][0])", "check the index computation of C",
                                OUT_OF_BOUNDS_WRITE))
    return problems


def _changed_inputs(run: CaseRun) -> list[Finding]:
    names = [name for name, changed in (("A", run.a_changed), ("B", run.b_changed)) if changed]
    return [Finding(f"the kernel wrote into {name}", "never store to A or B: the inputs must stay unchanged")
            for name in names]


def _error_figures(c: np.ndarray, truth: Truth, wrong: np.ndarray, diff: np.ndarray) -> dict:
    """`diff`: |C - truth| of the elements checked (_errors), a sampled truth's alone."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / truth.magnitude
    bad = c[wrong]  # the wrong elements only: none, for a right C
    unwritten = bad.view(np.uint32) == POISON_BITS
    return {
        "wrong_elements": int(bad.size),
        "never_written": int(unwritten.sum()),
        # NaN or inf the kernel stored: read from a poisoned word (past A or B, an unset tile entry) or made
        "stored_nonfinite": int((~np.isfinite(bad) & ~unwritten).sum()),
        "max_abs_error": _finite_max(diff),
        "max_rel_error": _finite_max(rel),
    }


def _finite_max(values: np.ndarray) -> float | None:
    """Largest finite value, or None when there is none (JSON has no NaN)."""
    if not values.size:
        return None
    largest = values.max()  # NaN where any is: then, or where it is inf, the finite ones are looked for
    if np.isfinite(largest):
        return float(largest)
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else None
