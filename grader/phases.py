"""Where one grade's wall time went, phase by phase (issue 27): `grade --phases` prints it, and the result
stores it (SubmissionResult.phases) for bench/grade_time.py.

Phases are consecutive intervals of the grading process's own clock, so they add up to its wall time:
each `mark(name)` ends the interval begun by the mark before it. What a child did is measured by the
parent as the child's events arrive (runner.py), so the child's phases are parent time as well.
"""
from __future__ import annotations

import os
import time

# The order phases are told in, with what each holds (those a run does not reach are left out).
DESCRIBED = {
    "start": "parent start: interpreter and imports",
    "config": "configuration and cases read",
    "sandbox": "sandbox set-up: detection, probe, reachable copies",
    # The children start before their jobs exist and wait for them (execute/spawn.py): their own start runs on
    # while the parent goes on, and only what is left of it when the job is handed over is child_start's.
    "child_spawn": "children started early, before the job: their folders, sandbox set-up, spawn",
    "static": "submission read, static check, declaration checks",
    "nvcc_check": "nvcc compile check (no GPU run)",
    "child_start": "child start still waited for once the job is ready: interpreter, imports, CUDA init, toolchain",
    "compile": "compile student and reference (GPU: CUDA context made meanwhile)",
    "cases": "cases: inputs, memory, launches, outputs read",
    "turn_wait": "waiting for a turn on the device",
    "judge": "judging the outputs (float64 truths, comparisons)",
    "timing": "timing",
    "child_end": "child exit",
    "grading_other": "job set-up and result assembly",
    "feedback": "feedback from the cubin (registers, occupancy)",
    "emulator_wait": "waiting for the CPU emulator's run beside the GPU's (safety, explanations)",
    "sanitizer": "compute-sanitizer",
    "profile": "Nsight Compute profile (--profile)",
    "access_profile": "access profile on the CPU emulator (advice, and the speed model's counts)",
    "speed_model": "the speed model's timing estimate (no GPU)",
    "report": "report: files written, terminal output",
}


class Phases:
    """Consecutive intervals on this process's clock, from `origin` (a time.perf_counter() value)."""

    def __init__(self, origin: float | None = None):
        self.last = time.perf_counter() if origin is None else origin
        self.seconds: dict[str, float] = {}

    def mark(self, name: str) -> float:
        """The time since the previous mark goes to `name`; returns it."""
        now = time.perf_counter()
        spent, self.last = now - self.last, now
        self.add(name, spent)
        return spent

    def mark_split(self, parts: dict[str, float], rest: str) -> None:
        """The time since the previous mark, of which `parts` were measured within it; the remainder to `rest`."""
        now = time.perf_counter()
        spent, self.last = now - self.last, now
        for name, seconds in parts.items():
            self.add(name, seconds)
        self.add(rest, max(spent - sum(parts.values()), 0.0))

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        return {name: round(seconds, 3) for name, seconds in self.seconds.items()}


def since_process_start() -> float | None:
    """Seconds since this process was started (the kernel's start time, to 10 ms), or None off Linux: how
    long the interpreter and the imports took before any grader code ran."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time after boot, in ticks
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def merged(first: dict[str, float], then: dict[str, float]) -> dict[str, float]:
    """Two runs of phases as one: `first`'s order, a phase in both added up."""
    total = dict(first)
    for name, seconds in then.items():
        total[name] = round(total.get(name, 0.0) + seconds, 3)
    return total


def ordered(seconds: dict[str, float]) -> list[tuple[str, float]]:
    """The phases in the order of a grade, unknown names last."""
    known = [(name, seconds[name]) for name in DESCRIBED if name in seconds]
    return known + [(name, value) for name, value in seconds.items() if name not in DESCRIBED]


def describe(seconds: dict[str, float], wall: float | None = None) -> list[str]:
    """One line per phase, for a terminal; with the wall time they should add up to."""
    total = sum(seconds.values())
    lines = [f"{value:7.3f} s  {DESCRIBED.get(name, name)}" for name, value in ordered(seconds)]
    lines.append(f"{total:7.3f} s  in all" + (f" (wall {wall:.3f} s)" if wall is not None else ""))
    return lines
