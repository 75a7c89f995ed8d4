"""What the student's kernel printed, as the student sees it: the first lines of the child's output.

The child's output (its log) is the kernel's printf and, after it, the grader's own lines ("[grader] …",
the truncation marker), which the parent appends. The kernel's lines are the student's own words, shown
back to them as quoted output and cut short: a debug line left in is worth a note, never a flood.
"""
from __future__ import annotations

SHOWN_LINES = 3
LINE_CHARACTERS = 100
_GRADERS_OWN = ("[grader]", "[... output truncated")


def kernel_output(log: str, lines: int = SHOWN_LINES) -> list[str]:
    """The first `lines` non-empty lines the kernel printed, each cut to a readable length, control
    characters shown as '?' (so a line cannot move the terminal's cursor or colour the report)."""
    printed = []
    for line in log.splitlines():
        if line.startswith(_GRADERS_OWN):
            break
        if line.strip():
            printed.append(_readable(line))
        if len(printed) == lines:
            break
    return printed


def _readable(line: str) -> str:
    line = "".join(ch if ch.isprintable() else "?" for ch in line)
    return line if len(line) <= LINE_CHARACTERS else line[:LINE_CHARACTERS - 1] + "…"


PRINTS_NOTE = ("your kernel prints (its first lines are below): on a GPU it prints in the first launch only and is "
               "graded and timed as if it did not print; remove the debug printf once the kernel works")
