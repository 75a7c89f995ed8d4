"""Grading beyond one host: with `grade batch --cluster ADDRESS`, each submission is a Dask task.

The client (the batch) keeps everything it keeps today: intake, the fingerprints, every result file,
written the moment a task's result arrives, once per student. A task carries what grading needs that
the worker's host does not have (the kernel's bytes, the reference's text, the config and cases) and
runs on a worker started by `grade worker`: there the submission is graded exactly as a local batch
grades it, in a batch_worker process of that host, the student's code in that host's sandbox, on the
GPU the worker was given. A worker that dies mid-task costs nothing: Dask runs the task again elsewhere,
and the client stores the one result that comes back.
"""
from __future__ import annotations

import copy
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cases import Case
from ..config import Config
from ..errors import UsageError
from ..execute.confine.proc import PR_SET_PDEATHSIG
from ..intake.intake import Entry
from ..leftovers import TASK, owned_scratch
from ..pipeline import GPU, RunPlan, not_graded
from ..result import GRADER_ERROR, SubmissionResult
from .cluster_tls import ROLE_GATE
from .workers import Workers

SLOTS = "GPU"  # the Dask resource a GPU worker offers: how many submissions it grades at once
WORKER_CACHE = "SGEMM_GRADER_WORKER_CACHE"  # where a worker keeps its compile cache and GPU turns
CONNECT_TIMEOUT = "30s"  # for reaching the scheduler, which may be on another host
STOP_GRACE_S = 30  # for a Dask worker to leave the scheduler when `grade worker` is stopped


@dataclass
class RemoteTask:
    key: str
    kernel: bytes
    reference: str
    config: Config
    cases: list[Case]
    backend: str | None
    sanitize: bool
    note: str
    skip_reason: str
    headers: dict[str, bytes] = field(default_factory=dict)  # handed in beside the kernel (config's names)
    profile: bool = False  # grade --profile: Nsight Compute on the worker's GPU (issue 26)
    sanitize_always: bool = False  # --sanitize: the diagnosis on every kernel, not only where it is needed


def remote_task(entry: Entry, config: Config, cases: list[Case], plan: RunPlan) -> RemoteTask:
    return RemoteTask(entry.key, entry.kernel.read_bytes(), config.reference_path.read_text(encoding="utf-8"),
                      config, cases, plan.backend, plan.sanitize, plan.note, plan.skip_reason,
                      entry.headers(config.compile.handed_in_headers), plan.profile, plan.sanitize_always)


def task_resources(plan: RunPlan) -> dict[str, int]:
    """A GPU submission needs one of a GPU worker's slots; a CPU one runs on any worker."""
    return {SLOTS: 1} if plan.backend == GPU else {}


def grade_task(task: RemoteTask) -> dict:
    """On a Dask worker: the submission graded in a batch_worker process of this host, with this host's
    sandbox, GPU and caches; the result as JSON-ready data (the log included) for the client to store."""
    config = copy.deepcopy(task.config)
    config.compile.cache_dir = os.environ.get(WORKER_CACHE, "~/.cache/sgemm-grader")
    with owned_scratch(TASK) as work:
        folder = Path(work, "submissions", task.key)
        folder.mkdir(parents=True)
        for name, data in {**task.headers, "kernel.cu": task.kernel}.items():
            (folder / name).write_bytes(data)
        reference = Path(work, "reference.cu")
        reference.write_text(task.reference, encoding="utf-8")
        config.reference, config.source = str(reference), ""
        plan = RunPlan(task.backend, skip_reason=task.skip_reason, note=task.note, sanitize=task.sanitize,
                       sanitize_always=task.sanitize_always, profile=task.profile,
                       emulator_workers=1)  # a worker grades a student per slot, as a batch does per core
        entry = Entry(task.key, "", "", folder, task.key, "kernel.cu")
        return Workers().grade(entry, config, task.cases, plan).to_dict(with_log=True)


def task_result(future, entry: Entry, config: Config, cases: list[Case], again: str) -> SubmissionResult:
    """A task's result; if it failed however often Dask retried it, a grader-error row with the reason and
    `again` (how it gets graded again)."""
    try:
        return SubmissionResult.from_dict(future.result())
    except Exception as error:  # noqa: BLE001 - whatever became of the task, the student gets a row
        reason = (f"grader error: the cluster could not grade this submission ({type(error).__name__}: "
                  f"{str(error)[:200]}); {again}")
        return not_graded(entry.path, config, cases, reason, GRADER_ERROR)


