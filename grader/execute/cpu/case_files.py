"""The job's cases where the CPU driver's workers find them, and what those leave there, read back as events.

Each case has a folder named by its index (a hidden case's name never reaches student code), made before the
harness's sandbox starts, so that the sandbox owns it; its inputs are written there after, readable by anyone.
A worker's report and outputs are student-controlled: read as untrusted, every report line checked
(protocol.py). Imported by the driver while the student's unit builds (numpy's import is most of its start).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from ...contract import KernelContract
from ...judge.inputs import make_inputs
from ...judge.layout import GUARD_BEFORE, guarded_layout, guarded_size
from ..confine.sandbox import HARNESS_LIMITS
from ..job import CaseSpec, Job, student_output
from ..protocol import harness_report, read_untrusted, read_untrusted_head
from .access_profile import PROFILE_SEED, access_records
from .sampling import BlockSample, launched_blocks, sampled_tiles
from .schedule import DONE, ORDERS, TIMED_OUT, Ended, Task
from .server import Server

PROBLEMS = ("fault", "divergence", "warp_divergence")
REPORT_BYTES = 1 << 20
PRINTED_BYTES = 1 << 20  # of one worker's printf output, passed on to the log
PROFILE = "profile"  # the folder of the profile launch's inputs, beside the cases'
INDEX_REPORTS = 48  # of a case's off-matrix accesses, passed on (the event's lists hold at most 64)


def write_inputs(folder: Path, spec: CaseSpec) -> None:
    """A and B of a case, where the sandbox can read them (written after it started: readable by anyone)."""
    for name, array in zip(("a", "b"), make_inputs(spec.m, spec.n, spec.k, spec.seed, spec.distribution)):
        array.tofile(folder / f"{name}.bin")
        (folder / f"{name}.bin").chmod(0o644)


def case_line(folder: Path, spec: CaseSpec, tile: int, contract: KernelContract, task: int) -> str:
    """How a worker runs one case (harness.cpp): the launch, C's image, the inputs, the report and the outputs."""
    launch = contract.launch(spec.m, spec.n, tile)
    segments = [f"{first} {count} {bits:x}" for first, count, bits in guarded_layout(spec.m, spec.n)]
    blocks = [] if spec.sample is None else [_blocks_file(folder, spec, tile, contract)]
    return " ".join(map(str, [spec.m, spec.n, spec.k, *launch.grid, *launch.block, contract.x, launch.shared_bytes,
                              GUARD_BEFORE, guarded_size(spec.m, spec.n), *segments, folder / "a.bin",
                              folder / "b.bin", folder / f"report-{task}.jsonl", folder / f"out-{task}", *blocks]))


def _blocks_file(folder: Path, spec: CaseSpec, tile: int, contract: KernelContract) -> Path:
    """The blocks a sampled case runs (sampling.py), where the harness reads them: "x y" a line. The parent
    computes the same tiles from the same sample to judge them, so a file the kernel changed only loses it the
    tiles it left out."""
    tiles = sampled_tiles(spec.m, spec.n, tile, BlockSample.from_wire(spec.sample))
    path = folder / "blocks.txt"
    text = "".join(f"{x} {y}\n" for x, y in launched_blocks(tiles.all, contract.x)).encode()
    # The folder is the sandbox's: a link the kernel left there is not followed
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "wb") as file:
        file.write(text)
    return path


def profile(server: Server, folder: Path, size: int, tile: int, contract: KernelContract) -> list[dict] | None:
    """The access records of one launch on size³ (access_profile.py); None when it faulted, raced,
    diverged or did not finish."""
    spec = CaseSpec("profile", size, size, size, PROFILE_SEED, "uniform")
    write_inputs(folder, spec)
    task = server.task_id()
    returncode = server.run_alone("profile", "start", case_line(folder, spec, tile, contract, task),
                                  HARNESS_LIMITS.cpu_s)
    return access_records(_events(folder / f"report-{task}.jsonl")) if returncode == 0 else None


