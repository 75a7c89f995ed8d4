"""The cases a GPU run hung in, told as they happen to the CPU emulator's run beside it (on_gpu.py).

A case the GPU child ran past its hang limit is an error on the GPU whatever the emulator finds: the emulator can
add only its words (a divergent barrier, an access out of bounds, found in its first milliseconds). Spinning on
past the GPU's own limit adds nothing, yet a kernel that spins forever kept the emulator at each case's whole CPU
limit (10 s, more under load): a hung student's grade took a minute and ended a class's batch alone. So the
emulator gives such a case the seconds the GPU gave it (the driver's schedule.py caps its limit), and tells a
time-out as the GPU does.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

Listener = Callable[[str, float], None]


class GpuHangs:
    """Cases the GPU hung in, each with the limit it had there; each listener hears every one, those before it
    began listening too. Thread-safe: the GPU run's events are read on one thread, the emulator's on another."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hung: dict[str, float] = {}
        self._listeners: list[Listener] = []

    def hung(self, case: str, limit_s: float) -> None:
        with self._lock:
            if case in self._hung:
                return
            self._hung[case] = limit_s
            for listener in self._listeners:
                listener(case, limit_s)

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Start telling `listener`; the returned call stops it, after which it is never called again (it may
        then close what it writes to)."""
        with self._lock:
            self._listeners.append(listener)
            for case, limit_s in self._hung.items():
                listener(case, limit_s)

        def stop() -> None:
            with self._lock:
                self._listeners.remove(listener)

        return stop
