"""How a child starts (issue 50): its folder and log, its two pipes, the descriptors of its stored inputs, the
process in its sandbox; and, once the job is ready, the job handed to it.

Every child starts the same way and then waits on its control pipe for one line (protocol.await_job) saying its job
file is written; only then does it read its job. So a child can be started before its job exists: a grade starts the
children it will need as soon as its run plan is known (EarlyChildren, early.py), and their interpreter start,
imports and CUDA initialisation overlap the parent's own imports and static check; a child started when its job is
ready (a restart) is told at once. Until it is told, only the grader's own code runs in it: the submission reaches
its folder with the job. This module imports little, so that the commands can start the children before the rest
of the grader is imported.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..judge.input_records import for_child, opened_for_child, recorded
from ..leftovers import GRADE, owned_folder
from .confine.proc import BACKGROUND_NICE, kill_group, set_session_priority
from .confine.sandbox import GPU_LIMITS, Confinement, Sandbox, child_environment
from .confine.site_path import without_site
from .protocol import JOB_READY

if TYPE_CHECKING:
    from .gpu.device_lock import DeviceLock
    from .job import CaseSpec, Job

JOB_FILE = "job.json"  # in the child's folder, written by the parent alone, deleted by the child once read
# Cases whose stored inputs a child is passed as descriptors; the rest it generates. Far within both processes'
# open-file limits (the GPU child's is 1024) for a config of many cases; the shipped one has 21.
MAX_INPUT_DESCRIPTORS = 256


@dataclass(frozen=True)
class ChildProgram:
    """What runs as the child: argv (job file and fds are appended) and the sandbox it runs in. Without a
    sandbox the program must be the grader's own code, confining whatever student code it starts."""

    argv: tuple[str, ...]
    sandbox: Sandbox | None = None
    gpu: bool = False
    emulator: bool = False  # the CPU emulator's driver: the parent builds the emulation ahead as it starts
    # argv is `python -m` a module of the grader's: it starts without `site` where its path can be handed to it
    without_site: bool = False

    @classmethod
    def gpu_child(cls, sandbox: Sandbox) -> ChildProgram:
        return cls((sys.executable, "-m", "grader.execute.gpu.child"), sandbox, gpu=True, without_site=True)

    @classmethod
    def cpu_driver(cls) -> ChildProgram:
        return cls((sys.executable, "-m", "grader.execute.cpu"), emulator=True, without_site=True)

    def command(self, import_path: tuple[str, ...] | None) -> list[str]:
        """argv, with `-S` where the child is handed its import path (site_path.py)."""
        return [self.argv[0], "-S", *self.argv[1:]] if import_path is not None else list(self.argv)

    def confinement(self, workdir: Path) -> Confinement:
        return Confinement(workdir, GPU_LIMITS, python=True, cuda=True, gpu=self.gpu)


@dataclass
class Placement:
    """Where a child runs: which GPU it sees, and the lock that gives out turns on it (device_lock.py)."""

    gpu: int | None = None
    lock: DeviceLock | None = None

    def environment(self) -> dict[str, str]:
        """What a child started here adds to its allow-listed environment: the one GPU it may see, and one
        hardware queue for its context (a child uses one stream). Making a context's default eight is
        work the driver does one process at a time: on an H100, 16 processes side by side started and
        ended 5.3 CUDA programs a second with eight, 14.1 with one (bench/sanitizer_cost.py)."""
        visible = {} if self.gpu is None else {"CUDA_VISIBLE_DEVICES": str(self.gpu)}
        return {**visible, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}

    def gpu_name(self) -> str:
        """The GPU a child started here sees, as the toolchain hint names it: this placement's, or the first
        visible."""
        if self.gpu is not None:
            return str(self.gpu)
        return os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"


InputKey = tuple  # a case's name and what its inputs are made of: (name, m, n, k, seed, distribution)


def input_key(case) -> InputKey:
    """The same for a grade's Case and for the CaseSpec its job carries."""
    return case.name, case.m, case.n, case.k, case.seed, case.distribution


def inputs_for_child(cases: Iterable, cache_dir: str) -> tuple[dict[InputKey, dict], list[int]]:
    """Each case's A and B stored in the cache (judge/input_records.py) as a read-only descriptor the child maps,
    never the cache's path: the record as the child's job names it, by case; and the descriptors, to pass. A case
    whose file is missing or not the recorded one goes without: its child generates them."""
    named, descriptors = {}, []
    for case in cases:
        wanted = cache_dir and len(descriptors) < MAX_INPUT_DESCRIPTORS
        record = recorded(case.m, case.n, case.k, case.seed, case.distribution, cache_dir) if wanted else None
        descriptor = opened_for_child(record) if record else None
        if descriptor is not None:
            descriptors.append(descriptor)
            named[input_key(case)] = for_child(record, descriptor)
    return named, descriptors


def with_inputs(cases: list[CaseSpec], inputs: dict[InputKey, dict]) -> list[CaseSpec]:
    """The job's cases, each naming the descriptor its child was passed at its start (None: it generates them)."""
    return [replace(spec, inputs=inputs.get(input_key(spec))) for spec in cases]


