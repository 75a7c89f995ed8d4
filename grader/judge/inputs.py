"""Seeded inputs and the poison/guard layout of C, shared by the GPU child and the comparing parent.

Both sides regenerate A and B from the seed, so no input data has to travel between processes.
"""
from __future__ import annotations

import numpy as np

from .layout import DISTRIBUTIONS, GUARD_BEFORE, guarded_layout, guarded_size


def make_inputs(m: int, n: int, k: int, seed: int, distribution: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        a, b = rng.uniform(-1.0, 1.0, (m, k)), rng.uniform(-1.0, 1.0, (k, n))
    elif distribution == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif distribution == "integers":
        # Small integers make every partial sum exact, so any error is a real bug, not rounding.
        a, b = rng.integers(-4, 5, (m, k)), rng.integers(-4, 5, (k, n))
    else:
        raise ValueError(f"unknown distribution {distribution!r} (known: {', '.join(DISTRIBUTIONS)})")
    return np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)


def guarded_c(m: int, n: int) -> np.ndarray:
    """The host image of C with its guard bands."""
    words = np.empty(guarded_size(m, n), dtype=np.uint32)
    for first, count, bits in guarded_layout(m, n):
        words[first : first + count] = bits
    return words.view(np.float32)


def split_guarded(buffer: np.ndarray, m: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(guard before, C as m×n, guard after) views of a buffer laid out by guarded_c."""
    end = GUARD_BEFORE + m * n
    return buffer[:GUARD_BEFORE], buffer[GUARD_BEFORE:end].reshape(m, n), buffer[end:]
