"""The regrade commands (issue 51): `grade diff OLD NEW`, `grade reproduce RESULT.json SUBMISSION/`, and what
`grade batch --resume/--against` says about results of another grader and about whom the regrade changed.
The words are the reports' (report/regrade_text.py); this module reads the files and decides the exit code.

Exit codes: 5 when a regrade lowered any student's total (`grade diff`, `grade batch --against`); 6 when
`grade reproduce` did not reproduce every verdict.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UsageError
from .result import SubmissionResult

# `grade` imports this module for DIFF and REPRODUCE: what the commands run is imported when they run (issue 50).
if TYPE_CHECKING:
    from rich.console import Console

    from .classroom.store import StoredResults
    from .report.regrade import Regrade

EXIT_WENT_DOWN = 6  # a regrade lowered a student's total
EXIT_NOT_REPRODUCED = 7  # `grade reproduce`: a verdict differs
SHOWN_KEYS = 10  # students named per line of the terminal's lists

DIFF = "compare two gradings of a class (results folders): who changed, and why; writes regrade.csv"
REPRODUCE = "grade a submission again and say whether every verdict of its stored result matches, and if not why"


def diff_main(argv: list[str], console: Console, errors: Console) -> int:
    """`grade diff OLD NEW`: the regrade report of two results folders, and NEW/regrade.csv (or --csv FILE)."""
    from .report.exports import REGRADE_CSV  # the class's exports: not a grade's (`grade` imports this module)

    parser = argparse.ArgumentParser(prog="grade diff", description=DIFF[0].upper() + DIFF[1:] + ".")
    parser.add_argument("old", type=Path, help="the earlier grading: a `grade batch` output folder, or a folder of "
                                               "result JSON files")
    parser.add_argument("new", type=Path, help="the later grading, likewise")
    parser.add_argument("--csv", type=Path, default=None, metavar="FILE",
                        help=f"where to write the changed students' checks (default: NEW/{REGRADE_CSV})")
    args = parser.parse_args(argv)
    from .cache_file import write_whole
    from .report.regrade import compare
    from .report.regrade_csv import to_regrade_csv
    from .report.terminal import say_error

    try:
        old, new = read_grading(args.old, "OLD", errors), read_grading(args.new, "NEW", errors)
    except UsageError as exc:
        say_error(errors, exc)
        return 2  # misuse, as cli.EXIT_USAGE
    regrade = compare(old.results, new.results)
    csv_path = args.csv or args.new / REGRADE_CSV
    write_whole(csv_path, to_regrade_csv(regrade))
    print_regrade(regrade, console)
    console.print(f"{REGRADE_CSV}: {csv_path}", highlight=False)
    return EXIT_WENT_DOWN if regrade.went_down else 0


def read_grading(folder: Path, which: str, errors: Console) -> StoredResults:
    """A results folder's results (UsageError where it is none); the results left out are said on stderr."""
    from .classroom.store import read_results

    try:
        found = read_results(folder)
    except FileNotFoundError as exc:
        raise UsageError(f"{which}: {exc}") from None
    if found.untrusted:
        errors.print(f"{which}: {len(found.untrusted)} results left out, their signature does not hold (changed "
                     f"after the grader wrote them): {', '.join(found.untrusted)}", highlight=False, markup=False)
    return found


def print_regrade(regrade: Regrade, console: Console) -> None:
    from .report.regrade_text import regrade_lines

    for line in regrade_lines(regrade):
        console.print(line, highlight=False, markup=False)


def reproduce(args, config, cases, plan, console: Console, errors: Console) -> int:
    """`grade reproduce RESULT.json SUBMISSION/`: grades the submission as configured and compares."""
    from .pipeline import grade
    from .report.regrade import compare_one
    from .report.regrade_text import reproduce_lines
    from .report.terminal import say_error

    try:
        stored = SubmissionResult.from_dict(json.loads(args.result.read_text(encoding="utf-8")))
    except OSError as exc:
        say_error(errors, f"{args.result}: {exc.strerror}")
        return 2  # misuse, as cli.EXIT_USAGE
    except (ValueError, TypeError):
        say_error(errors, f"{args.result}: not a result JSON the grader wrote")
        return 2  # misuse, as cli.EXIT_USAGE
    if not args.submission.exists():
        say_error(errors, f"{args.submission}: no such file or folder")
        return 2  # misuse, as cli.EXIT_USAGE
    regraded = grade(args.submission, config, cases, plan)
    change = compare_one(stored.submission, stored, regraded)
    for line in reproduce_lines(stored, regraded, change):
        console.print(line, highlight=False, markup=False)
    return 0 if change is None else EXIT_NOT_REPRODUCED


def _alike(older: list) -> dict[tuple[bool, tuple[str, ...]], list[str]]:
    """The results --resume found of another grader, by (kept, what differs)."""
    groups: dict[tuple[bool, tuple[str, ...]], list[str]] = {}
    for result in older:
        groups.setdefault((result.kept, tuple(result.differences)), []).append(result.key)
    return groups


def batch_regrade_said(outcome, console: Console) -> int:
    """After `grade batch`: the results of another grader --resume found (graded again, or kept), and with
    --against the regrade report; the exit code it calls for (EXIT_WENT_DOWN, else 0)."""
    if outcome.older:
        kept = sum(older.kept for older in outcome.older)
        console.print(f"{len(outcome.older)} stored results were graded by another grader, config or cases: "
                      f"{len(outcome.older) - kept} graded again, {kept} kept (--keep-older):",
                      highlight=False, markup=False)
        for (kept, differences), keys in _alike(outcome.older).items():  # an upgrade: one line, not 300
            more = f", and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            console.print(f"  {'kept' if kept else 'graded again'}: {', '.join(keys[:SHOWN_KEYS])}{more} "
                          f"({'; '.join(differences)})", highlight=False, markup=False)
    if outcome.regrade is None:
        return 0
    print_regrade(outcome.regrade, console)
    return EXIT_WENT_DOWN if outcome.regrade.went_down else 0
