"""Terminal report with rich. Must stay readable on a no-colour console: every status is a word."""
from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from grader.report.faster import faster_lines
from grader.report.points import format_points, score_line
from grader.report.regrade import graded_with_words
from grader.report.student_view import (
    HINTS_TITLE,
    NOT_CHECKED,
    CauseGroup,
    cause_groups,
    hint_groups,
    printed_lines,
    shortened,
    verdict,
)
from grader.result import (
    CASE,
    ERROR,
    FAILED,
    HIDDEN,
    NEEDS_GPU_GRADE,
    NO_SANDBOX,
    PASSED,
    UNSAFE_NOTE,
    CheckResult,
    SubmissionResult,
)

STATUS_STYLE = {"passed": "bold green", "failed": "bold red", "error": "bold magenta", "skipped": "yellow",
                NOT_CHECKED: "cyan"}
# Speed advice shown under "What to fix": a kernel to fix first gets a taste of it, the JSON has every piece
ADVICE_BESIDE_FIXES = 1


def _header(result: SubmissionResult) -> Text:
    text = Text("Submission: ", style="bold").append(result.submission)
    for label, value in (("backend", result.backend), ("device", result.device), ("tile", result.tile_size)):
        if value not in ("", None):
            text.append(f"  {label}: {value}")
    return text


def _message_cell(check: CheckResult, show_hidden_details: bool) -> Padding | None:
    if check.status == PASSED or not check.message:
        return None
    if check.visibility == HIDDEN and not show_hidden_details:
        return None  # students see only the verdict of hidden cases
    # fold: long unbroken tokens (paths, numbers) wrap instead of being cut off
    return Padding(Text(check.message, style="dim", overflow="fold"), (0, 0, 0, 2))


def _table(result: SubmissionResult, show_hidden_details: bool) -> Table:
    table = Table(show_lines=False, expand=False)
    table.add_column("Kind", no_wrap=True)
    table.add_column("Check", overflow="fold")
    table.add_column("Status", no_wrap=True)
    table.add_column("Points", justify="right", no_wrap=True)
    shown = {result.message}  # one reason for twenty cases (skipped, or held for a GPU) is said once
    for check in result.checks:
        points = f"{format_points(check.score)}/{format_points(check.max_score)}"
        word = verdict(check)
        status = Text(word, style=STATUS_STYLE.get(word, ""))
        table.add_row(Text(check.kind), Text(check.name), status, Text(points))
        if check.needs_gpu or (check.status != PASSED and check.message in shown):
            continue  # the total line says what needs a GPU, once
        if check.kind == CASE and check.status in (FAILED, ERROR):
            continue  # told below, grouped by cause
        shown.add(check.message)
        message = _message_cell(check, show_hidden_details)
        if message is not None:
            table.add_row("", message, "", "")
    return table


def _bullets(items: list, marker: str = "-") -> Table:
    """Items under a marker each, their wrapped lines indented under their own text."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, justify="right")
    grid.add_column(overflow="fold")
    for index, item in enumerate(items, 1):
        grid.add_row(f"  {index}." if marker == "#" else f"  {marker}", item)
    return grid


def _causes(groups: list[CauseGroup], show_hidden_details: bool) -> Table:
    """One item per cause: what to change, which checks it explains, and one of them told in full (its
    sample elements shortened: the JSON has them all)."""
    items = []
    for group in groups:
        example = group.example
        lines = Text(group.fix or example.message.split("\n", 1)[0], overflow="fold")
        lines.append(f"\n{group.explains}", style="bold")
        if example.kind == CASE and _message_cell(example, show_hidden_details) is not None:
            lines.append(f"\ne.g. {example.name}: {shortened(example.message)}", style="dim")
        items.append(lines)
    return _bullets(items, "#" if len(items) > 1 else "-")


def _advice(lines: list[str], shown: int) -> list[Text]:
    """The first `shown` pieces of speed advice, and how many more the JSON report holds."""
    items = [Text(line.removeprefix("- "), overflow="fold") for line in lines[:shown]]
    if len(lines) > shown:
        items.append(Text(f"and {len(lines) - shown} more in the JSON report (fix what fails first)", style="dim"))
    return items


def say_error(errors: Console, message: object) -> None:
    """`error: ` and the message as plain text: a message's `[cluster]` or `[serve]` is what to type, not markup,
    and a path in it may hold brackets."""
    errors.print(Text("error: ", style="bold red").append(str(message)), highlight=False)


def render(result: SubmissionResult, console: Console | None = None, show_hidden_details: bool = False) -> None:
    console = console or Console()
    console.print(_header(result))
    if result.sandbox == NO_SANDBOX:
        console.print(Text(f"Warning: {UNSAFE_NOTE}", style="bold red"))
    if not result.graded:
        console.print(Panel(Text(result.message or "(no message)"), title="ERROR: submission could not be graded"))
    elif result.message:
        console.print(Text("Note: ", style="bold").append(result.message))
    for note in result.intake_notes:  # which file was graded, what was not
        console.print(Text("Note: ", style="bold").append(note))
    for line in printed_lines(result):  # the student's own output, quoted: never markup
        console.print(Text(line, style="bold" if line.startswith("Note:") else "dim"))
    if result.checks:
        console.print(_table(result, show_hidden_details))
    groups = [group for group in cause_groups(result, show_hidden_details)
              if group.fix or (group.example is not None and group.example.kind == CASE)]
    if groups:
        console.print(Text("What to fix:" if any(group.fix for group in groups) else "What went wrong:", style="bold"))
        console.print(_causes(groups, show_hidden_details))
    faster = faster_lines(result)  # issue 26's advice, worded as every student-facing output words it
    if faster:
        console.print(Text(faster[0], style="bold"))
        console.print(_bullets(_advice(faster[1:], ADVICE_BESIDE_FIXES if groups else len(faster))))
    hints = hint_groups(result, show_hidden_details)
    if hints:
        console.print(Text(HINTS_TITLE, style="bold"))
        console.print(_bullets([Text(group.fix, overflow="fold").append(f"\n{group.explains}", style="dim")
                                for group in hints]))
    held = f" ({NEEDS_GPU_GRADE}: its grade waits for a GPU)" if result.outcome == NEEDS_GPU_GRADE else ""
    console.print(Text(f"Total: {score_line(result)}{held}", style="bold"))
    if result.provenance is not None:  # what a regrade or `grade reproduce` compares against
        console.print(Text(f"Graded with: {graded_with_words(result, brief=True)}", style="dim", overflow="fold"))
