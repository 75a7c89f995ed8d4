"""How far a float32 SGEMM result may sit from the float64 truth.

|error| <= k_factor * k * eps32 * (|A| @ |B|) + abs is the classic bound for a length-k float32 dot
product: it grows with k as rounding error does, and it holds whatever order the sums are taken in.
"""
from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def error_bound(a64: np.ndarray, b64: np.ndarray, k_factor: float, abs_tol: float) -> np.ndarray:
    return bound_of(np.abs(a64) @ np.abs(b64), a64.shape[1], k_factor, abs_tol)


def bound_of(abs_dot: np.ndarray, k: int, k_factor: float, abs_tol: float) -> np.ndarray:
    """The bound of elements whose sums of |a_i| |b_i| over k terms are `abs_dot`."""
    return k_factor * max(k, 1) * EPS32 * abs_dot + abs_tol


def within(c: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """True where c is within the bound of expected; NaN and inf never are.

    Computed in the widest dtype given: float64 against a float64 truth. The GPU child's check of timed
    outputs is the same test in float32, on the GPU (execute/nvcc/compile.py, COUNT_KERNEL).
    """
    return errors_within(c, expected, bound)[1]


def errors_within(c: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|c - expected| and `within`, from one subtraction: the judge reports the errors it tests."""
    with np.errstate(invalid="ignore"):
        diff = np.subtract(c, expected)
        np.abs(diff, out=diff)  # in place: a million-element case's C is 8 MB a pass
        return diff, diff <= bound


def uniform_bound(k: int, k_factor: float, abs_tol: float) -> float:
    """One bound for comparing two kernels' outputs on inputs uniform in [-1, 1) (the timed runs).

    Each side may be off by k_factor * k * eps32 * (|A|@|B|)[i, j]; for such inputs that sum of k terms has
    mean k/4 and standard deviation about 0.22 sqrt(k), so 1.25 * k/4 exceeds it everywhere at timing sizes
    (k in the thousands), and real rounding errors stay far below the worst case anyway. Twice that, one
    for each kernel.
    """
    return 2 * (k_factor * max(k, 1) * EPS32 * 1.25 * max(k, 1) / 4 + abs_tol)
