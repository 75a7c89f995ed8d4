"""The CPU child: builds the emulation of one submission and runs every case under two thread orders.

Runs as `python -m grader.execute.cpu JOB_FILE EVENT_FD CONTROL_FD` (__main__.py), with the same events
as the GPU child, and like it reads JOB_FILE once the parent says on CONTROL_FD that it is written. It is the
grader's own code and runs unconfined; everything that runs student code
(g++ on their source, the harness with their kernel linked in, static initializers included) runs in the
job's sandbox: the harness as one server for every case, which forks a worker per task (server.py), each
case's files in a folder named by its index (a hidden case's name never reaches student code). What the
harness leaves behind is read as untrusted: plain files only, bounded, every report checked against the
protocol.

A large case (its spec's `sample`) runs only its sampled blocks (sampling.py: every edge block, a seeded sample of
the interior ones, any extra ones asked for), listed in a file beside its inputs, in the forward order alone unless
the kernel has state; the rest of C keeps its poison, and the parent judges the sampled tiles alone. Without state,
the blocks of such a case, and of a whole case of many blocks (in both thread orders), are cut into parts run by
workers side by side where slots are left for them, and the case told as one worker running them in turn would
have told it (schedule.py, case_files.py), or run again by one worker per order where that cannot be vouched for.

Each case runs in two thread orders: threads in forward order with A, B and C ending at an inaccessible page,
and in reversed order with them starting after one, so an access just past either end faults in one of the
two. A race shows up as a shadow-memory report, or as outputs that differ between the orders. Which worker
runs what, how often and how many at once: schedule.py (a kernel with state runs `launches_per_case` launches
per order, its cases in job order, as the GPU child does; one without runs each case once per order, the cases
side by side). Each distinct output of a case's forward launches is kept as the GPU child keeps its own.

With `job.access_profile`, once the cases ran, the kernel and the reference each run once more on the
profile shape (access_profile.py), counting each warp's global sectors and shared-memory bank conflicts per
source line: the `access_profile` event, advice only. The reference's profile is built and run beside the
cases (a thread) and kept in the cache by the content of its build.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from ...contract import REFERENCE, KernelContract
from ...judge.input_records import CACHED, GENERATED
from ..confine.proc import die_with_parent
from ..confine.sandbox import HARNESS_LIMITS, Sandbox, SandboxFailed
from ..job import Job
from ..protocol import Channel, await_job, gpu_hung_notice, harness_report
from .access_profile import access_records, profile_size
from .build import Build, build
from .compiler import compiler, compiler_version
from .schedule import Schedule
from .server import Server

if TYPE_CHECKING:
    from .case_files import Cases

COMPILE_TIMEOUT_S = 120  # the parent's compile deadline normally ends us first
CASE_FILES = f"{__package__}.case_files"  # numpy's import is most of it: made while the student's unit builds


def main(argv: list[str]) -> int:
    die_with_parent()
    threading.Thread(target=import_module, args=(CASE_FILES,), daemon=True).start()
    await_job(int(argv[3]))  # started before its job may be ready (spawn.py): numpy imports meanwhile
    job, channel = Job.load(Path(argv[1]), forget=True), Channel(int(argv[2]))
    sandbox = Sandbox(**job.sandbox)
    channel.send("phase", phase="startup")
    channel.send("phase", phase="compile")
    workdir = Path(job.workdir)
    try:
        built = build(job.original_source, job.contract, job.tile, Path(job.cache_dir), workdir, sandbox,
                      COMPILE_TIMEOUT_S, job.headers)
    except (OSError, SandboxFailed) as error:  # the compiler could not be run or read at all: the grader's
        built = Build(None, f"the C++ compiler could not be run: {error}")
    if built.binary is None:
        channel.send("compile_error", target="student", message=built.message, emulator=True, log=built.log)
    else:
        cases = import_module(CASE_FILES).Cases(job, workdir / "run")
        server = Server(readable_copy(built.binary, workdir / "bin"), cases.folder, sandbox, slots(job),
                        len(job.cases))
        try:
            _run(channel, argv, job, server, cases, built)
        finally:
            sys.stderr.buffer.write(server.close())
    channel.send("done")
    return 0


def _run(channel: Channel, argv: list[str], job: Job, server: Server, cases: Cases, built: Build) -> None:
    tile = server.start(HARNESS_LIMITS.cpu_s)
    if server.not_started:  # no answer at all: the emulation could not be started (the grader's to fix)
        channel.send("compile_error", target="student", message=server.not_started, emulator=True,
                     log=server.not_started)
        return
    # compiled_ahead: the student's unit was built when this driver came to build it (by the parent, or before)
    channel.send("compiled", device=f"CPU emulation ({compiler_version(compiler())})", arch="cpu",
                 tile_size=tile, compiled_ahead=not built.compiled)
    if tile not in job.contract.tile_sizes:
        return
    answers = ParentLines(open(int(argv[3])))
    with ThreadPoolExecutor(1) as pool:
        reference = pool.submit(reference_profile, job, server.sandbox, profile_size(tile)) \
            if job.access_profile else None
        if _run_cases(channel, answers, server, cases, tile, built.state) and reference is not None:
            _send_profile(channel, answers, server, cases, tile, reference)


def slots(job: Job) -> int:
    """How many workers run at once: the job's bound, else one per core this process may use."""
    return job.parallel_cases or len(os.sched_getaffinity(0))


