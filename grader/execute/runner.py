"""Runs a job in child processes and yields their events; never runs submission code itself.

The one entry for running a submission: `run_job(job, limits, want_timing, program, placement)`. Each
child is spawned fresh (never forked), in the sandbox its `ChildProgram` names, in its own process group,
and killed as a group when the current phase outlives its deadline. Every line it sends is checked
against the protocol (protocol.py); a malformed one ends the child as the submission's fault. A child
that faulted, hung, crashed or broke the protocol is never reused: the remaining cases go to a new child,
a bounded number of times.
"""
from __future__ import annotations

import fcntl
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from . import cubin_cache
from .job import Job
from .proc import cap, kill_group
from .protocol import MAX_LINE_BYTES, ProtocolError, decode
from .sandbox import GPU_LIMITS, Confinement, Sandbox, child_environment

# Events after which the child is gone; in a case, the remaining cases go to a fresh child.
BROKEN = ("fault", "timeout", "crash", "protocol_error")
LOG_FILE_BYTES = 1 << 20  # of a child's stdout and stderr, what the parent reads back


@dataclass(frozen=True)
class ChildProgram:
    """What runs as the child: argv (job file and fds are appended) and the sandbox it runs in. Without a
    sandbox the program must be the grader's own code, confining whatever student code it starts."""

    argv: tuple[str, ...]
    sandbox: Sandbox | None = None
    gpu: bool = False

    @classmethod
    def gpu_child(cls, sandbox: Sandbox) -> ChildProgram:
        return cls((sys.executable, "-m", "grader.execute.gpu_child"), sandbox, gpu=True)

    @classmethod
    def cpu_driver(cls) -> ChildProgram:
        return cls((sys.executable, "-m", "grader.execute.cpu.harness_driver"))

    def confinement(self, workdir: Path) -> Confinement:
        return Confinement(workdir, GPU_LIMITS, python=True, cuda=True, gpu=self.gpu)


@dataclass
class Limits:
    startup_s: float  # interpreter, imports and CUDA context
    compile_s: float
    run_s: float  # one case, or the whole timing phase
    max_restarts: int

    def for_phase(self, phase: str) -> float:
        return {"startup": self.startup_s, "compile": self.compile_s}.get(phase, self.run_s)


@dataclass
class Placement:
    """Where a child runs: which GPU it sees, and the lock that keeps timed runs one at a time on it."""

    gpu: int | None = None
    timing_lock: threading.Lock | FileLock | None = None

    def environment(self) -> dict[str, str]:
        """What a child started here adds to its allow-listed environment: the one GPU it may see."""
        return {} if self.gpu is None else {"CUDA_VISIBLE_DEVICES": str(self.gpu)}


