"""The CPU child: builds the emulation of one submission and runs every case under two thread orders.

Runs as `python -m grader.execute.cpu JOB_FILE EVENT_FD CONTROL_FD` (__main__.py), with the same events
as the GPU child. It is the grader's own code and runs unconfined; everything that runs student code
(g++ on their source, the harness with their kernel linked in, `--tile` included, since static
initializers run first) runs in the job's sandbox, with a folder per case named by its index (a hidden
case's name never reaches student code). What the harness leaves behind is read as untrusted: plain
files only, bounded, every report checked against the protocol.

Each case runs twice, at the same time, in two processes the harness forks in one sandbox: threads in
forward order with A, B and C ending at an inaccessible page, and in reversed order with them starting
after one, so an access just past either end faults in one of the two. A race shows up as a shadow-memory report, or
as outputs that differ between the orders.

With `job.access_profile`, once the cases ran, the kernel and the reference each run once more on the
profile shape (access_profile.py), counting each warp's global sectors and shared-memory bank conflicts per
source line: the `access_profile` event, advice only. The reference's profile is built and run beside the
cases (a thread) and kept in the cache by the content of its build.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...contract import REFERENCE, KernelContract
from ...judge.inputs import guarded_c, make_inputs
from ...judge.layout import GUARD_BEFORE
from ..job import CaseSpec, Job
from ..proc import die_with_parent
from ..protocol import Channel, harness_report, read_untrusted
from ..sandbox import HARNESS_LIMITS, Confinement, Sandbox, SandboxFailed
from .access_profile import PROFILE_SEED, access_records, profile_size
from .build import Build, build, compiler, compiler_version

# (thread order, where the buffers sit against their guard pages)
SCHEDULES = (("forward", "end"), ("reversed", "start"))
PROBLEMS = ("fault", "divergence", "warp_divergence")
REPORT_BYTES = 1 << 20
COMPILE_TIMEOUT_S = 120  # the parent's compile deadline normally ends us first


def main(argv: list[str]) -> int:
    die_with_parent()
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
        channel.send("done")
        return 0
    harness = Harness(built.binary, job, sandbox)
    tile = harness.tile_size()
    if harness.not_started:  # no answer at all: the emulation could not be started (the grader's to fix)
        channel.send("compile_error", target="student", message=harness.not_started, emulator=True,
                     log=harness.not_started)
        channel.send("done")
        return 0
    channel.send("compiled", device=f"CPU emulation ({compiler_version(compiler())})", arch="cpu",
                 tile_size=tile)
    if tile in job.contract.tile_sizes:
        answers = open(int(argv[3]))
        with ThreadPoolExecutor(1) as pool:
            reference = pool.submit(reference_profile, job, sandbox, profile_size(tile)) if job.access_profile else None
            if _run_cases(channel, answers, harness, job, tile) and reference is not None:
                _send_profile(channel, answers, harness, tile, reference)
    channel.send("done")
    return 0


def _run_cases(channel: Channel, answers, harness: Harness, job: Job, tile: int) -> bool:
    """Every case, each in its turn; False when a turn was refused."""
    for index, spec in enumerate(job.cases):
        channel.send("phase", phase="case", case=spec.name)
        if not _turn(channel, answers):
            return False
        channel.send(**harness.run_case(spec, index, tile))
    return True


def _send_profile(channel: Channel, answers, harness: Harness, tile: int, reference: Future) -> None:
    """The student's and the reference's access profiles on one shape; nothing when either launch faulted,
    raced or did not finish (no advice from a launch that went wrong)."""
    # A phase of its own, with the reference's build in it: under load that wait ran past the last case's
    # limit, and the advice was lost.
    channel.send("phase", phase="profile")
    size, started = profile_size(tile), time.perf_counter()
    try:
        theirs = reference.result()
    except Exception:  # the grader's own bug: no advice, and the trace in the child's log, never a lost grade
        traceback.print_exc()
        theirs = None
    if theirs is None or not _turn(channel, answers):
        return
    student = harness.profile(size, tile)
    if student is not None:
        channel.send("access_profile", size=size, student=student, reference=theirs,
                     seconds=round(time.perf_counter() - started, 3))


def reference_profile(job: Job, sandbox: Sandbox, size: int) -> list[dict] | None:
    """The reference kernel's access profile on size³, launched as the GPU child launches it (REFERENCE);
    cached by its build's content and the size."""
    workdir = Path(job.workdir, "reference")
    workdir.mkdir(parents=True, exist_ok=True)
    built = build(job.reference_original, REFERENCE, REFERENCE.tile_source(), Path(job.cache_dir), workdir,
                  sandbox, COMPILE_TIMEOUT_S)
    if built.binary is None:
        return None
    cached = Path(job.cache_dir, "cpu-profile", f"{built.binary.name}-{size}.json")
    try:
        records = access_records([harness_report(line) for line in cached.read_text().splitlines()])
        if records is not None:
            return records
    except OSError:
        pass
    harness = Harness(built.binary, job, sandbox, REFERENCE, "reference-bin")
    tile = harness.tile_size()
    records = harness.profile(size, tile) if tile else None
    if records is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_name(f"{cached.name}.{time.monotonic_ns()}.tmp")
        temporary.write_text("".join(json.dumps(r) + "\n" for r in [*records, {"event": "done", "a_changed": False,
                                                                               "b_changed": False, "races": 0}]))
        temporary.replace(cached)
    return records