def readable_copy(binary: Path, folder: Path) -> Path:
    """A copy of the built emulation the sandbox can read but not change (the cache is beyond its reach)."""
    folder.mkdir(mode=0o755, exist_ok=True)
    copy = folder / "harness"
    shutil.copyfile(binary, copy)
    copy.chmod(0o755)
    return copy


class ParentLines:
    """The parent's lines on the control pipe, read on a thread of their own: the answers to this driver's requests
    in order, and, beside a GPU run, the cases the GPU hung in as they come (hang_notices.py)."""

    def __init__(self, stream):
        self._answers: queue.Queue[str] = queue.Queue()
        self._hung: dict[str, float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            notice = gpu_hung_notice(line.strip())
            if notice is None:
                self._answers.put(line.strip())
            else:
                with self._lock:
                    self._hung[notice[0]] = notice[1]
        self._answers.put("")  # the parent is gone: no answer is "go"

    def answer(self) -> str:
        """The parent's answer to the request just sent ("" once it can give none)."""
        answer = self._answers.get()
        if not answer:
            self._answers.put("")  # for any later request too
        return answer

    def hung_on_gpu(self) -> dict[str, float]:
        with self._lock:
            return dict(self._hung)


def _run_cases(channel: Channel, answers: ParentLines, server: Server, cases: Cases, tile: int,
               state: list[str] | None) -> bool:
    """Every case (one turn on the device for all of them, as the GPU child takes); False when the turn was
    refused or a case hung (the profile's launch would hang too, for the profile phase's whole limit)."""
    job = cases.job
    if not job.cases:
        return True
    cached = dict(zip((spec.name for spec in job.cases), cases.write_inputs()))  # host work, before the turn
    channel.send("phase", phase="case", case=job.cases[0].name)
    if not _turn(channel, answers):
        return False
    stateful = state != []  # unknown counts as state
    launches = job.launches_per_case if stateful else 1
    limit_s = job.case_s or HARNESS_LIMITS.cpu_s
    # A sampled large case launched several times in one worker (a kernel with state) has the limit per launch: its
    # blocks take seconds each launch, where a whole small case's take milliseconds
    per_launch = [launches if spec.sample else 1 for spec in job.cases]
    limits = [limit_s * times for times in per_launch]
    positions = {spec.name: index for index, spec in enumerate(job.cases)}

    def hung_on_gpu() -> dict[int, float]:
        """A case the GPU hung in gets the seconds it had there (per launch, as its own limit has them)."""
        return {positions[name]: seconds * per_launch[positions[name]]
                for name, seconds in answers.hung_on_gpu().items() if name in positions}

    # A sampled large case runs its blocks in the forward order alone: its blocks cost seconds where a small case's
    # cost milliseconds, and the small cases run both orders of the same code (a kernel with state: both, its
    # cases in one worker per order); without state its blocks, and a whole case's of many blocks, are cut into
    # parts that run side by side (schedule.py), told as one worker's run of them (case_files.py); the costliest
    # tasks start first, the cases told in job order all the same
    schedule = Schedule(server, len(job.cases), stateful, slots(job), limit_s, job.max_restarts + 1,
                        lambda task: cases.start(server, task, tile, launches), limits, cases.sampled(),
                        cases.splits(tile), caps=hung_on_gpu, costs=cases.multiply_adds(tile),
                        ahead=lambda index, ends: cases.read_ahead(index, ends, launches))
    hung = False
    for event in case_events(schedule, cases, launches, limits,
                             lambda index: channel.send("phase", phase="case", case=job.cases[index].name)):
        hung = hung or event.get("problem", {}).get("event") == "timeout"
        if event["event"] == "case":  # where its A and B came from, as the GPU child tells it
            event["inputs"] = CACHED if cached[event["case"]] else GENERATED
        channel.send(**event)
    cases.print_outputs()
    return not hung


def case_events(schedule: Schedule, cases: Cases, launches: int, limits: list[float],
                heartbeat: Callable[[int], None]) -> Iterator[dict]:
    """Each case's event, in job order (a split case whose parts' merge would not be what one worker gives is
    run again by one worker per order first)."""
    for index, ends in schedule.cases(heartbeat):
        event = cases.event(index, ends, launches, limits[index])
        if event is None:
            schedule.run_whole(index)
        else:
            yield event


def _send_profile(channel: Channel, answers: ParentLines, server: Server, cases: Cases, tile: int,
                  reference: Future) -> None:
    """The student's and the reference's access profiles on one shape; nothing when either launch faulted,
    raced or did not finish (no advice from a launch that went wrong)."""
    # A phase of its own, with the reference's build in it: under load that wait ran past the last case's
    # limit, and the advice was lost.
    channel.send("phase", phase="profile")
    size, started = profile_size(tile), time.perf_counter()
    try:
        reference_tile, theirs = reference.result()
    except Exception:  # the grader's own bug: no advice, and the trace in the child's log, never a lost grade
        traceback.print_exc()
        reference_tile, theirs = None, None
    if theirs is None or not _turn(channel, answers):
        return
    case_files = import_module(CASE_FILES)
    student = case_files.profile(server, cases.folder / case_files.PROFILE, size, tile, cases.job.contract)
    if student is not None:
        channel.send("access_profile", size=size, student=student, reference=theirs, reference_tile=reference_tile,
                     seconds=round(time.perf_counter() - started, 3))


def reference_profile(job: Job, sandbox: Sandbox, size: int) -> tuple[int | None, list[dict] | None]:
    """The reference kernel's tile size and access profile on size³, launched as the GPU child launches it
    (REFERENCE); cached by its build's content and the size (the tile as the file's first line)."""
    workdir = Path(job.workdir, "reference")
    workdir.mkdir(parents=True, exist_ok=True)
    built = build(job.reference_original, REFERENCE, REFERENCE.tile_source(), Path(job.cache_dir), workdir,
                  sandbox, COMPILE_TIMEOUT_S)
    if built.binary is None:
        return None, None
    cached = Path(job.cache_dir, "cpu-profile", f"{built.binary.name}-{size}-tiled.json")
    try:
        tile, *lines = cached.read_text().splitlines()
        records = access_records([harness_report(line) for line in lines])
        if records is not None and tile.isdigit():
            return int(tile), records
    except (OSError, ValueError):
        pass
    tile, records = profile_alone(built.binary, workdir, sandbox, REFERENCE, size)
    if records is not None and tile is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_name(f"{cached.name}.{time.monotonic_ns()}.tmp")
        temporary.write_text(f"{tile}\n" + "".join(
            json.dumps(r) + "\n" for r in [*records, {"event": "done", "a_changed": False, "b_changed": False,
                                                     "races": 0}]))
        temporary.replace(cached)
    return tile, records


def profile_alone(binary: Path, workdir: Path, sandbox: Sandbox, contract: KernelContract,
                  size: int | None = None) -> tuple[int | None, list[dict] | None]:
    """A built emulation's tile size and its access records on size³ (by default the tile's profile shape), in a
    server of its own; (None, None) when it did not start or defines no tile size."""
    case_files = import_module(CASE_FILES)
    folder = workdir / "run"
    (folder / case_files.PROFILE).mkdir(parents=True, exist_ok=True)
    server = Server(readable_copy(binary, workdir / "bin"), folder, sandbox, 1)
    try:
        tile = server.start(HARNESS_LIMITS.cpu_s)
        if tile is None or tile <= 0:
            return tile, None
        return tile, case_files.profile(server, folder / case_files.PROFILE, size or profile_size(tile), tile,
                                        contract)
    finally:
        server.close()


def _turn(channel: Channel, answers: ParentLines) -> bool:
    """The cases run in a turn on the device, like a GPU run's: a host busy timing one kernel is not loaded
    with emulation at the same time, and the wait for the turn is not the student's time."""
    channel.send("await_device")
    return answers.answer() == "go"


