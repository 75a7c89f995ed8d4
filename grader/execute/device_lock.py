"""Turns on a device, across processes: whoever runs anything on it has it alone for that turn.

Why alone, even for correctness runs: kernels of two processes on one GPU are time-sliced, and a racy
kernel's output depends on where it was preempted. A kernel that races passes or fails by luck; graded
next to a classmate it must get the luck it gets alone, on a quiet GPU. Turns are short (a submission's
cases, one timing measurement, one sanitizer launch); the heavy host-side steps (making inputs,
compiling, judging) happen outside them, so the GPU is seldom idle while someone waits.

A flock on one file per device: a holder that dies releases at once, and a batch and a `grade` run on
the same machine take turns too. Whoever asks measures how long it waited, because waiting is not the
student's time.
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
    # The CPU emulator's cases share their turns: an emulated run's result does not depend on what runs
    # beside it (its threads are fibers in a fixed order), and a slow student must not hold up the class.
    cases_share: bool = False

    def turn(self, kind: str) -> Turn:
        """Wait until nobody else uses the device (or, for shared cases, nobody holds it alone), then hold it."""
        started = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{self.device}.turn", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH if kind == "case" and self.cases_share else fcntl.LOCK_EX)
        return Turn(kind, time.monotonic() - started, fd)