@dataclass
class Spawned:
    """A child started in its folder, blocked until it is handed its job (`hand`)."""

    proc: subprocess.Popen
    workdir: Path  # its own folder, the only one it can write
    log_path: Path  # its stdout and stderr, beside that folder: the parent's
    events_fd: int  # the parent's ends of its event pipe and of its control pipe
    control_fd: int
    inputs: dict[InputKey, dict] = field(default_factory=dict)  # the stored inputs it was passed, by case
    owned: Path | None = None  # a folder made for it alone (an early start's): removed with it
    closed: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def hand(self, job: Job) -> None:
        """The job written where the child reads it, then announced; the child reads nothing of it before."""
        job.save(self.workdir / JOB_FILE)
        # Readable whatever the umask: the child may run as the sandbox's uid, which the file written after its start
        # does not belong to (its folder, the uid's alone, keeps everyone else out)
        (self.workdir / JOB_FILE).chmod(0o644)
        try:
            os.write(self.control_fd, JOB_READY)
        except BrokenPipeError:
            pass  # it died as it started: its event pipe's end says so

    def close(self) -> None:
        """The child's process group killed (a child that ended is reaped) and the pipes closed; its log and folder
        stay, to be read."""
        if self.closed:
            return
        self.closed = True
        kill_group(self.proc)
        for descriptor in (self.events_fd, self.control_fd):
            os.close(descriptor)

    def discard(self) -> None:
        """Closed, and the folder made for it alone removed, its log with it (the job's folder is its run's)."""
        self.close()
        if self.owned is not None:
            shutil.rmtree(self.owned, ignore_errors=True)


def spawn(program: ChildProgram, environment: dict[str, str], folder: Path, cases: Iterable, cache_dir: str,
          owned: Path | None = None) -> Spawned:
    """Start `program` in a new folder of its own under `folder` (its log beside it), passed the descriptors of the
    cases' stored inputs; it waits for its job. `owned`: a folder made for it alone, which `discard` removes."""
    workdir = folder / f"child-{time.monotonic_ns()}"
    workdir.mkdir()
    log_path = folder / f"{workdir.name}.log"
    inputs, descriptors = inputs_for_child(cases, cache_dir)
    import_path = without_site(cache_dir) if program.without_site else None
    events_fd, write_fd = os.pipe()
    control_read, control_fd = os.pipe()
    argv = [*program.command(import_path), str(workdir / JOB_FILE), str(write_fd), str(control_read)]
    options = dict(pass_fds=(write_fd, control_read, *descriptors), stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                   env=child_environment(str(workdir), environment, import_path or ()))
    try:
        with open(log_path, "wb") as log:
            if program.sandbox is not None:
                proc = program.sandbox.popen(argv, program.confinement(workdir), stdout=log, **options)
            else:
                proc = subprocess.Popen(argv, stdout=log, start_new_session=True, cwd=workdir, **options)
    except BaseException:
        os.close(events_fd)
        os.close(control_fd)
        raise
    finally:
        for descriptor in (write_fd, control_read, *descriptors):
            os.close(descriptor)  # the child's now
    set_session_priority(proc.pid, BACKGROUND_NICE)  # until it holds a turn: start-up, nvcc, waiting
    return Spawned(proc, workdir, log_path, events_fd, control_fd, inputs, owned)


class EarlyChildren:
    """The children one grade will run, started before their jobs exist (early.py says which): each is taken once,
    by the run it was started for (child_run.py); whatever is left when the grade ends (a refusal, a compile check
    that failed, an error, an interruption) is killed and its folder removed (`close`). Each has a folder of its
    own, named for this process, so that what a kill -9 leaves is cleared by the next start (leftovers.py)."""

    def __init__(self):
        self._waiting: dict[tuple, Spawned] = {}
        self._lock = threading.Lock()  # the emulator's run beside a GPU grade takes its driver from a thread

    def start(self, program: ChildProgram, placement: Placement, cases: Iterable, cache_dir: str) -> None:
        folder = owned_folder(GRADE)
        os.chmod(folder, 0o711)  # the sandbox uid must reach its own folder inside; nobody may list it
        try:
            spawned = spawn(program, placement.environment(), folder, cases, cache_dir, owned=folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        with self._lock:
            self._waiting[_key(program, placement)] = spawned

    def take(self, program: ChildProgram, placement: Placement) -> Spawned | None:
        """The child started for this program and placement, now the caller's to hand its job to and to close."""
        with self._lock:
            return self._waiting.pop(_key(program, placement), None)

    def pids(self) -> list[int]:
        """The processes started and still waiting to be taken."""
        with self._lock:
            return [spawned.pid for spawned in self._waiting.values()]

    def close(self) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for spawned in waiting:
            spawned.discard()

    def __enter__(self) -> EarlyChildren:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _key(program: ChildProgram, placement: Placement) -> tuple:
    return program, tuple(sorted(placement.environment().items()))