class Cases:
    """The job's cases where the server's workers find them: a folder each, made before the server starts (its
    sandbox then owns them), and what their launches left there, read back into events."""

    def __init__(self, job: Job, folder: Path):
        self.job, self.folder = job, folder
        for index in range(len(job.cases)):
            self.case_folder(index).mkdir(parents=True, exist_ok=True)
        (folder / PROFILE).mkdir(parents=True, exist_ok=True)
        self.printing: list[int] = []  # the tasks whose printf output goes to the log, in the order they started

    def case_folder(self, index: int) -> Path:
        return self.folder / f"case{index}"

    def write_inputs(self) -> None:
        for index, spec in enumerate(self.job.cases):
            write_inputs(self.case_folder(index), spec)

    def start(self, server: Server, task: Task, tile: int, launches: int) -> bool:
        """A task's worker started: the forward order prints (as a GPU run prints each launch's printf)."""
        stdout = str(self.folder / f"task{task.id}.out") if task.order == ORDERS[0][0] else "-"
        if stdout != "-":
            self.printing.append(task.id)
        lines = [case_line(self.case_folder(index), self.job.cases[index], tile, self.job.contract, task.id)
                 for index in task.cases]
        return server.run(task.id, task.order, task.layout, launches, stdout, lines)

    def print_outputs(self) -> None:
        """What the forward workers printed, into this child's log, worker by worker."""
        sys.stdout.flush()
        for task in self.printing:
            try:
                sys.stdout.buffer.write(read_untrusted_head(self.folder / f"task{task}.out", PRINTED_BYTES))
            except OSError:
                pass  # a worker that never started (or left a link there: its own output, not the grade)
        sys.stdout.flush()

    def event(self, index: int, ends: dict[str, Ended], launches: int, limit_s: float) -> dict:
        """The case's event from what each thread order's worker left: a `case_error` for the first order that
        went wrong (forward first), else a `case` with every distinct forward output saved for the parent."""
        spec, folder = self.job.cases[index], self.case_folder(index)
        orders = [order for order, _ in ORDERS if order in ends]  # a sampled large case: the forward one alone
        reports = {order: _events(folder / f"report-{ends[order].task}.jsonl") for order in orders}
        for order in orders:
            problem = _problem(ends[order], reports[order], limit_s)
            if problem is not None:
                return {"event": "case_error", "case": spec.name, "schedule": order, "problem": problem}
        size = guarded_size(spec.m, spec.n)
        outputs = {order: _outputs(folder, ends[order].task, launches, size) for order in orders}
        if any(found is None for found in outputs.values()):
            return {"event": "case_error", "case": spec.name, "schedule": ORDERS[0][0],
                    "problem": {"event": "fault", "what": "crashed", "returncode": None}}
        forward, reversed_ = outputs[ORDERS[0][0]], outputs.get(ORDERS[1][0])
        distinct = _distinct(forward)
        for number, output in enumerate(distinct):
            np.save(self.job.output_path(spec.name, student_output(number)), output)
        return {"event": "case", "case": spec.name, "seconds": max(end.seconds for end in ends.values()),
                "launches": launches, "distinct_outputs": len(distinct),
                "schedules_differ": _differing(forward, reversed_, spec.m * spec.n) if reversed_ else 0,
                **_found(reports)}


def _problem(end: Ended, events: list[dict], limit_s: float) -> dict | None:
    """What stopped one thread order's launches of a case, as the harness reported it; None when they finished."""
    if end.how == TIMED_OUT:
        return {"event": "timeout", "limit_s": limit_s}
    problem = next((e for e in events if e["event"] in PROBLEMS), None)
    if problem is None and (end.how != DONE or not any(e["event"] == "done" for e in events)):
        problem = {"event": "fault", "what": "crashed", "returncode": end.returncode}
    return problem


def _outputs(folder: Path, task: int, launches: int, size: int) -> list[np.ndarray] | None:
    """C after each launch (guard bands included); None when one is missing or not C's size."""
    try:
        found = [np.frombuffer(read_untrusted(folder / f"out-{task}-{number}.bin", size * 4), np.float32)
                 for number in range(launches)]
    except OSError:
        return None
    return found if all(output.size == size for output in found) else None


def _distinct(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """Each output that differs bit for bit from every one before it, in launch order."""
    kept: list[np.ndarray] = []
    for output in outputs:
        if not any(np.array_equal(output.view(np.uint32), seen.view(np.uint32)) for seen in kept):
            kept.append(output)
    return kept


def _differing(forward: list[np.ndarray], reversed_: list[np.ndarray], elements: int) -> int:
    """Elements of C that differ between the thread orders, in the launch where most do."""
    region = slice(GUARD_BEFORE, GUARD_BEFORE + elements)
    return max(int(np.count_nonzero(f[region].view(np.uint32) != r[region].view(np.uint32)))
               for f, r in zip(forward, reversed_))


def _found(reports: dict[str, list[dict]]) -> dict:
    """What the reports of a case that finished say, both orders and every launch together."""
    done = [event for events in reports.values() for event in events if event["event"] == "done"]
    races = {}
    for events in reports.values():
        for event in events:
            if event["event"] == "race":
                races.setdefault(event["store_after_read"], event)
    return {"a_changed": any(d["a_changed"] for d in done), "b_changed": any(d["b_changed"] for d in done),
            "races": list(races.values()), "unstored_reads": _first(reports, "unstored_read"),
            "collisions": _first(reports, "c_collision"), "c_collisions": max(d.get("c_collisions", 0) for d in done),
            "indices": _per_site(reports), "c_reads": _first(reports, "c_read"),
            "tile_loops": _first(reports, "tile_loop"), "mappings": _first(reports, "c_mapping"),
            "unstored": _first(reports, "c_unstored"), "unwritten_in_c": _first(reports, "unwritten_in_c")}


def _per_site(reports: dict[str, list[dict]]) -> list[dict]:
    """The first reports of each site whose index was off its matrix (one per kind: a stride, a row, a column),
    the forward order's first; at most INDEX_REPORTS."""
    kept: dict[int, list[dict]] = {}
    for event in (event for events in reports.values() for event in events if event["event"] == "index"):
        if len(kept.get(event["site"], ())) < 3:
            kept.setdefault(event["site"], []).append(event)
    return [event for events in kept.values() for event in events][:INDEX_REPORTS]


def _first(reports: dict[str, list[dict]], name: str) -> list[dict]:
    """The first report called `name`, the forward order's before the reversed order's (none: [])."""
    found = [event for events in reports.values() for event in events if event["event"] == name]
    return found[:1]


def _events(path: Path) -> list[dict]:
    """The harness's reports: lines student code could have written, so each one is checked."""
    try:
        text = read_untrusted(path, REPORT_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return [event for event in map(harness_report, text.splitlines()) if event is not None]
