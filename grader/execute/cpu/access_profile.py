"""The CPU emulator's access profile (issue 26): how a kernel's warps touch memory, per source line.

One launch on a fixed shape, size = m = n = k = 64 (the least multiple of the tile from 64 on, at least two
tiles: for the lab's 8, 16 and 32 always 64), so no block is partial and no load is masked (each lane's n-th
execution of a line then pairs with the n-th of every other lane of its warp, as the GPU issues them). Of
its grid, a fixed sample runs: the first block and the last (harness.cpp, profile_blocks). The harness
(cuda_emu.h, "access profile") counts, per (line, kind, array): warp-level requests, the 32-byte sectors a
global one touches or the turns (n-way bank conflict) a shared one takes, and what the same bytes would take
at best, and the block-wide barriers completed per line of __syncthreads ("barriers" records, beside the
"access" ones). Its report lines are student-controlled: `access_records` keeps them only from a launch that ended
cleanly.

`figures.py` sums a kernel's profile up for comparing with Nsight Compute on a GPU.
"""
from __future__ import annotations

from ..protocol import MAX_ACCESS_LINES, MAX_BARRIER_LINES, access_ok

PROFILE_SEED = 26
KINDS = ("global_load", "global_store", "shared_load", "shared_store")
PROBLEMS = ("fault", "divergence", "warp_divergence", "race", "unstored_read", "c_collision")


def profile_size(tile: int) -> int:
    return tile * max(2, -(-64 // tile))


def access_records(events: list[dict | None]) -> list[dict] | None:
    """The `access` and `barriers` reports of a launch that finished with no fault, race or divergence; else
    None."""
    if any(event is None or event["event"] in PROBLEMS for event in events):
        return None
    if not any(event["event"] == "done" for event in events):
        return None
    records = [event for event in events if event["event"] == "access"]
    barriers = [event for event in events if event["event"] == "barriers"]
    if len(records) > MAX_ACCESS_LINES or len(barriers) > MAX_BARRIER_LINES or not all(map(access_ok, records)):
        return None
    return records + barriers


def profiled_blocks(grid: tuple[int, int, int]) -> int:
    """How many blocks a profile launch on `grid` runs (harness.cpp, profile_blocks): the first and the last."""
    return 1 if grid[0] * grid[1] * grid[2] == 1 else 2