class WorkerWatch:
    """A cluster batch's watch on its workers: a batch whose workers are all gone says so, waits `wait_s`
    for one to join (again), and then stops rather than wait for ever."""

    poll_s = 1.0  # how often it asks, while no result arrives

    def __init__(self, client, address: str, wait_s: float, say, waited: bool = False):
        """`waited`: no worker joined in the wait_s before the batch began (cluster_gpus), so it stops at once."""
        self.client, self.address, self.wait_s, self.say = client, address, wait_s, say
        self.gone_since: float | None = time.monotonic() - wait_s if waited else None

    def gone_for_good(self) -> bool:
        """Whether no worker has been connected for wait_s."""
        if self._workers():
            if self.gone_since is not None:
                self.say("a worker joined: grading goes on")
            self.gone_since = None
            return False
        if self.gone_since is None:
            self.gone_since = time.monotonic()
            self.say(f"no worker is connected to the scheduler at {self.address}: waiting up to {self.wait_s:g} s "
                     f"for one (`grade worker --scheduler {self.address}` on a grading host), then stopping")
        return time.monotonic() - self.gone_since >= self.wait_s

    def _workers(self) -> int:
        try:
            return len(self.client.scheduler_info(n_workers=-1)["workers"])
        except (OSError, TimeoutError):  # the scheduler itself is gone: no worker can grade either
            return 0

    def reason(self) -> str:
        return (f"grader error: no worker of the cluster at {self.address} was connected for {self.wait_s:g} s, so "
                "the batch stopped before this submission was graded; it will be graded again with --resume")

    def stopped(self) -> str:
        return (f"no worker of the cluster at {self.address} was connected for {self.wait_s:g} s (--worker-wait): "
                "the batch stopped")


def connect(address: str, security):
    """A Dask client of the scheduler at `address` (the batch's, the service's and the GPU count's one way
    in); a UsageError naming the address where Dask is missing or the scheduler cannot be reached."""
    try:
        from distributed import Client  # only a class graded on a cluster needs Dask
    except ImportError:
        raise UsageError("--cluster needs Dask's distributed: pip install -e '.[cluster]'") from None
    try:
        return Client(address, security=security, timeout=CONNECT_TIMEOUT)
    except (OSError, ValueError) as error:  # unreachable, refused, a malformed address, a TLS mismatch
        raise UsageError(f"--cluster {address}: cannot reach the scheduler ({error})") from None


def no_worker_words(address: str, wait_s: float) -> str:
    return (f"--cluster {address}: no worker joined in {wait_s:g} s (start `grade worker --scheduler {address} "
            "--certs DIR` on a grading host)")


def cluster_gpus(address: str, security, wait_s: float = 60.0) -> int | None:
    """How many GPU slots the cluster's workers offer, once at least one worker has joined (None: none joined in
    wait_s). The batch or service may run on a host without a GPU: the workers' GPUs decide the backend."""
    with connect(address, security) as client:
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            return None
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        return int(sum(worker.get("resources", {}).get(SLOTS, 0) for worker in workers))


def worker_commands(scheduler: str, gpus: list[int], slots: int, cores: int, tls: list[str],
                    listen: str = "", local: Path | None = None) -> list[tuple[list[str], dict]]:
    """One Dask worker per local GPU (that GPU alone visible to it, `slots` submissions at once, offered as
    the GPU resource), or one worker for the CPU emulator when the host has none. Its HTTP pages (health,
    metrics; no authentication) are for this host only. With TLS, the worker and its nanny answer each
    peer as its certificate's role allows (cluster_preload.py); plain TCP (--insecure) has no roles. Dask's
    own files go in `local` (`grade worker`'s folder, which it removes), not in a shared scratch space."""
    gate = ["--preload", ROLE_GATE, "--preload-nanny", ROLE_GATE] if tls else []
    base = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--nworkers", "1", "--no-dashboard",
            "--dashboard-address", "127.0.0.1:0", *(["--host", listen] if listen else []), *tls, *gate,
            *(["--local-directory", str(local)] if local else [])]
    if not gpus:
        return [([*base, "--nthreads", str(cores), "--name", f"{socket.gethostname()}-cpu"], {})]
    return [([*base, "--nthreads", str(slots), "--resources", f"{SLOTS}={slots}",
              "--name", f"{socket.gethostname()}-gpu{gpu}"], {"CUDA_VISIBLE_DEVICES": str(gpu)}) for gpu in gpus]


def _stop(signum, frame):
    raise KeyboardInterrupt


def _die_with_parent(parent: int):
    """In the child, before exec: the kernel SIGKILLs it when `grade worker` dies, even by kill -9 (the
    death signal survives exec). Dask's nanny in that child takes its worker process with it (the worker
    exits when its pipe to the nanny closes), and the worker's grading processes die with the worker."""
    def arm() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # `grade worker` died before the request took effect
            os._exit(1)

    return arm


def run_until_stopped(commands: list[tuple[list[str], dict]]) -> int:
    """`grade worker`'s Dask workers, `grade scheduler`'s scheduler: run until Ctrl-C, SIGTERM or one of them
    ends; none outlives this process."""
    signal.signal(signal.SIGTERM, _stop)  # a service manager's stop takes the workers with it
    processes: list[subprocess.Popen] = []
    try:
        for command, env in commands:
            processes.append(subprocess.Popen(command, env={**os.environ, **env},
                                              preexec_fn=_die_with_parent(os.getpid())))
        while all(process.poll() is None for process in processes):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            process.terminate()  # Dask's worker closes gracefully: it leaves the scheduler and ends its worker
        for process in processes:
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return 0
