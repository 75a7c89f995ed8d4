"""How points are printed everywhere: 4.0 -> "4", 2.5 -> "2.5"."""
from __future__ import annotations


def format_points(value: float) -> str:
    """4.0 -> "4", 2.5 -> "2.5"; fixed-point so large or tiny values never turn into exponents."""
    text = f"{round(float(value), 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
