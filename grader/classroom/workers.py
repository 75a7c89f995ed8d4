"""Grades students one by one, each in a worker process of its own: the batch's workers on this host (forked
from the batch's template, zygote.py), a cluster task on its worker's host and a service's job (each a
started `python -m grader.classroom.batch_worker`). Whatever becomes of a worker, its student gets a row: its
result, or a grader error with why, graded again by --resume.
"""
from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import replace

from ..cases import Case
from ..config import Config
from ..diagnose.groups import SanitizerGroups
from ..execute.confine.sandbox import ONE_BLAS_THREAD
from ..intake.intake import Entry
from ..pipeline import GPU, RunPlan, not_graded
from ..provenance import class_provenance
from ..result import GRADER_ERROR, Provenance, SubmissionResult

WORKER = "grader.classroom.batch_worker"
TEMPLATE = "grader.classroom.zygote"
TEMPLATE_STARTS = 3  # a template that keeps dying is given up: the rest of the batch starts its workers
TEMPLATE_ANSWER_S = 60.0  # its imports, then a fork: a template silent for longer is hung, and replaced


def emulator_share(graded_at_once: int) -> int:
    """The emulator workers each of so many grades at once may run: the host's cores, shared out (a batch's
    default, a student per core, runs each student's emulated cases one after another)."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, graded_at_once))


def _worker_environment() -> dict[str, str]:
    """A worker grades one student; the batch's parallelism is its workers. numpy's BLAS threads in each
    would only fight the students' compilers and the GPU's holder for the cores."""
    return {**os.environ, **ONE_BLAS_THREAD}


class Forked:
    """A worker forked by the template, seen from the batch: its pipes, and what the template says of it."""

    def __init__(self, template: Template, pid: int, pidfd: int, reply: socket.socket, stdin: int, stdout: int,
                 stderr: int):
        self.template, self.pid, self.pidfd, self.reply = template, pid, pidfd, reply
        self.stdin, self.stdout, self.stderr = os.fdopen(stdin, "wb"), os.fdopen(stdout, "rb"), os.fdopen(stderr, "rb")
        self.returncode: int | None = None

    def communicate(self, task: bytes) -> tuple[bytes, bytes]:
        """The task written, the worker's output and errors read to their end (as Popen.communicate)."""
        errors: list[bytes] = []
        reading = threading.Thread(target=lambda: errors.append(self.stderr.read()), daemon=True)
        reading.start()
        try:
            self.stdin.write(task)
            self.stdin.close()
        except BrokenPipeError:
            pass  # it died before reading: its status says how
        output = self.stdout.read()
        reading.join()
        return output, errors[0] if errors else b""

    def ended(self) -> bool:
        """Waits for the template's word on how the worker ended (returncode, as Popen's); False if the
        template died first (and the worker with it: die_with_parent)."""
        status = self.reply.recv(32)
        if not status:
            return False
        self.returncode = os.waitstatus_to_exitcode(int(status))
        return True

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> None:
        try:
            ended = select.select([self.pidfd], [], [], timeout)[0]
        except (OSError, ValueError):
            return  # closed meanwhile: its grade has read how it ended
        if not ended:
            raise subprocess.TimeoutExpired(WORKER, timeout)

    def close(self) -> None:
        for end in (self.stdin, self.stdout, self.stderr, self.reply):
            end.close()
        os.close(self.pidfd)


