"""The CPU emulator's two paths for a shared access (cuda_emu.h): the inline one, taken by a tile loop's common
reads and stores of the first four shared arrays, and the full one, taken by everything else. A kernel whose
arrays come after four others takes the full path alone; it must be told exactly as the kernel itself is (same
races, with the same threads, lines and trips; same unstored reads; same __syncwarp ordering), so what the inline
path records is what the full path would have.
"""
import re

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx
from test_cpu_launches import run_cases

from grader.execute.job import CaseSpec

pytestmark = needs_cxx
SPECS = [CaseSpec("square", 32, 32, 48, 1, "uniform"), CaseSpec("ragged", 33, 17, 40, 2, "uniform")]
# On the line of the kernel's first shared array, so every line keeps its number
PADDING = "__shared__ float pad0[1], pad1[1], pad2[1], pad3[1]; "
WARP_SYNCWARP = (SUBMISSIONS / "warp_syncwarp" / "kernel.cu").read_text()
STAGED_READ = "        C[otherRow * n + col] = staged[ty ^ 1][tx];\n"


def staged_again(then: str) -> str:
    """warp_syncwarp with a phase more, past the first __syncwarp of the block: `then` there."""
    assert WARP_SYNCWARP.count(STAGED_READ) == 1
    return WARP_SYNCWARP.replace(STAGED_READ, STAGED_READ + "    __syncthreads();\n" + then)


# In the new phase, past another __syncwarp, each thread reads its neighbour's staged entry (stored in an earlier
# phase: an inline read), then stores its own, which the neighbour read: ordered by a __syncwarp between, a race
# without one (the reads' __syncwarp counts tell them apart).
READ_THEN_STORED = "    __syncwarp();\n    float mine = staged[ty ^ 1][tx];\n{}    staged[ty][tx] = mine;\n"
# Each stores its own entry again (an inline store), then reads its neighbour's with no __syncwarp between: a race
# the store's __syncwarp count shows.
STORED_THEN_READ = "    staged[ty][tx] = 2.0f * sum;\n    sum = staged[ty ^ 1][tx];\n"
# Every lane of a row reads its first entry (inline reads after the first), meets the others at a shuffle (no
# __syncwarp), and the row's first lane, its first reader, stores it: a race only the several readers show.
SHUFFLED_THEN_STORED = ("    float first = staged[ty][0];\n    first = __shfl_sync(0xffffffff, first, 0);\n"
                        "    if (tx == 0) staged[ty][0] = first;\n")

def past_the_hot_arrays(source: str) -> str:
    """The kernel with four shared arrays declared before its own, which then take the full path alone."""
    padded, count = re.subn(r"^(\s*)(__shared__)", lambda m: m.group(1) + PADDING + m.group(2), source, count=1,
                            flags=re.MULTILINE)
    assert count == 1
    return padded


def told(source: str) -> list[dict]:
    """Each case's event, less its seconds."""
    return [{key: value for key, value in event.items() if key != "seconds"}
            for event in run_cases(source, SPECS, launches=1)]


def races(events: list[dict]) -> list[dict]:
    return [race for event in events for race in event.get("races", [])]


@pytest.mark.parametrize("source, racing", [
    ((SUBMISSIONS / "missing_use_barrier" / "kernel.cu").read_text(), True),  # a store after the phase's reads
    ((SUBMISSIONS / "missing_load_barrier" / "kernel.cu").read_text(), True),  # reads after stores, unstored
    (WARP_SYNCWARP, False),  # a read ordered after a store by a __syncwarp
    (staged_again(READ_THEN_STORED.format("    __syncwarp();\n")), False),
    (staged_again(READ_THEN_STORED.format("")), True),
    (staged_again(STORED_THEN_READ), True),
    (staged_again(SHUFFLED_THEN_STORED), True),
], ids=["missing_use_barrier", "missing_load_barrier", "warp_syncwarp", "read_then_stored_after_syncwarp",
        "read_then_stored", "stored_then_read", "shuffled_then_stored"])
def test_arrays_past_the_hot_ones_are_told_as_the_hot_ones(source, racing):
    inline = told(source)
    assert bool(races(inline)) == racing, inline
    assert told(past_the_hot_arrays(source)) == inline
