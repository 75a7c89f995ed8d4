"""Runs a job in child processes and yields their events; never runs submission code itself.

The one entry for running a submission: `run_job(job, limits, timing_turn, program, placement)`. Each
child is spawned fresh (never forked), in the sandbox its `ChildProgram` names, in its own process group
(spawn.py: the first may have been started before its job, by the grade), handed its job, and killed as a
group when the current phase outlives its deadline. A deadline counts the child's own
work: a child asks for its turn on the device (`await_device` for its cases, `await_timing` for a
measurement; either has the device alone, until the child asks again, reports its measurement or ends)
and the wait for it, like a wait for a CPU (deadline.py), is never its time. Every line it sends is
checked against the protocol (protocol.py); a malformed one ends the child as the submission's fault. A
child that faulted, hung, crashed or broke the protocol is never reused: the remaining cases go to a new
child, a bounded number of times.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from .confine import bytecode, reachable
from .confine.deadline import Deadline
from .confine.proc import (
    BACKGROUND_NICE,
    TURN_NICE,
    ProcessTree,
    cap,
    kill_group,
    own_priority,
    set_tree_priority,
)
from .cpu.build_ahead import BuildAhead
from .event_pipe import TimedOut, read_events
from .gpu.clocks import ClockWatch
from .gpu.device_lock import Turn
from .hang_notices import GpuHangs
from .job import Job
from .nvcc import cubin_cache
from .nvcc.compile_ahead import CompilesAhead
from .protocol import ProtocolError, gpu_hung_line
from .spawn import ChildProgram, Placement, Spawned, spawn, with_inputs

# Events after which the child is gone; in a case, the remaining cases go to a fresh child.
BROKEN = ("fault", "timeout", "crash", "protocol_error")
LOG_FILE_BYTES = 1 << 20  # of a child's stdout and stderr, what the parent reads back


@dataclass
class Limits:
    startup_s: float  # interpreter, imports and CUDA context
    compile_s: float
    run_s: float  # one case, or the whole timing phase
    max_restarts: int
    case_s: float | None = None  # one case, where it differs from run_s (on the GPU: config's gpu_hang_s)

    def for_phase(self, phase: str) -> float:
        case = self.run_s if self.case_s is None else self.case_s
        # The access profile builds the reference's emulation (a compile) before its two runs.
        limits = {"startup": self.startup_s, "compile": self.compile_s, "case": case, "profile": self.compile_s}
        return limits.get(phase, self.run_s)


def run_job(job: Job, limits: Limits, timing_turn: Callable[[], int], program: ChildProgram,
            placement: Placement | None = None, built_ahead: BuildAhead | None = None,
            started: Spawned | None = None, gpu_hangs: GpuHangs | None = None,
            left_out_after_hang: Callable[[str, list[str]], list[str]] | None = None) -> Iterator[dict]:
    """Yield the children's events, plus the parent's own: 'timeout', 'crash', 'protocol_error',
    'restart', 'turn' (a turn on the device was given, after waiting so long), 'turns_held' (how long the
    child held the device, per kind of turn) and 'output' (each child's captured stdout and stderr, after
    it ends, and in 'phases' where its time went on the parent's clock).

    A child that finished its cases asks whether to time, and again after each measurement;
    `timing_turn()` answers with the repetitions to run (0: no more timing), after every earlier event
    has been consumed. `built_ahead`: the CPU driver's emulation, its build started by the caller already (the
    first child's; otherwise each CPU driver's is started as it is spawned). `started`: the first child, started
    already and waiting for its job (EarlyChildren); the rest are started as they are needed. `gpu_hangs`: beside a GPU
    run, the cases it hung in, told to each child as they come (hang_notices.py). `left_out_after_hang(case,
    remaining)`: after a hang in `case`, which of the remaining cases the next child leaves out ('left_out' names
    them; hang_notices.py says why).
    """
    restarts, placement = 0, placement or Placement()
    while True:
        broken = None
        child = Child(job, limits, timing_turn, program, placement, built_ahead, started, gpu_hangs)
        built_ahead = started = None
        for event in child.events():
            if event["event"] in BROKEN:
                broken = event
            yield event
        names = [case.name for case in job.cases]
        if broken is None or broken.get("case") not in names or restarts >= limits.max_restarts:
            return  # finished, or broken outside the cases (compile, timing), or out of restarts
        restarts += 1
        remaining = job.cases[names.index(broken["case"]) + 1:]
        if broken["event"] == "timeout" and left_out_after_hang is not None:
            left_out = set(left_out_after_hang(broken["case"], [case.name for case in remaining]))
            if left_out:
                yield {"event": "left_out", "after": broken["case"],
                       "cases": [case.name for case in remaining if case.name in left_out]}
                remaining = [case for case in remaining if case.name not in left_out]
        job = replace(job, cases=remaining)
        if not job.cases:
            return
        yield {"event": "restart", "after": broken["case"], "restarts": restarts}


class Child:
    def __init__(self, job: Job, limits: Limits, timing_turn: Callable[[], int], program: ChildProgram,
                 placement: Placement, built_ahead: BuildAhead | None = None, started: Spawned | None = None,
                 gpu_hangs: GpuHangs | None = None):
        self.job, self.limits, self.timing_turn, self.placement = job, limits, timing_turn, placement
        self.program = program
        self.started = started  # the process, started before its job was ready (EarlyChildren), or None
        self.turn: Turn | None = None
        self.pid: int | None = None  # the child's process (its sandbox's outermost one), once started
        self.held_s: dict[str, float] = {}  # per kind of turn, how long this child held the device
        self.clocks: ClockWatch | None = None
        self.clocks_opening: Future | None = None  # NVML opened while the cases run (open_clocks_early)
        self.pci_bus_id = ""
        self.timeline = Timeline()  # where this child's time went, on the parent's clock (phases.py)
        self.ahead: CompilesAhead | None = None  # the parent's own builds of the cubins the cache lacks
        self.built_ahead: set[str] = set()  # the keys of those it kept
        self.emulator_ahead = built_ahead  # the parent's build of the emulation, for the CPU driver
        self.gpu_hangs = gpu_hangs

    def events(self) -> Iterator[dict]:
        child = self._started()
        # Its own folder, the only one it can write; its log stays with the parent.
        self.workdir, self.log_path = child.workdir, child.log_path
        self.cubins = cubin_cache.Exchange(self.job, self.workdir)
        self.pid, self.tree, self.control_fd = child.pid, ProcessTree(child.pid), child.control_fd
        stop_telling = None
        try:
            self._hand_job(child)
            # Told after the job's announcement, which the child reads first (protocol.await_job)
            stop_telling = self.gpu_hangs.listen(self._tell_hung) if self.gpu_hangs is not None else None
            self.timeline.enter("child_start")  # what is left of its start, the part the grade waits for
            yield from self._read(child.proc, child.events_fd)
        finally:
            if stop_telling is not None:
                stop_telling()  # before the pipe closes: no notice is written to a closed (or reused) descriptor
            child.close()  # the process group killed (stragglers the child left behind reaped), its pipes closed
            output = self.output()  # whole once the child is gone; read before an early child's folder goes
            child.discard()
            if self.ahead is not None:
                self.ahead.cancel()  # the child ended before it reported its toolchain
            if self.emulator_ahead is not None:
                self.emulator_ahead.stop()
            self._end_turn()
            self._close_unused_clocks()
        if self.held_s:
            yield {"event": "turns_held", "held_s": {kind: round(s, 4) for kind, s in self.held_s.items()}}
        # With where the child's time went (phases.py), the parent's figure like its turns.
        yield {"event": "output", "text": output, "phases": self.timeline.close()}

    def _started(self) -> Spawned:
        """The child started early for this run, or started now, in a folder of its own in the job's."""
        if self.started is not None:
            return self.started
        self.timeline.enter("sandbox")  # the confinement's set-up: reachable copies, the command line
        return spawn(self.program, self.placement.environment(), Path(self.job.workdir), self.job.cases,
                     self.job.cache_dir)

    def _hand_job(self, child: Spawned) -> None:
        """What the parent puts in place for the child (the cubins cached on the hint, its builds ahead), then the
        job, which the child has waited for: its startup deadline begins as it is handed over."""
        # The child sees its own folder only; the compile cache stays with the parent (cubin_cache).
        cache_dir = "" if self.program.sandbox is not None else self.job.cache_dir
        hint = cubin_cache.hint(self.job.cache_dir, self.placement.gpu_name()) if self.program.gpu else []
        if hint:
            self.cubins.offer(*hint)  # what was compiled before is in place before the child reads its job
            if self.program.sandbox is not None:
                self.ahead = CompilesAhead.start(self.cubins, hint, self.program.sandbox, self.limits.compile_s,
                                                 Path(self.job.workdir))
        if self.program.emulator and self.emulator_ahead is None:  # begun before the driver reads its job
            self.emulator_ahead = BuildAhead.start(self.job, self.limits.compile_s, Path(self.job.workdir))
        if self.program.gpu and self.job.cache_dir:
            bytecode.ensure_soon(reachable.child_distributions, Path(self.job.cache_dir))
        child.hand(replace(self.job, workdir=str(self.workdir), cache_dir=cache_dir, toolchain_hint=hint,
                           cases=with_inputs(self.job.cases, child.inputs), parent_compiles=self.ahead is not None,
                           case_s=self.limits.for_phase("case"), max_restarts=self.limits.max_restarts))

    def _read(self, proc: subprocess.Popen, read_fd: int) -> Iterator[dict]:
        phase, case, handed = "startup", None, time.monotonic()
        deadline = Deadline(proc.pid, self.limits.for_phase(phase), beside=self._building_for_it)
        finished = False
        try:
            for event in read_events(read_fd, deadline):
                event["elapsed_s"] = round(time.monotonic() - handed, 3)  # for the instructor's figures
                self.timeline.saw(event)
                if event["event"] == "phase":
                    phase, case = event["phase"], event.get("case")
                    deadline.restart(self.limits.for_phase(phase))
                    continue
                if event["event"] in ("await_device", "await_timing"):
                    resumed = self.timeline.current
                    answer, turn = self._take_turn(event["event"])
                    self.timeline.enter(resumed)
                    deadline.restart(self.limits.for_phase(phase))  # the wait was not the child's time
                    self._answer(answer)
                    if turn is not None:
                        yield turn
                    continue
                if event["event"] == "toolchain":
                    if self._finish_ahead(event["arch"], event["nvcc"]):
                        kill_group(proc)
                        yield {"event": "timeout", "phase": "compile", "case": None,
                               "limit_s": self.limits.for_phase("compile")}
                        return
                    deadline.restart(self.limits.for_phase(phase))  # the parent's compiles were not its time
                    self.cubins.offer(event["arch"], event["nvcc"])
                    cubin_cache.write_hint(self.job.cache_dir, self.placement.gpu_name(), event["arch"], event["nvcc"])
                    self._answer(b"ready\n")
                    continue
                self._annotate(event, case, phase)
                finished = event["event"] in ("done", "fault")
                yield event
        except TimedOut:
            kill_group(proc)
            yield {"event": "timeout", "phase": phase, "case": case, "limit_s": self.limits.for_phase(phase)}
            return
        except ProtocolError as error:
            kill_group(proc)
            yield {"event": "protocol_error", "phase": phase, "case": case, "error": str(error)}
            return
        if not finished:
            proc.wait()
            yield {"event": "crash", "phase": phase, "case": case, "returncode": proc.returncode}

    def _building_for_it(self) -> list[int]:
        """The parent's compile the CPU driver may be waiting for: its waits for a CPU are not the driver's time."""
        return self.emulator_ahead.compiles.pids() if self.emulator_ahead is not None else []

    def _tell_hung(self, case: str, limit_s: float) -> None:
        """A case the GPU hung in, told on the control pipe (from the GPU run's thread: one short write, whole)."""
        self._answer(gpu_hung_line(case, limit_s))

    def _answer(self, line: bytes) -> None:
        try:
            os.write(self.control_fd, line)
        except BrokenPipeError:
            pass  # the child is gone: its pipe's end tells the rest

    def _finish_ahead(self, arch: str, nvcc_version: str) -> bool:
        """Keep what the parent built ahead for the child's toolchain; True if the student's build timed out."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return False
        timed_out = ahead.finish(self.cubins, arch, nvcc_version)
        self.built_ahead = ahead.kept
        return timed_out

    def _annotate(self, event: dict, case: str | None, phase: str) -> None:
        """What only the parent knows, added to a child's event before it is passed on."""
        if event["event"] == "compiled":
            event["compiled_ahead"] = self._whose_compiles_ran_ahead(event)
            event["student_cubin"] = self.cubins.take(event.pop("cubins", {}))
            self.pci_bus_id = event.get("pci_bus_id", "")
            self._open_clocks_early()
        elif event["event"] in ("case", "case_error"):
            event["folder"] = str(self.workdir)  # where this child left the case's outputs
        elif event["event"] == "timing":
            event["clocks"] = self._end_turn()
        elif event["event"] == "fault":
            event.update(phase=phase, case=case)

    def _whose_compiles_ran_ahead(self, compiled: dict) -> str:
        """Whose compiles, if any, ran while the child started: "parent" (the parent's builds: the GPU child's
        cubins, or the emulation the CPU driver found built, `compiled_ahead` in its words), "child" (the GPU
        child's, on the hint) or "no"."""
        if self.program.emulator:
            found_built = compiled.get("compiled_ahead") and self.emulator_ahead is not None
            return "parent" if found_built and self.emulator_ahead.kept_for_the_driver() else "no"
        used = compiled.get("cubins", {}).get("student", "")
        return "parent" if used in self.built_ahead else "child" if compiled.get("compiled_ahead") else "no"

    def _take_turn(self, asked: str) -> tuple[bytes, dict | None]:
        """The answer to the child's request, after waiting for the turn it needs; and the 'turn' event."""
        self._end_turn()  # a child holds one turn at a time
        timing = asked == "await_timing"
        self.timeline.enter("judge")  # whether to time is the parent's verdict on the cases so far
        repetitions = self.timing_turn() if timing else 0
        self.timeline.enter("turn_wait")
        if timing and repetitions <= 0:
            return b"skip\n", None
        lock, event = self.placement.lock, None
        if timing:
            self.clocks = self._opened_clocks()
        if lock is not None:
            set_tree_priority(self.tree, TURN_NICE)  # while it waits it sleeps; once given the turn it runs first
            self.turn = lock.turn("timing" if timing else "case")
            event = {"event": "turn", "kind": self.turn.kind, "waited_s": round(self.turn.waited_s, 3)}
        if timing:
            self.clocks.start()
            return f"go {repetitions}\n".encode(), event
        return b"go\n", event

    def _open_clocks_early(self) -> None:
        """NVML's set-up for the first timing turn (about 60 ms), on a thread while the cases run: it is
        the parent's work, and a warm grade waited for it between the cases and the timing."""
        if self.pci_bus_id and self.clocks_opening is None:
            opening, bus_id = Future(), self.pci_bus_id
            threading.Thread(target=lambda: opening.set_result(ClockWatch.open(bus_id)), daemon=True).start()
            self.clocks_opening = opening

    def _opened_clocks(self) -> ClockWatch:
        """The clock watch opened early, the first time; a new one for each later timing turn."""
        opening, self.clocks_opening = self.clocks_opening, None
        return opening.result() if opening is not None else ClockWatch.open(self.pci_bus_id)

    def _close_unused_clocks(self) -> None:
        """NVML opened early for a timing turn that never came (the cases failed) is shut down again."""
        opening, self.clocks_opening = self.clocks_opening, None
        if opening is not None:
            opening.result().stop()

    def _end_turn(self) -> dict:
        """Give the device back; what the GPU's clocks did during a timing turn, when it was one."""
        clocks, self.clocks = self.clocks, None
        if clocks is not None:
            clocks.halt()
        if self.turn is not None:
            self.turn.release()  # first: NVML's shut-down and the bookkeeping need no GPU
            set_tree_priority(self.tree, own_priority(), session_nice=BACKGROUND_NICE)  # back as before the turn
            self.held_s[self.turn.kind] = self.held_s.get(self.turn.kind, 0.0) + self.turn.held_s
            self.turn = None
        return clocks.stop() if clocks is not None else {}

    def output(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                return cap(log.read(LOG_FILE_BYTES).decode("utf-8", "replace"))
        except OSError:
            return ""


class Timeline:
    """Where a child's time went, on the parent's clock, phase by phase (phases.py names them): the phase
    changes when the child says so or when an event shows it has moved on; the parent's own waits for a
    turn and its verdicts before timing are phases of their own."""

    # The phase a child event starts, where it is not a "phase" event itself.
    AFTER = {"compiled": "cases", "compile_error": "child_end", "kernel_missing": "child_end", "done": "child_end",
             "fault": "child_end"}
    PHASES = {"startup": "child_start", "compile": "compile", "case": "cases", "timing": "timing",
              "profile": "access_profile"}

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.current, self.since = "", time.monotonic()

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        if self.current:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
        self.current, self.since = phase, now

    def saw(self, event: dict) -> None:
        if event["event"] == "phase":
            self.enter(self.PHASES[event["phase"]])
        elif event["event"] in self.AFTER:
            self.enter(self.AFTER[event["event"]])

    def close(self) -> dict[str, float]:
        self.enter("")
        return {phase: round(seconds, 4) for phase, seconds in self.seconds.items()}
