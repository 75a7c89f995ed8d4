"""The built emulation, started once in the job's sandbox, running the driver's tasks (harness.cpp, serve).

One sandbox for every case: the server answers with the tile size, then forks a worker per task (one thread
order over a run of cases). It and its workers write student-controlled bytes: every reply line is parsed
strictly and anything else is dropped, and the files they leave are read as untrusted (protocol.py).
"""
from __future__ import annotations

import itertools
import os
import re
import select
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..confine.proc import kill_group
from ..confine.sandbox import HARNESS_LIMITS, Confinement, Sandbox, SandboxFailed

REPLY = re.compile(rb"(hello|done|exit) (none|-?\d{1,9})(?: (-?\d{1,9}))?")
READS_AT_ONCE = 16  # a pipe student code floods is read in turns with the rest of the driver's work
MAX_PENDING = 1 << 16  # of a line not ended yet: what student code floods the pipe with is dropped
STDERR_BYTES = 64 << 10  # of the server's and workers' stderr, passed on to the log


@dataclass(frozen=True)
class Reply:
    """The server's tile size (`value`, -1 for none: "hello"), a worker that finished case `value` of task `task`
    ("done"), or one that ended with exit code `value` ("exit")."""

    kind: str
    task: int
    value: int


class Server:
    """The harness serving tasks in one sandbox: `folder` is the only one it can write, `workers` the most
    worker processes it will run at once (each counts against the sandbox's process limit), and `cases` the most
    cases one worker may run: the harness's CPU limit is per case, as when each case had a process of its own."""

    def __init__(self, binary: Path, folder: Path, sandbox: Sandbox, workers: int, cases: int = 1):
        self.binary, self.folder, self.sandbox, self.workers = binary, folder, sandbox, workers
        self.cases = max(cases, 1)
        self.process: subprocess.Popen | None = None
        self.not_started = ""  # why the built emulation did not even answer, when it did not
        self.closed = False  # the server and every worker are gone (their replies' pipe has ended)
        self._replies = -1
        self._pending = b""
        self._errors = None
        self._ids = itertools.count()

    def task_id(self) -> int:
        """A number for a new task, unique on this server."""
        return next(self._ids)

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self, timeout_s: float) -> int | None:
        """Starts the server; the tile size it answers with, or None (none defined, or no answer: not_started
        says why when it did not start)."""
        read_end, write_end = os.pipe()
        limits = replace(HARNESS_LIMITS, processes=HARNESS_LIMITS.processes + self.workers,
                         cpu_s=HARNESS_LIMITS.cpu_s * self.cases)
        confinement = Confinement(self.folder, limits, seccomp=True, readable=(self.binary,))
        self._errors = open(self.folder.parent / f"{self.folder.name}.stderr", "w+b")
        try:
            self.process = self.sandbox.popen([str(self.binary), "--serve", str(write_end)], confinement,
                                              stdin=subprocess.PIPE, stdout=None, stderr=self._errors,
                                              pass_fds=(write_end,), env={"PATH": "/usr/bin:/bin"})
        except (OSError, SandboxFailed) as error:
            self.not_started = f"the CPU emulation could not be started: {error}"
            os.close(read_end)
            return None
        finally:
            os.close(write_end)
        self._replies = read_end
        os.set_blocking(read_end, False)
        return self._hello(timeout_s)

    def _hello(self, timeout_s: float) -> int | None:
        ends = time.monotonic() + timeout_s
        while not self.closed and (left := ends - time.monotonic()) > 0:
            hello = next((reply for reply in self.replies(left) if reply.kind == "hello"), None)
            if hello is not None:
                return None if hello.value < 0 else hello.value
        if self.closed:
            self.process.wait()
            said = self.stderr_head()
            self.not_started = (f"the CPU emulation could not be started (exit code {self.process.returncode})"
                                + (f": {said}" if said else ""))
        return None

    def run(self, task: int, order: str, layout: str, launches: int, stdout: str, cases: list[str]) -> bool:
        """Task `task`: a worker runs each case line in turn (harness.cpp). False when the server is gone."""
        header = f"task {task} {order} {layout} {launches} {stdout} {len(cases)}\n"
        return self._send(header + "".join(line + "\n" for line in cases))

    def run_alone(self, order: str, layout: str, case: str, timeout_s: float) -> int | None:
        """One case, launched once by a worker of its own whose printf goes nowhere, waited for: the worker's exit
        code; None when it could not start or did not end within timeout_s (it is killed)."""
        task = self.task_id()
        if not self.run(task, order, layout, 1, "-", [case]):
            return None
        ends = time.monotonic() + timeout_s
        while not self.closed and (left := ends - time.monotonic()) > 0:
            ended = next((r for r in self.replies(left) if r.kind == "exit" and r.task == task), None)
            if ended is not None:
                return ended.value
        self.kill(task)
        return None

    def kill(self, task: int) -> None:
        self._send(f"kill {task}\n")

    def _send(self, text: str) -> bool:
        try:
            self.process.stdin.write(text.encode())
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def replies(self, timeout_s: float) -> list[Reply]:
        """What arrived within timeout_s: every whole line there is once the first data came (or none)."""
        if self.closed:
            return []
        ready, _, _ = select.select([self._replies], [], [], max(timeout_s, 0.0))
        found: list[Reply] = []
        for _ in range(READS_AT_ONCE if ready else 0):
            try:
                chunk = os.read(self._replies, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.closed = True
                break
            found += self._parsed(chunk)
        return found

    def _parsed(self, chunk: bytes) -> list[Reply]:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        if len(self._pending) > MAX_PENDING:
            self._pending = b""
        return [reply for reply in map(_reply, lines) if reply is not None]

    def stderr_head(self) -> str:
        self._errors.seek(0)
        return self._errors.read(2000).decode("utf-8", "replace").strip()

    def close(self) -> bytes:
        """Ends the server and its workers; what they wrote to stderr (bounded), for the log."""
        if self.process is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
            kill_group(self.process)
        if self._replies >= 0:
            os.close(self._replies)
            self._replies = -1
        said = b""
        if self._errors is not None:
            self._errors.seek(0)
            said = self._errors.read(STDERR_BYTES)
            self._errors.close()
        return said


def _reply(line: bytes) -> Reply | None:
    """A reply line as the harness writes it; None for anything else (student code shares its pipe)."""
    match = REPLY.fullmatch(line)
    if match is None or (match[1] == b"hello") != (match[3] is None) or (match[3] and match[2] == b"none"):
        return None
    if match[1] == b"hello":
        return Reply("hello", -1, -1 if match[2] == b"none" else int(match[2]))
    return Reply(match[1].decode(), int(match[2]), int(match[3]))
