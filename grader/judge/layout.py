"""The layout of C on the device and what the inputs are drawn from: plain numbers, no numpy, so that the
parent can read its cases and start a child before it loads the judge (judge/inputs.py has the arrays).
"""
from __future__ import annotations

DISTRIBUTIONS = ("uniform", "normal", "integers")

# C is filled with one NaN before the launch, so an element the kernel never writes cannot pass.
POISON_BITS = 0x7FC0FFEE
# The guard bands around C hold another NaN; any other bit pattern there after the run is a stray store.
GUARD_BITS = 0x7FDEAD00

GUARD_BEFORE = 4096


def guard_after(n: int) -> int:
    """Room for stores up to 32 rows past C's last row (a missing `row < m` check with a 32-wide tile)."""
    return 32 * (n + 1) + 4096


def guarded_size(m: int, n: int) -> int:
    """Words in C with its guard bands."""
    return GUARD_BEFORE + m * n + guard_after(n)


def guarded_layout(m: int, n: int) -> list[tuple[int, int, int]]:
    """C with its guard bands as (first word, words, bit pattern): guards, m*n poisoned elements, guards.
    The host image (guarded_c) and the GPU child's on-device image are both made from it."""
    end = GUARD_BEFORE + m * n
    return [(0, GUARD_BEFORE, GUARD_BITS), (GUARD_BEFORE, m * n, POISON_BITS),
            (end, guarded_size(m, n) - end, GUARD_BITS)]
