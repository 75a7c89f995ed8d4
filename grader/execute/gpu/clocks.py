"""What the GPU's SM clock did during a timing turn, read by the parent through NVML (nvidia-ml-py).

A GPU that slowed itself down (too hot, power capped) makes a student's kernel look slow for a reason
that is not theirs: the timing verdict says so. NVML is read by the grader's own process, never by the
sandboxed child, which could lie; the GPU is found by the PCI bus id the child's CUDA device reported.
"""
from __future__ import annotations

import threading

SAMPLE_EVERY_S = 0.005
# NVML clock-event reasons that mean the GPU ran slower than it could (nvml.h, nvmlClocksEventReason*).
SLOWDOWNS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "power brake"}
IDLE = 0x1


class ClockWatch:
    """Samples the SM clock and the slowdown reasons on a thread from start() until stop(). Opened before
    the timing turn is asked for: NVML's set-up takes a while and must not hold the GPU."""

    def __init__(self, handle, nvml):
        self.handle, self.nvml = handle, nvml
        self.clocks: list[int] = []
        self.reasons = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self.thread.start()

    @classmethod
    def open(cls, pci_bus_id: str) -> ClockWatch | Unavailable:
        try:
            import pynvml

            pynvml.nvmlInit()
            return cls(pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode()), pynvml)
        except Exception as error:  # no NVML (no driver, a CPU run, nvidia-ml-py missing): said, not fatal
            return Unavailable(f"{type(error).__name__}: {error}"[:200] if pci_bus_id else "no GPU reported")

    def _sample(self) -> None:
        while not self.stopping.wait(SAMPLE_EVERY_S):
            try:
                reasons = self.nvml.nvmlDeviceGetCurrentClocksEventReasons(self.handle)
                clock = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
                # Between launches the GPU may idle down: not a slowdown. After halt() the GPU may be another's.
                if not reasons & IDLE and not self.stopping.is_set():
                    self.clocks.append(clock)
                    self.reasons |= reasons
            except Exception:  # a failed sample is a missing sample
                continue

    def halt(self) -> None:
        """No sample counts from now on; stop() can then come after the turn is given back."""
        self.stopping.set()

    def stop(self) -> dict:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
        seen = {"samples": len(self.clocks),
                "slowdowns": [name for bit, name in SLOWDOWNS.items() if self.reasons & bit]}
        if self.clocks:
            seen["sm_clock_mhz"] = [min(self.clocks), max(self.clocks)]
        return seen


class Unavailable:
    def __init__(self, reason: str):
        self.reason = reason

    def start(self) -> None:
        pass

    def halt(self) -> None:
        pass

    def stop(self) -> dict:
        return {"unavailable": self.reason}