class FileLock:
    """A lock that works across processes (batch workers): flock on a file, one per GPU. Each holder opens
    the file itself, so one object may be shared by threads too."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._held = threading.local()

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._held.fd = fd

    def release(self) -> None:
        fd = getattr(self._held, "fd", None)
        if fd is not None:
            os.close(fd)  # closing drops the lock
            self._held.fd = None

    def __getstate__(self) -> dict:
        return {"path": self.path}  # a held lock never travels to another process

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])


def run_job(job: Job, limits: Limits, want_timing: Callable[[], bool], program: ChildProgram,
            placement: Placement | None = None) -> Iterator[dict]:
    """Yield the children's events, plus the parent's own: 'timeout', 'crash', 'protocol_error',
    'restart', and 'output' (each child's captured stdout and stderr, after it ends).

    A child that finished its cases asks whether to time; `want_timing()` answers, after every case
    event has been consumed.
    """
    restarts, placement = 0, placement or Placement()
    while True:
        broken = None
        for event in Child(job, limits, want_timing, program, placement).events():
            if event["event"] in BROKEN:
                broken = event
            yield event
        names = [case.name for case in job.cases]
        if broken is None or broken.get("case") not in names or restarts >= limits.max_restarts:
            return  # finished, or broken outside the cases (compile, timing), or out of restarts
        restarts += 1
        job = replace(job, cases=job.cases[names.index(broken["case"]) + 1:])
        if not job.cases:
            return
        yield {"event": "restart", "after": broken["case"], "restarts": restarts}


class Child:
    def __init__(self, job: Job, limits: Limits, want_timing: Callable[[], bool], program: ChildProgram,
                 placement: Placement):
        self.job, self.limits, self.want_timing, self.placement = job, limits, want_timing, placement
        self.program = program
        self.timing_held = False
        # The child's own folder, the only one it can write; its log stays with the parent.
        self.workdir = Path(job.workdir, f"child-{time.monotonic_ns()}")
        self.log_path = Path(job.workdir, f"{self.workdir.name}.log")
        self.cubins = cubin_cache.Exchange(job, self.workdir)

    def events(self) -> Iterator[dict]:
        self.workdir.mkdir()
        job_file = self.workdir / "job.json"
        # The child sees its own folder only; the compile cache stays with the parent (cubin_cache).
        cache_dir = "" if self.program.sandbox is not None else self.job.cache_dir
        replace(self.job, workdir=str(self.workdir), cache_dir=cache_dir).save(job_file)
        read_fd, write_fd = os.pipe()
        control_read, self.control_fd = os.pipe()
        argv = [*self.program.argv, str(job_file), str(write_fd), str(control_read)]
        options = dict(pass_fds=(write_fd, control_read), stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                       env=child_environment(str(self.workdir), self.placement.environment()))
        with open(self.log_path, "wb") as log:
            if self.program.sandbox is not None:
                confinement = self.program.confinement(self.workdir)
                proc = self.program.sandbox.popen(argv, confinement, stdout=log, **options)
            else:
                proc = subprocess.Popen(argv, stdout=log, start_new_session=True, cwd=self.workdir, **options)
        os.close(write_fd)
        os.close(control_read)
        try:
            yield from self._read(proc, read_fd)
        finally:
            os.close(read_fd)
            os.close(self.control_fd)
            kill_group(proc)  # also reaps stragglers the child left behind
            self._release_timing()
        yield {"event": "output", "text": self.output()}

    def _read(self, proc: subprocess.Popen, read_fd: int) -> Iterator[dict]:
        phase, case, pending, spawned = "startup", None, b"", time.monotonic()
        deadline = time.monotonic() + self.limits.for_phase(phase)
        finished = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kill_group(proc)
                yield {"event": "timeout", "phase": phase, "case": case, "limit_s": self.limits.for_phase(phase)}
                return
            ready, _, _ = select.select([read_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_LINE_BYTES:
                lines.append(pending)  # a line that never ends: decode() refuses it
            for line in lines:
                try:
                    event = decode(line)
                except ProtocolError as error:
                    kill_group(proc)
                    yield {"event": "protocol_error", "phase": phase, "case": case, "error": str(error)}
                    return
                event["elapsed_s"] = round(time.monotonic() - spawned, 3)  # for the instructor's figures
                if event["event"] == "phase":
                    phase, case = event["phase"], event.get("case")
                    deadline = time.monotonic() + self.limits.for_phase(phase)
                    continue
                if event["event"] == "await_timing":
                    os.write(self.control_fd, b"go\n" if self._may_time() else b"skip\n")
                    continue
                if event["event"] == "toolchain":
                    self.cubins.offer(event["arch"], event["nvcc"])
                    os.write(self.control_fd, b"ready\n")
                    continue
                if event["event"] == "compiled":
                    event["student_cubin"] = self.cubins.take(event.pop("cubins", {}))
                if event["event"] == "case":
                    event["folder"] = str(self.workdir)  # where this child left the case's outputs
                if event["event"] == "timing":
                    self._release_timing()
                if event["event"] == "fault":
                    event.update(phase=phase, case=case)
                finished = event["event"] in ("done", "fault")
                yield event
        if not finished:
            proc.wait()
            yield {"event": "crash", "phase": phase, "case": case, "returncode": proc.returncode}

    def _may_time(self) -> bool:
        """Yes if the parent wants timing; then wait for the GPU's timing lock (one timed run per GPU)."""
        if not self.want_timing():
            return False
        if self.placement.timing_lock is not None:
            self.placement.timing_lock.acquire()
            self.timing_held = True
        return True

    def _release_timing(self) -> None:
        if self.timing_held:
            self.timing_held = False
            self.placement.timing_lock.release()

    def output(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                return cap(log.read(LOG_FILE_BYTES).decode("utf-8", "replace"))
        except OSError:
            return ""
