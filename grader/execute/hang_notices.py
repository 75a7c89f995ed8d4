"""The cases a GPU run hung in, told as they happen to the CPU emulator's run beside it (on_gpu.py).

A case the GPU child ran past its hang limit is an error on the GPU whatever the emulator finds: the emulator can
add only its words (a divergent barrier, an access out of bounds, found in its first milliseconds). Spinning on
past the GPU's own limit adds nothing, yet a kernel that spins forever kept the emulator at each case's whole CPU
limit (10 s, more under load): a hung student's grade took a minute and ended a class's batch alone. So the
emulator gives such a case the seconds the GPU gave it (the driver's schedule.py caps its limit), and tells a
time-out as the GPU does.

The other way, the emulator's verdicts tell the GPU run which cases to leave out after a hang. A kernel whose
__syncthreads() not every thread reaches hangs on the GPU in every case whose shape leaves some threads out
(`conditional_barrier`): each hang held the GPU alone for `timeouts.gpu_hang_s`, and after `max_restarts` of
them the cases still to run were given up, though the kernel gets some right (a CPU grade passes them). Where the
emulator stopped the case the GPU hung in for such a barrier (or warp collective), the next GPU child leaves out
the remaining cases the emulator stopped for one too: their check is the emulator's either way, unsafe at the
student's line (judge/engines.py), and the rest run. What is left out depends only on the emulator's verdicts,
never on which engine got there first: the GPU run waits for them.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

Listener = Callable[[str, float], None]
# What the emulator stops a case for where a GPU would hang or go astray: threads of one block (or of one warp's
# mask) that never all reach the same __syncthreads() (or collective). run_events.py names them the same.
DIVERGENT = frozenset({"divergence", "warp_divergence"})


class GpuHangs:
    """Cases the GPU hung in, each with the limit it had there; each listener hears every one, those before it
    began listening too. And the emulator's verdicts, which the GPU run asks after a hang (left_out_after_hang).
    Thread-safe: the GPU run's events are read on one thread, the emulator's on another."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hung: dict[str, float] = {}
        self._listeners: list[Listener] = []
        # The emulator's side: each case it judged, with what stopped it ("" where it ran to the end)
        self._judged = threading.Condition(self._lock)
        self._stopped_by: dict[str, str] = {}
        self._emulated: frozenset[str] = frozenset()  # the cases the emulator beside runs (none: no emulator)
        self._emulator_done = False

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

    # -- the emulator's verdicts, for the GPU run ----------------------------------------------------------------

    def emulator_beside(self, cases: list[str]) -> None:
        """An emulator's run of these cases has started beside the GPU run: their verdicts will come (or its end)."""
        with self._lock:
            self._emulated = frozenset(cases)

    def emulated(self, case: str, stopped_by: str) -> None:
        """The emulator's verdict on a case: what stopped it (an event or fault kind), "" where it ran to the end."""
        with self._judged:
            self._stopped_by.setdefault(case, stopped_by)
            self._judged.notify_all()

    def emulator_finished(self) -> None:
        """The emulator's run ended: a case it did not judge by now it never will."""
        with self._judged:
            self._emulator_done = True
            self._judged.notify_all()

    def left_out_after_hang(self, hung: str, remaining: list[str]) -> list[str]:
        """The remaining cases a GPU run leaves out after hanging in `hung`: where the emulator stopped `hung` for a
        divergent barrier or collective, those of `remaining` it stopped for one too; else none. Waits for the
        emulator's verdicts on them (its own limits bound the wait); none where no emulator runs beside."""
        if self._stopped(hung) not in DIVERGENT:
            return []
        return [case for case in remaining if self._stopped(case) in DIVERGENT]

    def _stopped(self, case: str) -> str | None:
        """What stopped the emulator's run of the case, once it is judged; None where it never will be."""
        with self._judged:
            self._judged.wait_for(lambda: case in self._stopped_by or self._emulator_done or case not in self._emulated)
            return self._stopped_by.get(case)
