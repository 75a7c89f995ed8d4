"""Turns on a device, across processes: many runs share it, a timing measurement has it alone.

A reader-writer lock on two files per device (flock, so a holder that dies releases at once):
  timing — every timing turn holds it shared from the moment it asks until it is done; a run passes
           through it exclusively on its way in, so no run starts while a timing turn waits or runs;
  room   — runs hold it shared while they use the device; a timing turn holds it exclusively.
Timing turns that ask while others wait go one after another, before any run starts again: the device
drains of runs once per group of measurements, not once per measurement. After a group, runs have the
device for at least READER_WINDOW_S before the next group may start, so a stream of timing turns cannot
starve the runs either. Whoever asks measures how long it waited, because waiting is not the student's
time.
"""
from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

SHARED, EXCLUSIVE = "shared", "exclusive"
READER_WINDOW_S = 0.5


@dataclass
class Turn:
    """A turn being held: release it once (a second release does nothing)."""

    kind: str
    waited_s: float
    _fds: tuple[int, ...]
    _window: Path | None = None  # an exclusive turn's: where the last of a group opens the runs' window

    def release(self) -> None:
        fds, self._fds = self._fds, ()
        if not fds:
            return
        room, *rest = fds
        os.close(room)
        if self._window is not None and _only_holder(rest[0]):
            self._window.write_text(repr(time.time() + READER_WINDOW_S))
        for fd in rest:  # closing drops the flock
            os.close(fd)


def _only_holder(fd: int) -> bool:
    """Whether no other timing turn waits or runs: ours is the only shared hold, so it can become exclusive."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@dataclass(frozen=True)
class DeviceLock:
    """One device's turns. Only paths travel to another process (pickle), never a held turn."""

    folder: Path
    device: str

    def _open(self, part: str) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self.folder / f"{self.device}.{part}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def shared(self) -> Turn:
        """Wait for a shared turn: behind every timing turn already waiting or running."""
        started = time.monotonic()
        timing = self._open("timing")
        try:
            fcntl.flock(timing, fcntl.LOCK_EX)  # granted only when no timing turn holds it
            room = self._open("room")
            fcntl.flock(room, fcntl.LOCK_SH)  # no timing turn can hold the room now: at once
        finally:
            os.close(timing)
        return Turn(SHARED, time.monotonic() - started, (room,))

    def exclusive(self) -> Turn:
        """Wait for the device alone: no shared turn and no other timing turn runs while this one is held."""
        started = time.monotonic()
        window = self.folder / f"{self.device}.window"
        self.folder.mkdir(parents=True, exist_ok=True)
        time.sleep(max(_read_time(window) - time.time(), 0.0))  # the runs' window after the last group
        timing = self._open("timing")
        fcntl.flock(timing, fcntl.LOCK_SH)  # from here on, new shared turns wait behind this one
        room = self._open("room")
        fcntl.flock(room, fcntl.LOCK_EX)
        return Turn(EXCLUSIVE, time.monotonic() - started, (room, timing), window)


def _read_time(path: Path) -> float:
    try:
        return min(float(path.read_text() or 0), time.time() + READER_WINDOW_S)  # never more than one window
    except (OSError, ValueError):
        return 0.0
