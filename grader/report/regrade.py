"""Who a regrade changed, and why: two gradings of a class (or of one submission) compared, a pure function of
the stored results and what each was graded with (result.Provenance). The outputs render this: the terminal's
lines (regrade_text.py), regrade.csv (regrade_csv.py), a section of the class summary page (summary_html.py),
and `grade reproduce`'s answer.

A student is changed when their total, their outcome or any check's verdict (status and points) changed; a
message that changed alone is no change. Each changed check gets one cause, the most specific that the two
records show: the check is new or gone, its case's definition changed, a setting it reads changed (timing.* for
the timing check, any other for the rest), the reference kernel, the grader, the machine (GPU or CPU emulator,
toolkit, driver), the sandbox; a timing verdict with a ratio near the limit is "near the threshold". A student
whose submission changed is told apart: their changes are theirs, whatever else changed too.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from grader.judge.timing import CLOSE
from grader.result import CASE, TIMING, CheckResult, Provenance, SubmissionResult

SUBMISSION_CHANGED = "submission changed"
NOT_RECORDED = "not recorded"  # a result from a grader that kept no record of what it was graded with
UNEXPLAINED = "nothing recorded changed (noise, or something the records do not hold)"
TIMING_KEYS = ("timing.", "points.timing")  # the settings the timing check reads; every other setting, the rest


@dataclass(frozen=True)
class CheckChange:
    name: str
    kind: str
    old: CheckResult | None  # None: a check only the new grading has
    new: CheckResult | None  # None: a check only the old grading had
    cause: str  # what the class report groups it by: "timing: max_ratio changed 2 → 1.5", "ragged: case changed"

    @property
    def old_verdict(self) -> str:
        return _verdict(self.old)

    @property
    def new_verdict(self) -> str:
        return _verdict(self.new)


@dataclass
class StudentChange:
    key: str
    old: SubmissionResult
    new: SubmissionResult
    submission_changed: bool | None  # None: a record is missing, so nobody can tell
    checks: list[CheckChange] = field(default_factory=list)

    @property
    def delta(self) -> float:
        return round(self.new.score - self.old.score, 6)

    @property
    def went_down(self) -> bool:
        return self.delta < 0

    @property
    def causes(self) -> list[str]:
        if self.submission_changed:
            return [SUBMISSION_CHANGED]
        return list(dict.fromkeys(check.cause for check in self.checks)) or [_outcome_cause(self)]


@dataclass
class CauseGroup:
    cause: str
    students: list[str]


@dataclass
class Regrade:
    changed: list[StudentChange]
    unchanged: int
    only_old: list[str]  # students the old grading has and the new one does not
    only_new: list[str]
    differences: list[str]  # what the two gradings were graded with that differs, over every student

    @property
    def went_down(self) -> list[StudentChange]:
        return [change for change in self.changed if change.went_down]

    @property
    def submissions_changed(self) -> list[StudentChange]:
        return [change for change in self.changed if change.submission_changed]

    @property
    def groups(self) -> list[CauseGroup]:
        """The students whose submission did not change, by cause, most students first."""
        by_cause: dict[str, list[str]] = {}
        for change in self.changed:
            if not change.submission_changed:
                for cause in change.causes:
                    by_cause.setdefault(cause, []).append(change.key)
        return sorted((CauseGroup(cause, keys) for cause, keys in by_cause.items()), key=lambda g: -len(g.students))


def compare(old: Iterable[SubmissionResult], new: Iterable[SubmissionResult]) -> Regrade:
    """Two gradings of a class, matched by submission (a batch's key)."""
    before = {result.submission: result for result in old}
    after = {result.submission: result for result in new}
    changed, unchanged, differences = [], 0, Counter()
    for key in sorted(before.keys() & after.keys()):
        change = compare_one(key, before[key], after[key])
        differences.update(describe_differences(before[key], after[key]))
        if change is None:
            unchanged += 1
        else:
            changed.append(change)
    return Regrade(changed, unchanged, sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys()),
                   list(differences))


def compare_one(key: str, old: SubmissionResult, new: SubmissionResult) -> StudentChange | None:
    """How one student's grade changed, or None where neither total, outcome nor any verdict did."""
    theirs = {check.name: check for check in old.checks}
    ours = {check.name: check for check in new.checks}
    names = list(dict.fromkeys([*theirs, *ours]))
    moved = [name for name in names if _verdict(theirs.get(name)) != _verdict(ours.get(name))]
    if not moved and old.score == new.score and old.outcome == new.outcome:
        return None
    change = StudentChange(key, old, new, _submission_changed(old.provenance, new.provenance))
    change.checks = [CheckChange(name, (ours.get(name) or theirs[name]).kind, theirs.get(name), ours.get(name),
                                 SUBMISSION_CHANGED if change.submission_changed else
                                 _cause(name, theirs.get(name), ours.get(name), old, new)) for name in moved]
    return change


def describe_differences(old: SubmissionResult, new: SubmissionResult) -> list[str]:
    """What one submission's two gradings were graded with that differs, in words, the submission left out."""
    if old.provenance is None or new.provenance is None:
        return [f"what the {'old' if old.provenance is None else 'new'} result was graded with: {NOT_RECORDED}"]
    return sorted(set(provenance_differences(old.provenance, new.provenance)) | set(_grader_and_machine(old, new)))


