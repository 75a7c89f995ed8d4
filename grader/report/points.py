"""How points are printed everywhere: 4.0 -> "4", 2.5 -> "2.5"."""
from __future__ import annotations


def format_points(value: float) -> str:
    """4.0 -> "4", 2.5 -> "2.5"; fixed-point so large or tiny values never turn into exponents."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def score_line(result) -> str:
    """"74/100", or from a run without a GPU, what it could check and what it could not:
    "74/74 points checkable without a GPU; 26 more need a GPU (timing, large cases)"."""
    if not result.needs_gpu_points:
        return f"{format_points(result.score)}/{format_points(result.max_score)}"
    return (f"{format_points(result.score)}/{format_points(result.checkable_max)} points checkable without a GPU; "
            f"{format_points(result.needs_gpu_points)} more need a GPU ({gpu_reasons(result)})")


def gpu_reasons(result) -> str:
    """The kinds of checks left for a GPU, each once, in the order the checks come: "timing, large cases"."""
    return ", ".join(dict.fromkeys(c.needs_gpu for c in result.checks if c.needs_gpu))