class Template:
    """The batch's template process: imports once what a grade imports, then forks a worker per student."""

    def __init__(self):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen([sys.executable, "-m", TEMPLATE, str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            env=_worker_environment())
        finally:
            theirs.close()
        self.sending = threading.Lock()
        self.warmed: tuple | None = None  # (config, cases, on_gpu) it was last asked to load for

    def warm(self, config: Config, cases: list[Case], on_gpu: bool) -> None:
        """Asks the template to load what each student's grade loads (zygote.warm), before its next fork; once
        per config and cases."""
        with self.sending:
            if self.warmed is not None and self.warmed[0] is config and self.warmed[1] is cases \
                    and self.warmed[2] == on_gpu:
                return
            self.warmed = (config, cases, on_gpu)
            try:
                self.control.send(b"warm" + pickle.dumps((config, cases, on_gpu)))
            except OSError:
                pass  # the template is gone: the next fork says so

    def fork(self, channel: socket.socket | None) -> Forked | None:
        """A fresh worker; None if the template is gone."""
        reply, their_reply = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        (stdin, their_stdin), (stdout, their_stdout), (stderr, their_stderr) = _pipe(), os.pipe(), os.pipe()
        given = [their_reply.fileno(), their_stdin, their_stdout, their_stderr, *_fds(channel)]
        reply.settimeout(TEMPLATE_ANSWER_S)
        try:
            with self.sending:
                socket.send_fds(self.control, [b"fork"], given)
            message, fds, _, _ = socket.recv_fds(reply, 32, 1)
            reply.settimeout(None)  # how the worker ended comes when it ends
        except OSError:  # TimeoutError among them
            message, fds = b"", []
        finally:
            their_reply.close()
            for fd in given[1:4]:
                os.close(fd)
        if not message or not fds:
            for end in (stdin, stdout, stderr, *fds):
                os.close(end)
            reply.close()
            return None
        return Forked(self, int(message), fds[0], reply, stdin, stdout, stderr)

    def stop(self) -> None:
        self.control.close()
        self.process.kill()  # its workers with it (die_with_parent)
        self.process.wait()


def _pipe() -> tuple[int, int]:
    """A pipe as (the batch's write end, the worker's read end)."""
    read, write = os.pipe()
    return write, read


class Workers:
    """Starts one worker per student (forked from a template where `forked`, else a started batch_worker)
    and turns whatever becomes of it into a result."""

    def __init__(self, groups: SanitizerGroups | None = None, forked: bool = False):
        self.running: set[subprocess.Popen | Forked] = set()
        self.stopping = False
        self.lock = threading.Lock()
        self.groups = groups
        self.forked = forked
        self.template: Template | None = None
        self.template_starts = 0
        if forked:  # started here, by the thread that lives as long as the batch: the template dies with its
            self._start_template()  # starter (PR_SET_PDEATHSIG), and it imports while the batch prepares
        self.made: tuple[Config, list[Case], Provenance] | None = None  # the run's provenance, for whom it was made
        self.making = threading.Lock()

    def run_provenance(self, config: Config, cases: list[Case]) -> Provenance:
        """What every student graded with this config and these cases is graded with, made once on this host (the
        one the workers grade on) and handed to each worker: not an `nvcc --version` and a hash of the grader's
        code in every student's process."""
        with self.making:
            if self.made is None or self.made[0] is not config or self.made[1] is not cases:
                self.made = (config, cases, class_provenance(config, cases))
            return self.made[2]

    def grade(self, entry: Entry, config: Config, cases: list[Case], plan: RunPlan) -> SubmissionResult:
        plan = replace(plan, provenance=self.run_provenance(config, cases))
        ours, theirs = socket.socketpair() if self.groups is not None else (None, None)
        if theirs is not None:
            plan = replace(plan, sanitizer_channel=theirs.fileno())
        task = pickle.dumps((entry.path, config, cases, plan))
        try:
            with self.lock:
                if self.stopping:
                    raise KeyboardInterrupt
                process = self._start(theirs, config, cases, plan)
                self.running.add(process)
        except BaseException:
            if ours is not None:
                ours.close()
            raise
        finally:
            if theirs is not None:
                theirs.close()  # the worker holds its end now; its exit closes the channel
        if ours is not None:
            threading.Thread(target=self.groups.serve, args=(ours,), daemon=True).start()
        try:
            output, errors = process.communicate(task)
            lost = isinstance(process, Forked) and not process.ended()
        finally:
            with self.lock:
                self.running.discard(process)
            if isinstance(process, Forked):
                process.close()
        if lost:  # the template died, and its worker with it: not this student's doing, so graded afresh
            with self.lock:
                self._template_died(process.template)
            return self.grade(entry, config, cases, plan)
        if process.returncode == 0:
            try:
                return SubmissionResult.from_dict(json.loads(output))
            except (ValueError, TypeError):
                pass
        return _worker_died(entry, config, cases, process.returncode, errors.decode("utf-8", "replace"))

    def _start(self, channel: socket.socket | None, config: Config, cases: list[Case],
               plan: RunPlan) -> subprocess.Popen | Forked:
        """A worker forked from the template where there is one, else a started batch_worker."""
        if self.forked and self.template_starts < TEMPLATE_STARTS:
            if self.template is None:
                self._start_template()
            self.template.warm(config, cases, plan.backend == GPU)
            forked = self.template.fork(channel)
            if forked is not None:
                return forked
            self._template_died(self.template)
        return subprocess.Popen([sys.executable, "-m", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_worker_environment(), pass_fds=_fds(channel))

    def _start_template(self) -> None:
        self.template_starts += 1
        self.template = Template()

    def _template_died(self, template: Template) -> None:
        """The next student gets a new template (once another thread's has not already)."""
        if self.template is template:
            template.stop()
            self.template = None

    def stop(self, wait_s: float = 10.0) -> None:
        """Kills every worker and waits (at most `wait_s`) until they have ended, so that what they leave in the
        temporary root has no owner left and is cleared (leftovers.Sweeper)."""
        with self.lock:
            self.stopping = True
            stopped = list(self.running)
            for process in stopped:
                process.kill()
        for process in stopped:
            try:
                process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        self.close()

    def close(self) -> None:
        """Ends the template, once no student is left for it."""
        with self.lock:
            if self.template is not None:
                self.template.stop()
                self.template = None


def _fds(channel: socket.socket | None) -> tuple[int, ...]:
    return () if channel is None else (channel.fileno(),)


def _worker_died(entry: Entry, config: Config, cases: list[Case], returncode: int, errors: str) -> SubmissionResult:
    how = (f"was killed by signal {signal.Signals(-returncode).name}" if returncode < 0
           else f"ended with exit code {returncode}")
    reason = f"grader error: the process grading this submission {how}; it will be graded again with --resume"
    result = not_graded(entry.path, config, cases, reason, GRADER_ERROR)
    result.log = errors[-(64 << 10):]
    return result