def provenance_differences(then: Provenance, now: Provenance) -> list[str]:
    """The settings, cases, case files, reference, grader, toolkit and driver that differ, in words."""
    found = [f"{key}: {_value(then.settings.get(key))} → {_value(now.settings.get(key))}"
             for key in _changed_keys(then.settings, now.settings)]
    found += [f"{name}: new case" for name in now.cases.keys() - then.cases.keys()]
    found += [f"{name}: case removed" for name in then.cases.keys() - now.cases.keys()]
    found += [f"{name}: case changed" for name in then.cases.keys() & now.cases.keys()
              if then.cases[name] != now.cases[name]]
    found += [f"case file {name}: changed" for name in _changed_keys(then.case_files, now.case_files)]
    if then.reference_sha256 != now.reference_sha256:
        found.append("the reference kernel changed")
    return sorted(found + _toolchain_differences(then, now))


def graded_with_words(result: SubmissionResult, brief: bool = False) -> str:
    """What a result was graded with, in one line (`grade reproduce` says it); `brief`: the grader, the config and
    the machine alone, for the terminal report, where a one-bug report fits on a screen (the JSON has the rest)."""
    record = result.provenance
    if record is None:
        return NOT_RECORDED
    grader, config = f"grader {_grader(record)}", f"config {_short(record.config_sha256) or 'defaults'}"
    machine = f"on {result.graded_on or 'no backend'}"
    if brief:
        return ", ".join([grader, config, machine])
    parts = [grader, config, f"cases {_short(_digest_of(record.case_files))} ({len(record.cases)})", machine]
    parts += [f"CUDA {record.toolkit}"] if record.toolkit else []
    parts += [f"driver {record.driver}"] if record.driver else []
    parts += [f"sandbox {result.sandbox}"] if result.sandbox else []
    return ", ".join(parts)


# --- causes -----------------------------------------------------------------------------------------------------


def _cause(name: str, old: CheckResult | None, new: CheckResult | None, before: SubmissionResult,
           after: SubmissionResult) -> str:
    if old is None:
        return f"{name}: new {'case' if new.kind == CASE else 'check'}"
    if new is None:
        return f"{name}: {'case' if old.kind == CASE else 'check'} removed"
    then, now = before.provenance, after.provenance
    if then is None or now is None:
        return f"{name}: earlier grading {NOT_RECORDED}" if then is None else f"{name}: new grading {NOT_RECORDED}"
    if new.kind == CASE and then.cases.get(name) != now.cases.get(name):
        return f"{name}: case changed"
    timing = new.kind == TIMING
    keys = [key for key in _changed_keys(then.settings, now.settings) if key.startswith(TIMING_KEYS) == timing]
    if keys:
        area = "timing" if timing else "config"
        return f"{area}: " + ", ".join(f"{key.removeprefix('timing.') if timing else key} changed "
                                       f"{_value(then.settings.get(key))} → {_value(now.settings.get(key))}"
                                       for key in keys)
    if timing and then.reference_sha256 != now.reference_sha256:
        return "timing: the reference kernel changed"
    others = _grader_and_machine(before, after)
    if others:
        return others[0]
    if timing and _near_threshold(old, new, now.settings.get("timing.max_ratio")):
        return "timing: ratio near the threshold (one measurement cannot tell the two apart)"
    return f"{name}: {UNEXPLAINED}"


def _grader_and_machine(old: SubmissionResult, new: SubmissionResult) -> list[str]:
    """The grader, the machine, its toolkit and driver, and the sandbox, where they differ, most telling first."""
    found = _toolchain_differences(old.provenance, new.provenance)
    if old.graded_on and new.graded_on and old.graded_on != new.graded_on:  # "": it never ran on a GPU
        found.insert(1 if found and found[0].startswith("grader:") else 0,
                     f"machine: {old.graded_on or 'no backend'} → {new.graded_on or 'no backend'}")
    if old.sandbox != new.sandbox:
        found.append(f"sandbox: {old.sandbox or 'none'} → {new.sandbox or 'none'}")
    return found


def _toolchain_differences(then: Provenance, now: Provenance) -> list[str]:
    found = [f"grader: {_grader(then)} → {_grader(now)}"] if then.grader_digest != now.grader_digest else []
    for what, before, after in (("toolkit", then.toolkit, now.toolkit), ("driver", then.driver, now.driver)):
        if before != after:
            found.append(f"{what}: {before or 'none'} → {after or 'none'}")
    return found


def _near_threshold(old: CheckResult, new: CheckResult, max_ratio: object) -> bool:
    if not isinstance(max_ratio, (int, float)):
        return False
    ratios = [check.metrics.get("ratio") for check in (old, new)]
    return any(isinstance(r, (int, float)) and abs(r - max_ratio) <= CLOSE * max_ratio for r in ratios)


def _outcome_cause(change: StudentChange) -> str:
    return f"outcome: {change.old.outcome} → {change.new.outcome}"


def _submission_changed(then: Provenance | None, now: Provenance | None) -> bool | None:
    if then is None or now is None or not then.submission_sha256 or not now.submission_sha256:
        return None
    return then.submission_sha256 != now.submission_sha256


# --- words ------------------------------------------------------------------------------------------------------


def _verdict(check: CheckResult | None) -> tuple:
    return () if check is None else (check.status, round(check.score, 6), round(check.max_score, 6))


def verdict_words(check: CheckResult | None) -> str:
    """"passed 10/10", "failed 0/30", or "—" for a check that one grading does not have."""
    if check is None:
        return "—"
    return f"{check.status} {check.score:g}/{check.max_score:g}"


def _changed_keys(then: dict, now: dict) -> list[str]:
    return sorted(key for key in then.keys() | now.keys() if then.get(key) != now.get(key))


def _value(value: object) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _grader(record: Provenance) -> str:
    return f"{record.grader_version or '?'} ({_short(record.grader_digest)})"


def _short(digest: str) -> str:
    return digest[:12]


def _digest_of(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name}\0{sha}\0" for name, sha in sorted(files.items())).encode()).hexdigest()
