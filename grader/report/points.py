"""How points are printed and totalled everywhere, so every export says the same total.

Without a GPU, checks that need one (timing, the large cases) are not made: a score is out of the points
that could be checked, never out of the full total, and each export says what needs a GPU.
"""
from __future__ import annotations

from collections.abc import Sequence

# What an export does with a score from a run without a GPU (`--without-gpu`, the same word everywhere):
# hold keeps the GPU's points out of the grade, scale counts the checked share of the full total.
HOLD, SCALE = "hold", "scale"
WITHOUT_GPU = (HOLD, SCALE)


def checked_without_gpu(value: str) -> str:
    if value not in WITHOUT_GPU:
        raise ValueError(f"without_gpu must be {HOLD} or {SCALE}, not {value!r}")
    return value


def assignment_points(result, without_gpu: str) -> float:
    """The total an LMS assignment graded from this result should have: held, what could be checked (74 of
    the shipped 100 without a GPU); scaled, the full total."""
    return result.checkable_max if without_gpu == HOLD else result.max_score


def format_points(value: float) -> str:
    """4.0 -> "4", 2.5 -> "2.5"; fixed-point so large or tiny values never turn into exponents."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def score_line(result) -> str:
    """"74/100", or from a run without a GPU, what it could check and what it could not:
    "74/74 points checkable without a GPU; 26 more need a GPU (timing, large cases)"."""
    if not result.needs_gpu_points:
        return f"{format_points(result.score)}/{format_points(result.max_score)}"
    return f"{format_points(result.score)}/{format_points(result.checkable_max)} {checkable_words(result)}"


def checkable_words(result) -> str:
    """"points checkable without a GPU; 26 more need a GPU (timing, large cases)": what a total of a run
    without a GPU is out of."""
    return f"points checkable without a GPU; {gpu_note(result)}"


def gpu_note(result) -> str:
    """"26 more need a GPU (timing, large cases)"."""
    return f"{format_points(result.needs_gpu_points)} more need a GPU ({gpu_reasons(result)})"


def gpu_reasons(result) -> str:
    """The kinds of checks left for a GPU, each once, in the order the checks come: "timing, large cases"."""
    return ", ".join(dict.fromkeys(c.needs_gpu for c in result.checks if c.needs_gpu))


def full_marks(result) -> bool:
    """Every point this run could award: a correct kernel graded without a GPU has them at 74 of 74."""
    return result.score >= result.checkable_max


def scaled(result, worth: float) -> float:
    """The result's share of the points this run could check, times `worth` (74 of 74 checkable is 100 of
    100); 0 where nothing was checkable."""
    out_of = result.checkable_max
    return result.score / out_of * worth if out_of > 0 else 0.0


def run_total(results: Sequence) -> float:
    """The points the run could award a student: what a graded result could check (the machine and the
    config decide that, never the submission), else (nobody was graded) the full total."""
    graded = [result.checkable_max for result in results if result.graded]
    return max(graded, default=max((result.max_score for result in results), default=0.0))


def row_max(result, total: float) -> float:
    """What a row of a class export is out of: its own checkable total, or the run's for a result that was
    not graded (it marks nothing as needing a GPU, and is out of what everyone else is)."""
    return result.checkable_max if result.graded else total


def run_gpu_note(results: Sequence) -> str:
    """"26 more need a GPU (timing, large cases)" for a run without a GPU, else ""."""
    example = next((result for result in results if result.graded and result.needs_gpu_points), None)
    return gpu_note(example) if example is not None else ""
