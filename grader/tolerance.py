"""How far a float32 SGEMM result may sit from the float64 truth.

|error| <= k_factor * k * eps32 * (|A| @ |B|) + abs is the classic bound for a length-k float32 dot
product: it grows with k as rounding error does, and it holds whatever order the sums are taken in.
"""
from __future__ import annotations

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def error_bound(a64: np.ndarray, b64: np.ndarray, k_factor: float, abs_tol: float) -> np.ndarray:
    k = a64.shape[1]
    return k_factor * max(k, 1) * EPS32 * (np.abs(a64) @ np.abs(b64)) + abs_tol


def within(c: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """True where c is within the bound of expected; NaN and inf never are.

    Computed in the widest dtype given: float64 against a float64 truth, float32 throughout for the
    child's per-launch check of timed outputs.
    """
    with np.errstate(invalid="ignore"):
        return np.abs(c - expected) <= bound


def band(expected: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[low, high] around expected: checking many outputs against one band is two comparisons each."""
    return expected - bound, expected + bound


def in_band(got: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether every element lies in its band; NaN never does (every comparison with NaN is false)."""
    return bool(np.all(got >= low) and np.all(got <= high))