def _turn(channel: Channel, answers) -> bool:
    """Each case runs in a turn on the device, like a GPU run's: a host busy timing one kernel is not
    loaded with emulation at the same time, and the wait for the turn is not the student's time."""
    channel.send("await_device")
    return answers.readline().strip() == "go"


class Harness:
    """The built emulation, run in the sandbox: a copy the sandbox can read but not change."""

    def __init__(self, binary: Path, job: Job, sandbox: Sandbox, contract: KernelContract | None = None,
                 name: str = "bin"):
        workdir = Path(job.workdir)
        self.output_path = lambda case: job.output_path(case, "student")
        folder = workdir / name
        folder.mkdir(mode=0o755, exist_ok=True)
        self.binary, self.workdir, self.sandbox = folder / "harness", workdir, sandbox
        self.contract, self.name = contract or job.contract, name
        self.not_started = ""  # why the built emulation did not even answer --tile, when it did not
        shutil.copyfile(binary, self.binary)
        self.binary.chmod(0o755)

    def start(self, folder: Path, argv: list[str], stdout, stderr=None) -> subprocess.Popen:
        confinement = Confinement(folder, HARNESS_LIMITS, seccomp=True, readable=(self.binary,))
        return self.sandbox.popen([str(self.binary), *argv], confinement, stdin=subprocess.DEVNULL, stdout=stdout,
                                  stderr=stderr, env={"PATH": "/usr/bin:/bin"})

    def tile_size(self) -> int | None:
        folder = self.workdir / "tile"
        try:
            process = self.start(folder, ["--tile"], subprocess.PIPE, subprocess.PIPE)
        except (OSError, SandboxFailed) as error:
            self.not_started = f"the CPU emulation could not be started: {error}"
            return None
        try:
            answer, said = process.communicate(timeout=HARNESS_LIMITS.cpu_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return None
        answer = answer[:64].decode("ascii", "replace").strip()
        if not answer and process.returncode != 0:
            said = said[:2000].decode("utf-8", "replace").strip()
            self.not_started = (f"the CPU emulation could not be started (exit code {process.returncode})"
                                + (f": {said}" if said else ""))
        return int(answer) if answer.lstrip("-").isdigit() and len(answer) < 10 else None

    def run_case(self, spec: CaseSpec, index: int, tile: int) -> dict:
        folder = self.workdir / f"case{index}"
        folder.mkdir(parents=True, exist_ok=True)
        a, b = make_inputs(spec.m, spec.n, spec.k, spec.seed, spec.distribution)
        c = guarded_c(spec.m, spec.n)
        for name, array in (("a", a), ("b", b), ("c", c)):
            array.tofile(folder / f"{name}.bin")
        started = time.perf_counter()
        process = self._start_both(folder, spec, tile, c.size)
        process.wait()
        seconds = time.perf_counter() - started
        reports = {schedule: _events(folder / f"report-{schedule}.jsonl") for schedule, _ in SCHEDULES}

        for schedule, events in reports.items():
            returncode = _exit_code(events, process.returncode)
            problem = next((e for e in events if e["event"] in PROBLEMS), None)
            finished = returncode == 0 and any(e["event"] == "done" for e in events)
            if problem is None and not finished:
                problem = {"event": "fault", "what": "crashed", "returncode": returncode}
            if problem is not None:
                return {"event": "case_error", "case": spec.name, "schedule": schedule, "problem": problem}
        try:
            outputs = {schedule: np.frombuffer(read_untrusted(folder / f"out-{schedule}.bin", c.nbytes), np.float32)
                       for schedule, _ in SCHEDULES}
        except OSError:
            return {"event": "case_error", "case": spec.name, "schedule": "forward",
                    "problem": {"event": "fault", "what": "crashed", "returncode": None}}
        if any(output.size != c.size for output in outputs.values()):
            return {"event": "case_error", "case": spec.name, "schedule": "forward",
                    "problem": {"event": "fault", "what": "crashed", "returncode": None}}
        np.save(self.output_path(spec.name), outputs["forward"])
        done = {schedule: next(e for e in events if e["event"] == "done") for schedule, events in reports.items()}
        region = slice(GUARD_BEFORE, GUARD_BEFORE + spec.m * spec.n)
        differing = int(np.count_nonzero(outputs["forward"][region].view(np.uint32)
                                         != outputs["reversed"][region].view(np.uint32)))
        races = {}
        for events in reports.values():
            for event in events:
                if event["event"] == "race":
                    races.setdefault(event["store_after_read"], event)
        return {"event": "case", "case": spec.name, "seconds": seconds,
                "a_changed": any(d["a_changed"] for d in done.values()),
                "b_changed": any(d["b_changed"] for d in done.values()),
                "races": list(races.values()), "schedules_differ": differing,
                "unstored_reads": _first(reports, "unstored_read"), "collisions": _first(reports, "c_collision"),
                "c_collisions": max(d.get("c_collisions", 0) for d in done.values())}

    def profile(self, size: int, tile: int) -> list[dict] | None:
        """The access records of one launch on size³ (access_profile.py); None when it faulted, raced,
        diverged or did not finish."""
        folder = self.workdir / f"profile-{self.name}"
        folder.mkdir(parents=True, exist_ok=True)
        spec = CaseSpec("profile", size, size, size, PROFILE_SEED, "uniform")
        a, b = make_inputs(size, size, size, spec.seed, spec.distribution)
        c = guarded_c(size, size)
        for name, array in (("a", a), ("b", b), ("c", c)):
            array.tofile(folder / f"{name}.bin")
        process = self._start_schedule(folder, spec, tile, "profile", "start", c.size)
        try:
            returncode = process.wait(timeout=HARNESS_LIMITS.cpu_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return None
        return access_records(_events(folder / "report-profile.jsonl")) if returncode == 0 else None

    def _start_schedule(self, folder: Path, spec: CaseSpec, tile: int, schedule: str, layout: str,
                        c_floats: int) -> subprocess.Popen:
        # Its printf output was printed by the cases already.
        return self.start(folder, self._launch_files(folder, spec, tile, schedule, layout, c_floats),
                          subprocess.DEVNULL)

    def _start_both(self, folder: Path, spec: CaseSpec, tile: int, c_floats: int) -> subprocess.Popen:
        """Both thread orders of a case at once, in one sandbox: the harness forks one process for each, and
        prints the first one's printf output alone."""
        files = [path for schedule, layout in SCHEDULES
                 for path in self._launch_files(folder, spec, tile, schedule, layout, c_floats)]
        return self.start(folder, files, None)

    def _launch_files(self, folder: Path, spec: CaseSpec, tile: int, schedule: str, layout: str,
                      c_floats: int) -> list[str]:
        """The run file of one launch, written, and the report file it is to write: the harness's arguments."""
        run_file = folder / f"run-{schedule}.txt"
        report = folder / f"report-{schedule}.jsonl"
        report.unlink(missing_ok=True)
        launch = self.contract.launch(spec.m, spec.n, tile)
        run_file.write_text(" ".join(map(str, [
            spec.m, spec.n, spec.k, *launch.grid, *launch.block, launch.shared_bytes, schedule, layout,
            folder / "a.bin", folder / "b.bin", folder / "c.bin",
            folder / f"out-{schedule}.bin", c_floats, GUARD_BEFORE])))
        return [str(run_file), str(report)]


def _first(reports: dict[str, list[dict]], name: str) -> list[dict]:
    """The first report called `name`, the forward order's before the reversed order's (none: [])."""
    found = [event for events in reports.values() for event in events if event["event"] == name]
    return found[:1]


def _exit_code(events: list[dict], harness_code: int) -> int | None:
    """How a launch's process ended, from the `exit` line the harness appended to its report; where there is
    none, the harness itself did not end normally (its code, when not 0)."""
    ends = [e.get("returncode") for e in events if e["event"] == "exit"]
    if ends and isinstance(ends[-1], int):
        return ends[-1]
    return harness_code or None


def _events(path: Path) -> list[dict]:
    """The harness's reports: lines student code could have written, so each one is checked."""
    try:
        text = read_untrusted(path, REPORT_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return [event for event in map(harness_report, text.splitlines()) if event is not None]

