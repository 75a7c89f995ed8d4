"""A phase's time limit that counts the child's own work, not the time it spent waiting for a CPU.

On a busy host (a batch with every core compiling) a child can sit runnable but not running; the kernel
counts that per thread (/proc/PID/task/TID/schedstat, second field). The deadline moves by the most any
one thread of the child's process tree waited since the phase began, and by at most the limit itself, so
a submission that starts many threads to make its own threads wait cannot stretch its time without end.
Waiting for a turn on the device is not counted either: the caller restarts the deadline after a turn.
Processes working for the child outside its tree (`beside`: the parent's build of the CPU driver's emulation,
which the driver waits for) count as its own.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .proc import listdir, process_tree

PROC = Path("/proc")


class Deadline:
    def __init__(self, pid: int, limit_s: float, beside: Callable[[], list[int]] = list):
        self.pid, self.beside = pid, beside
        self.tree = [pid]  # the process tree as last seen: listing /proc is only worth it at a deadline
        self.restart(limit_s)

    def restart(self, limit_s: float) -> None:
        """A new phase. A thread not seen yet counts all its waiting as this phase's: it is younger, or it
        is forgiven a little more than its due, and never more than the limit."""
        self.limit_s, self.started = limit_s, time.monotonic()
        self.waits_at_start = cpu_waits(self.tree)

    def shorten(self, limit_s: float) -> None:
        """The same phase, with a lower limit (never a higher one)."""
        self.limit_s = min(self.limit_s, limit_s)

    def remaining(self) -> float:
        """Seconds left; past the plain wall-clock limit, the CPU waits since the start are forgiven."""
        left = self.limit_s - (time.monotonic() - self.started)
        if left > 0:
            return left
        return left + self.forgiven()

    def forgiven(self) -> float:
        self.tree = [*process_tree(self.pid), *(pid for root in self.beside() for pid in process_tree(root))]
        now = cpu_waits(self.tree)
        grown = max((wait - self.waits_at_start.get(task, 0.0) for task, wait in now.items()), default=0.0)
        return min(max(grown, 0.0), self.limit_s)


def cpu_waits(pids: list[int]) -> dict[int, float]:
    """Seconds each thread of these processes has spent runnable but waiting for a CPU."""
    waits: dict[int, float] = {}
    for pid in pids:
        for task in listdir(PROC / str(pid) / "task"):
            try:
                fields = (PROC / str(pid) / "task" / task / "schedstat").read_text().split()
                waits[int(task)] = int(fields[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue  # gone since the listing
    return waits

