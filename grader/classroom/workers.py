"""Grades students one by one, each in a worker process of its own (`python -m grader.classroom.batch_worker`):
the batch's workers on this host, a cluster task on its worker's host, a service's job. Whatever becomes of a
worker, its student gets a row: its result, or a grader error with why, graded again by --resume.
"""
from __future__ import annotations

import json
import os
import pickle
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
from ..pipeline import RunPlan, not_graded
from ..provenance import class_provenance
from ..result import GRADER_ERROR, Provenance, SubmissionResult

WORKER = "grader.classroom.batch_worker"


def emulator_share(graded_at_once: int) -> int:
    """The emulator workers each of so many grades at once may run: the host's cores, shared out (a batch's
    default, a student per core, runs each student's emulated cases one after another)."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, graded_at_once))


def _worker_environment() -> dict[str, str]:
    """A worker grades one student; the batch's parallelism is its workers. numpy's BLAS threads in each
    would only fight the students' compilers and the GPU's holder for the cores."""
    return {**os.environ, **ONE_BLAS_THREAD}


class Workers:
    """Starts one batch_worker per student and turns whatever becomes of it into a result."""

    def __init__(self, groups: SanitizerGroups | None = None):
        self.running: set[subprocess.Popen] = set()
        self.stopping = False
        self.lock = threading.Lock()
        self.groups = groups
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
                process = subprocess.Popen([sys.executable, "-m", WORKER], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           env=_worker_environment(), pass_fds=_fds(theirs))
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
        finally:
            with self.lock:
                self.running.discard(process)
        if process.returncode == 0:
            try:
                return SubmissionResult.from_dict(json.loads(output))
            except (ValueError, TypeError):
                pass
        return _worker_died(entry, config, cases, process.returncode, errors.decode("utf-8", "replace"))

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


def _fds(channel: socket.socket | None) -> tuple[int, ...]:
    return () if channel is None else (channel.fileno(),)


def _worker_died(entry: Entry, config: Config, cases: list[Case], returncode: int, errors: str) -> SubmissionResult:
    how = (f"was killed by signal {signal.Signals(-returncode).name}" if returncode < 0
           else f"ended with exit code {returncode}")
    reason = f"grader error: the process grading this submission {how}; it will be graded again with --resume"
    result = not_graded(entry.path, config, cases, reason, GRADER_ERROR)
    result.log = errors[-(64 << 10):]
    return result
