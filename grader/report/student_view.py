"""The student-facing projection of a result: what a student may read, and how much of it.

Why one module: every student-facing output (Gradescope, PrairieLearn, ...) must hide the same
things and cut at the same length, or one export leaks what another hides. Hidden checks show
only their verdict word (no shapes, no diagnostics), and every text is capped with a visible
marker so an LMS never silently drops the end of a long compiler log. Instructor outputs
(grades.csv, the JSON result, logs, the class summary) keep the full text and do not use this.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from grader.judge.printed import PRINTS_NOTE
from grader.report.points import score_line
from grader.report.status import status_label
from grader.result import CASE, HIDDEN, NO_SANDBOX, SKIPPED, UNSAFE_NOTE, CheckResult, SubmissionResult

DEFAULT_LIMIT = 4000
NOT_CHECKED = "not checked here"  # a check that needs a GPU, on a run without one: neither pass nor fail
SHOWN_SAMPLES = 2  # sample elements of a wrong C a grouped report shows for its example case
_NUMBERS = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_SAMPLE = re.compile(r"^  C\[\d+\]\[\d+\]: ")
_MORE = re.compile(r"^  \.\.\. and (\d+) more$")


def verdict(check: CheckResult) -> str:
    """The word a student reads for a check: its status, or "not checked here" when it needs a GPU."""
    return NOT_CHECKED if check.needs_gpu else check.status


def truncation_marker(dropped: int) -> str:
    return f"\n[... {dropped} more characters truncated ...]"


def cap(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """The first `limit` characters of text, then a marker saying how many were cut."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if len(text) <= limit:
        return text
    return text[:limit] + truncation_marker(len(text) - limit)


def student_message(check: CheckResult, limit: int = DEFAULT_LIMIT, with_fixes: bool = False) -> str:
    """What a student sees under one check: the verdict word only for hidden checks. Its fixes are said
    once for the whole submission (what_to_fix), unless the check is shown on its own (with_fixes)."""
    if check.needs_gpu:
        return f"{NOT_CHECKED}: it needs a GPU ({check.needs_gpu}), and this run had none"
    if check.visibility == HIDDEN:
        return check.status
    return cap(check.explained if with_fixes else check.message, limit)


@dataclass
class CauseGroup:
    """The failing checks one root cause explains: what to change (`fix`, "" where no check told one), the
    visible checks by name, how many hidden ones, and the first visible one, whose facts stand for all."""

    fix: str
    names: list[str] = field(default_factory=list)
    hidden: int = 0
    example: CheckResult | None = None

    @property
    def explains(self) -> str:
        """"(square_64, ragged_m and 2 hidden)": the checks it explains."""
        return f"({', '.join(self.names)}{f' and {self.hidden} hidden' if self.hidden else ''})"


def cause_of(check: CheckResult) -> str:
    """What a failing check is grouped by: its first fix (the root cause's), else the first line of its
    message without its numbers (sizes, lines and counts differ from case to case; the cause does not)."""
    if check.fixes:
        return check.fixes[0]
    return _NUMBERS.sub("N", check.message.split("\n", 1)[0])


def cause_groups(result: SubmissionResult, show_hidden: bool = False) -> list[CauseGroup]:
    """The failing checks grouped by cause, in the order each cause first shows. A group only hidden checks
    are in is not told: a hidden check shows its verdict and nothing else."""
    groups: dict[str, CauseGroup] = {}
    for check in result.checks:
        if check.passed or check.needs_gpu or check.status == SKIPPED:
            continue
        group = groups.setdefault(cause_of(check), CauseGroup(check.fixes[0] if check.fixes else ""))
        if check.visibility == HIDDEN and not show_hidden:
            group.hidden += 1
        else:
            group.names.append(check.name)
            if group.example is None or (group.example.kind != CASE and check.kind == CASE):
                group.example = check  # a case tells the cause best, with what the kernel did in it
    return [group for group in groups.values() if group.names]


