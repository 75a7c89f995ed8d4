"""Turns on a device, across processes: a submission's cases and a timing measurement have it alone.

Why alone, even for correctness runs: kernels of two processes on one GPU are time-sliced. A timing
measurement needs a quiet GPU, and a case's launches must find the GPU as they find it graded alone: their
hang limit is short because the GPU is theirs, and a late warp's wait is timed partly by the clock. (The
poison a racy kernel reads is part of its own launch: late_warps.py.) Cases sharing their turns with
sanitizer launches was tried: 300 submissions on an H100 took 198 s against 202 s, within noise, so the
turns are not all a batch waits on (starting and ending CUDA programs is too: bench/cuda_start.py). They
are busy, though: `bench/batch_300.py --timeline` saw the turn held alone about 40% and shared about 40%
of a 300-class batch's wall, and a student wait 1.7 s for case and timing turns and 1.9 s for the tools'
(H100); a turn's holder is slowed by the other processes' starts (a tile-16 kernel's case turn takes 67 ms
alone; a batch's case turns averaged 205 ms). Case turns shared by two or four students at once were tried too
(300 on an H200, one call: 104.4 s alone, 106.3 s by two, 109.3 s by four): the GPU time-slices between
contexts, and a loop shaped like a case turn took 3.1 times as long beside one other such loop and 23 times as
long beside a spinning kernel (a hung student's; `bench/gpu_contention.py --only alone "1 other turn"
"1 spinning kernel"`), so each would only slow the other.
Launches under a sanitizer tool share their turns with each other (not with cases or timing): what a
tool finds is its analysis of the kernel's accesses and barriers, not the luck of a schedule, and
instrumented launches are long (racecheck of a racy kernel: over a second), so one at a time they would
queue the whole batch.
Turns are short; the heavy host-side steps (making inputs, compiling, judging) happen outside them.

A flock on one file per device: a holder that dies releases at once, and a batch and a `grade` run on
the same machine take turns too. Whoever asks for the device alone first takes a gate file that sharing
turns pass through, so sharing turns drain rather than starve it. Whoever asks measures how long it
waited, because waiting is not the student's time.
"""
from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Turn:
    """A turn being held: release it once (a second release does nothing)."""

    kind: str  # what it is for: "case", "timing", "sanitizer"
    waited_s: float
    _fd: int | None
    _granted: float = field(default_factory=time.monotonic)
    held_s: float = 0.0  # how long it was held, once released: what a batch's GPU time went to

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock
            self.held_s = time.monotonic() - self._granted


@dataclass(frozen=True)
class DeviceLock:
    """One device's turns. Only paths travel to another process (pickle), never a held turn."""

    folder: Path
    device: str
    # The kinds of turn that share the device with each other (never with the other kinds). On the GPU,
    # sanitizer launches. The CPU emulator's cases share theirs: an emulated run's result does not depend
    # on what runs beside it (its threads are fibers in a fixed order), and a slow student must not hold
    # up the class.
    shared_kinds: frozenset[str] = frozenset()

    def turn(self, kind: str) -> Turn:
        """Wait until nobody else uses the device (for a sharing kind: nobody holds it alone), then hold it."""
        started = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_SH if kind in self.shared_kinds else fcntl.LOCK_EX
        gate = self._open("gate")
        try:
            fcntl.flock(gate, mode)  # held alone by whoever waits for the device alone: nobody passes it
            fd = self._open("turn")
            fcntl.flock(fd, mode)
        finally:
            os.close(gate)
        return Turn(kind, time.monotonic() - started, fd)

    def _open(self, suffix: str) -> int:
        return os.open(self.folder / f"{self.device}.{suffix}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
