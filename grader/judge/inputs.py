"""Seeded inputs and the poison/guard layout of C, shared by the GPU child and the comparing parent.

Both sides regenerate A and B from the seed, so no input data has to travel between processes.
"""
from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("uniform", "normal", "integers")

# C is filled with one NaN before the launch, so an element the kernel never writes cannot pass.
POISON_BITS = 0x7FC0FFEE
# The guard bands around C hold another NaN; any other bit pattern there after the run is a stray store.
GUARD_BITS = 0x7FDEAD00

GUARD_BEFORE = 4096


def guard_after(n: int) -> int:
    """Room for stores up to 32 rows past C's last row (a missing `row < m` check with a 32-wide tile)."""
    return 32 * (n + 1) + 4096


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


def guarded_size(m: int, n: int) -> int:
    """Words in C with its guard bands."""
    return GUARD_BEFORE + m * n + guard_after(n)


def guarded_layout(m: int, n: int) -> list[tuple[int, int, int]]:
    """C with its guard bands as (first word, words, bit pattern): guards, m*n poisoned elements, guards.
    The host image (guarded_c) and the GPU child's on-device image are both made from it."""
    end = GUARD_BEFORE + m * n
    return [(0, GUARD_BEFORE, GUARD_BITS), (GUARD_BEFORE, m * n, POISON_BITS),
            (end, guarded_size(m, n) - end, GUARD_BITS)]


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