def grouped_messages(result: SubmissionResult, limit: int = DEFAULT_LIMIT, with_fixes: bool = False) -> dict[str, str]:
    """What an output that shows each check on its own (a JUnit test case, a Gradescope test) says under each,
    by name: the check a cause is told with, in full; every other check of that cause the first line of its
    own facts and which check tells the cause, so twenty cases do not repeat one paragraph."""
    messages = {check.name: student_message(check, limit, with_fixes) for check in result.checks}
    checks = {check.name: check for check in result.checks}
    for group in cause_groups(result):
        told = f"the same cause as {group.example.name}" + (f": {group.fix}" if with_fixes and group.fix else "")
        for name in group.names:
            first, *more = checks[name].message.split("\n", 1)
            if name != group.example.name and more:  # a one-line message is no shorter pointing elsewhere
                messages[name] = cap(f"{first}\n({told})", limit)
    return messages


def what_to_fix(result: SubmissionResult, show_hidden: bool = False) -> list[str]:
    """Each cause's fix once, with the checks it explains: visible checks by name, hidden ones only counted."""
    return [f"{group.fix} {group.explains}" for group in cause_groups(result, show_hidden) if group.fix]


HINTS_TITLE = "Worth cleaning up (no points depend on it):"


def hint_groups(result: SubmissionResult, show_hidden: bool = False) -> list[CauseGroup]:
    """Each hint once (`fix` holds its words), with the checks it showed in, whatever their verdicts; a hint only
    hidden checks showed is not told, as their causes are not."""
    groups: dict[str, CauseGroup] = {}
    for check in result.checks:
        for hint in check.hints:
            group = groups.setdefault(hint, CauseGroup(hint))
            if check.visibility == HIDDEN and not show_hidden:
                group.hidden += 1
            else:
                group.names.append(check.name)
    return [group for group in groups.values() if group.names]


def hint_lines(result: SubmissionResult) -> list[str]:
    """The title and one "- " line per hint; [] when there is none."""
    groups = hint_groups(result)
    return [HINTS_TITLE, *(f"- {group.fix} {group.explains}" for group in groups)] if groups else []


def shortened(message: str, samples: int = SHOWN_SAMPLES) -> str:
    """A case's message with at most `samples` of its sample elements (`  C[r][c]: expected …`), for a
    report that shows one case for many: the rest are counted, and every one is in the JSON."""
    kept, dropped, at = [], 0, None
    for line in message.split("\n"):
        more = _MORE.match(line)
        surplus = _SAMPLE.match(line) and sum(1 for k in kept if _SAMPLE.match(k)) >= samples
        if more or surplus:
            dropped += int(more.group(1)) if more else 1
            at = len(kept) if at is None else at
            continue
        kept.append(line)
    if dropped:
        kept.insert(at, f"  ... and {dropped} more")
    return "\n".join(kept)


def printed_lines(result: SubmissionResult) -> list[str]:
    """The note that the kernel prints, and its first lines, quoted."""
    return [f"Note: {PRINTS_NOTE}", *(f"  | {line}" for line in result.printed)] if result.printed else []


def student_summary(result: SubmissionResult, limit: int = DEFAULT_LIMIT) -> str:
    """The text shown for the whole submission: the outcome, the score, and why it was not graded."""
    label = status_label(result)
    # A result that is not a grade shows no score: a 0 it never earned would read as one.
    lines = [f"Score: {score_line(result)} ({label})" if result.graded else f"Not graded ({label})"]
    if result.sandbox == NO_SANDBOX:
        lines.append(f"Note: {UNSAFE_NOTE}")
    if not result.graded:
        lines.append(f"Your submission could not be graded: {result.message or 'no reason was recorded'}")
    elif result.message:
        lines.append(f"Note: {result.message}")
    lines += [f"Note: {note}" for note in result.intake_notes]  # which file was graded, what was refused
    lines += printed_lines(result)
    fixes = what_to_fix(result)
    if fixes:
        lines += ["What to fix:", *(f"- {fix}" for fix in fixes)]
    lines += hint_lines(result)
    return cap("\n".join(lines), limit)
