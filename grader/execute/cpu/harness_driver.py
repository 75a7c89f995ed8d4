"""The CPU child: builds the emulation of one submission and runs every case under two thread orders.

Runs as `python -m grader.execute.cpu.harness_driver JOB_FILE EVENT_FD CONTROL_FD`, with the same events as the GPU
child. Each case runs twice, at the same time, in two harness processes: threads in forward order with
A, B and C ending at an inaccessible page, and in reversed order with them starting after one, so an
access just past either end faults in one of the two. A race shows up as a shadow-memory report, or
as outputs that differ between the orders.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ...inputs import GUARD_BEFORE, guarded_c, make_inputs
from ..job import CaseSpec, Channel, Job
from ..proc import die_with_parent
from ..sandbox import limit_this_process
from .build import build, compiler, compiler_version

# (thread order, where the buffers sit against their guard pages)
SCHEDULES = (("forward", "end"), ("reversed", "start"))
PROBLEMS = ("fault", "divergence")


def main(argv: list[str]) -> int:
    die_with_parent()
    limit_this_process()
    job, channel = Job.load(Path(argv[1]), forget=True), Channel(int(argv[2]))
    channel.send("phase", phase="startup")
    channel.send("phase", phase="compile")
    workdir = Path(job.workdir)
    built = build(job.original_source, job.kernel_name, job.arg_order, Path(job.cache_dir), workdir)
    if built.binary is None:
        channel.send("compile_error", target="student", message=built.message, emulator=True)
        channel.send("done")
        return 0
    tile = tile_size(built.binary)
    channel.send("compiled", device=f"CPU emulation ({compiler_version(compiler())})", arch="cpu",
                 tile_size=tile)
    if tile in job.tile_sizes:
        for spec in job.cases:
            channel.send("phase", phase="case", case=spec.name)
            channel.send(**run_case(built.binary, spec, tile, job))
    channel.send("done")
    return 0


def tile_size(binary: Path) -> int | None:
    answer = subprocess.run([str(binary), "--tile"], capture_output=True, text=True, check=False).stdout.strip()
    return int(answer) if answer.lstrip("-").isdigit() else None


def run_case(binary: Path, spec: CaseSpec, tile: int, job: Job) -> dict:
    folder = Path(job.workdir, spec.name)
    folder.mkdir(parents=True, exist_ok=True)
    a, b = make_inputs(spec.m, spec.n, spec.k, spec.seed, spec.distribution)
    c = guarded_c(spec.m, spec.n)
    for name, array in (("a", a), ("b", b), ("c", c)):
        array.tofile(folder / f"{name}.bin")
    started = time.perf_counter()
    processes = {schedule: _start(binary, folder, spec, tile, schedule, layout, c.size)
                 for schedule, layout in SCHEDULES}
    returncodes = {schedule: process.wait() for schedule, process in processes.items()}
    seconds = time.perf_counter() - started
    reports = {schedule: _events(folder / f"report-{schedule}.jsonl") for schedule in processes}

    for schedule, events in reports.items():
        problem = next((e for e in events if e["event"] in PROBLEMS), None)
        if problem is None and returncodes[schedule] != 0:
            problem = {"event": "fault", "what": "crashed", "returncode": returncodes[schedule]}
        if problem is not None:
            return {"event": "case_error", "case": spec.name, "schedule": schedule, "problem": problem}

    outputs = {schedule: np.fromfile(folder / f"out-{schedule}.bin", np.float32) for schedule in processes}
    np.save(job.output_path(spec.name, "student"), outputs["forward"])
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
            "races": list(races.values()), "schedules_differ": differing}


def _start(binary: Path, folder: Path, spec: CaseSpec, tile: int, schedule: str, layout: str,
           c_floats: int) -> subprocess.Popen:
    run_file = folder / f"run-{schedule}.txt"
    report = folder / f"report-{schedule}.jsonl"
    report.unlink(missing_ok=True)
    run_file.write_text(" ".join(map(str, [
        spec.m, spec.n, spec.k, tile, schedule, layout, folder / "a.bin", folder / "b.bin", folder / "c.bin",
        folder / f"out-{schedule}.bin", c_floats, GUARD_BEFORE])))
    # One copy of the kernel's printf output is enough: the forward run's.
    stdout = None if schedule == "forward" else subprocess.DEVNULL
    return subprocess.Popen([str(binary), str(run_file), str(report)], stdin=subprocess.DEVNULL, stdout=stdout)


def _events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by the fault that ended the run
    return events


if __name__ == "__main__":
    sys.exit(main(sys.argv))
