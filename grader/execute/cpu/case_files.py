"""The job's cases where the CPU driver's workers find them, and what those leave there, read back as events.

Each case has a folder named by its index (a hidden case's name never reaches student code), made before the
harness's sandbox starts, so that the sandbox owns it; its inputs are written there after, readable by anyone.
A worker's report and outputs are student-controlled: read as untrusted, every report line checked
(protocol.py). Imported by the driver while the student's unit builds (numpy's import is most of its start).

A case cut into parts (schedule.py: a sampled one, or a whole one of many blocks) gets the event one worker running
all its blocks in turn would have given, in each thread order: the forward order's parts are its blocks' list cut
in runs (the whole grid's in the order harness.cpp runs it: x fastest), the reversed order's the same runs from the
last (its worker runs the list from its end), so that in either order part 0 holds the first blocks its worker
would run. So: the first problem in part order (that one would have stopped there); C from C's initial image, each
part in turn writing the elements it changed; the parts' reports told as that worker's (`merged_reports`: the first
of each kind, counts added up, a site's off-matrix report once per kind, the read C's first unwritten value names
numbered after the reads earlier parts named, or unnamed where the one worker would have had no name left for it).
Where the parts could have seen each other (elements of C two parts changed, a read of C, an element two threads
stored, A or B changed, a thread that stored nothing beside stores not where the launch maps them; before a later
part's problem: a read of C, A or B changed), or the parts up to the end took three quarters of the case's limit
together (their own CPU time: one worker might have timed out first), that would not be exact: `event` answers None
and the driver runs the case again as one task per thread order.

A case whose workers all ended while an earlier case is still to be told (the costliest start first: schedule.py) is
read back on a thread of its own meanwhile, its parts' C merged (`read_ahead`); what is read is used when the case
is told, and only for the very ends it was read from; nothing is written or removed before then.
"""
from __future__ import annotations

import math
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import numpy as np

from ...contract import KernelContract
from ...judge.input_files import child_inputs
from ...judge.inputs import guarded_c
from ...judge.layout import GUARD_BEFORE, guarded_layout, guarded_size
from ..confine.sandbox import HARNESS_LIMITS
from ..job import CaseSpec, Job, student_output
from ..protocol import harness_report, read_untrusted, read_untrusted_head
from .access_profile import PROFILE_SEED, access_records
from .sampling import BlockSample, block_parts, launched_blocks, sampled_tiles
from .schedule import DONE, ORDERS, TIMED_OUT, Ended, Task, parts_worth
from .server import Server

PROBLEMS = ("fault", "divergence", "warp_divergence")
REPORT_BYTES = 1 << 20
PRINTED_BYTES = 1 << 20  # of one worker's printf output, passed on to the log
PROFILE = "profile"  # the folder of the profile launch's inputs, beside the cases'
INDEX_REPORTS = 48  # of a case's off-matrix accesses, passed on (the event's lists hold at most 64)
PRINTF_CAP = 64 * 1024  # of a launch's printf output (cuda_emu.h), and the line that tells it was cut there
PRINTF_CUT = f"\n[... printf output truncated at {PRINTF_CAP} bytes ...]\n".encode()
# Reports a part leaves that another part's blocks could have changed (see the module's doc)
CROSSING = ("c_read", "c_collision")
# Of a case's limit, what a split case's parts may take together (their own CPU time) and still be told as one
# worker's run: the one worker's deadline counts its own time too, and its parts' fixed costs are in theirs
ONE_WORKERS_SHARE = 0.75
MAX_UNWRITTEN_READS = 0xFFFF  # reads of unstored shared entries a launch names at most (cuda_emu.h)
# What an `unwritten_in_c` report says of the read it names (protocol.py)
NAMED_READ = ("mark", "array", "two_d", "entry_row", "entry_column", "read_line", "read_thread", "read_block")


def write_inputs(folder: Path, spec: CaseSpec) -> bool:
    """A and B of a case, where the sandbox can read them (written after it started: readable by anyone); whether
    they came from the grader's cache (judge/input_files.py) rather than made here."""
    a, b, cached = child_inputs(spec.inputs, spec.m, spec.n, spec.k, spec.seed, spec.distribution)
    for name, array in zip(("a", "b"), (a, b)):
        array.tofile(folder / f"{name}.bin")
        (folder / f"{name}.bin").chmod(0o644)
    return cached


def case_line(folder: Path, spec: CaseSpec, tile: int, contract: KernelContract, task: int,
              blocks: Path | None = None) -> str:
    """How a worker runs one case (harness.cpp): the launch, C's image, the inputs, the report and the outputs,
    and the file of the blocks it runs (a sampled case: `blocks_file`)."""
    launch = contract.launch(spec.m, spec.n, tile)
    segments = [f"{first} {count} {bits:x}" for first, count, bits in guarded_layout(spec.m, spec.n)]
    return " ".join(map(str, [spec.m, spec.n, spec.k, *launch.grid, *launch.block, contract.x, launch.shared_bytes,
                              GUARD_BEFORE, guarded_size(spec.m, spec.n), *segments, folder / "a.bin",
                              folder / "b.bin", folder / f"report-{task}.jsonl", folder / f"out-{task}",
                              *([] if blocks is None else [blocks])]))


def sampled_blocks(spec: CaseSpec, tile: int, contract: KernelContract) -> list[tuple[int, int]]:
    """The blockIdx a sampled case runs (sampling.py), in the order one worker runs them."""
    tiles = sampled_tiles(spec.m, spec.n, tile, BlockSample.from_wire(spec.sample))
    return launched_blocks(tiles.all, contract.x)


def grid_blocks(spec: CaseSpec, tile: int, contract: KernelContract) -> list[tuple[int, int]]:
    """Every blockIdx of a whole case's grid, in the order one worker runs them forward (harness.cpp, run_grid: x
    fastest, then y; the contract's grid has one z)."""
    across, down, _ = contract.launch(spec.m, spec.n, tile).grid
    return [(x, y) for y in range(down) for x in range(across)]


def part_blocks(blocks: list[tuple[int, int]], task: Task) -> list[tuple[int, int]]:
    """The blocks of a task's part, in the list's order: the forward order's part p is the list's p-th run; the
    reversed order's counts the runs from the list's end, as its worker runs the blocks (harness.cpp, run_blocks:
    from the last), so that its part 0 holds the blocks one worker would run first in that order too."""
    runs = block_parts(blocks, task.parts)
    return runs[task.part if task.order == ORDERS[0][0] else task.parts - 1 - task.part]


def blocks_file(folder: Path, blocks: list[tuple[int, int]], task: int) -> Path:
    """The blocks a task runs of a sampled or split case, where the harness reads them: "x y" a line. The parent
    computes the same tiles from the same sample to judge them (and a whole case's C in full), so a file the kernel
    changed only loses it the tiles it left out."""
    path = folder / f"blocks-{task}.txt"
    text = "".join(f"{x} {y}\n" for x, y in blocks).encode()
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
        # The tasks whose printf output goes to the log: (first case, part, task), in the order they started
        self.printing: list[tuple[int, int, int]] = []
        self.told_tasks: set[int] = set()  # the tasks whose ends a told event came from
        # What the workers of a case that ended before an earlier one was told left, read meanwhile (read_ahead)
        self._ahead: dict[int, tuple[list[int], Future]] = {}
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="read-ahead")
        self._blocks: dict[int, list[tuple[int, int]]] = {}  # a case's blocks, made once

    def case_folder(self, index: int) -> Path:
        return self.folder / f"case{index}"

    def write_inputs(self) -> list[bool]:
        return [write_inputs(self.case_folder(index), spec) for index, spec in enumerate(self.job.cases)]

    def blocks(self, index: int, tile: int) -> list[tuple[int, int]]:
        """The blocks case `index` runs (a sampled case: its sample's; else its whole grid), in the order one
        worker runs them forward."""
        if index not in self._blocks:
            spec = self.job.cases[index]
            blocks = sampled_blocks if spec.sample else grid_blocks
            self._blocks[index] = blocks(spec, tile, self.job.contract)
        return self._blocks[index]

    def sampled(self) -> set[int]:
        """The positions of the sampled cases (run in the forward order alone)."""
        return {index for index, spec in enumerate(self.job.cases) if spec.sample}

    def splits(self, tile: int) -> dict[int, int]:
        """How many parts each case's blocks are worth (schedule.py, parts_worth), by position."""
        return {index: parts_worth(len(self.blocks(index, tile)), spec.sample is not None, self._block_macs(tile, spec))
                for index, spec in enumerate(self.job.cases)}

    def multiply_adds(self, tile: int) -> dict[int, int]:
        """Each case's multiply-adds in one thread order, its blocks' (what schedule.py starts costliest first)."""
        return {index: len(self.blocks(index, tile)) * self._block_macs(tile, spec)
                for index, spec in enumerate(self.job.cases)}

    def _block_macs(self, tile: int, spec: CaseSpec) -> int:
        return math.prod(self.job.contract.launch(1, 1, tile).block) * spec.k

    def start(self, server: Server, task: Task, tile: int, launches: int) -> bool:
        """A task's worker started: the forward order prints (as a GPU run prints each launch's printf)."""
        stdout = str(self.folder / f"task{task.id}.out") if task.order == ORDERS[0][0] else "-"
        if stdout != "-":
            self.printing.append((task.cases[0], task.part, task.id))
        lines = [self._case_line(index, task, tile) for index in task.cases]
        return server.run(task.id, task.order, task.layout, launches, stdout, lines)

    def _case_line(self, index: int, task: Task, tile: int) -> str:
        spec, folder = self.job.cases[index], self.case_folder(index)
        blocks = None
        if spec.sample is not None or task.parts > 1:  # the task's part of the blocks (a whole case's: when split)
            blocks = blocks_file(folder, part_blocks(self.blocks(index, tile), task), task.id)
        return case_line(folder, spec, tile, self.job.contract, task.id, blocks)

    def print_outputs(self) -> None:
        """What the forward workers printed, into this child's log, worker by worker in job order; a split case's
        parts as the one worker running its blocks in turn would have printed (`joined_printf`). Only the tasks of
        told cases: one past the max_hangs cut, or a task stopped and run again (schedule.py), prints nothing."""
        sys.stdout.flush()
        told = [started for started in self.printing if started[2] in self.told_tasks]
        for tasks in _runs(sorted(told, key=lambda started: started[:2])):
            sys.stdout.buffer.write(joined_printf([self._printed(task) for task in tasks]))
        sys.stdout.flush()

    def _printed(self, task: int) -> bytes:
        try:
            return read_untrusted_head(self.folder / f"task{task}.out", PRINTED_BYTES)
        except OSError:
            return b""  # a worker that never started (or left a link there: its own output, not the grade)

    def event(self, index: int, ends: dict[str, list[Ended]], launches: int, limit_s: float) -> dict | None:
        """The case's event from what each thread order's workers left (a split case: its parts', in part order):
        a `case_error` for the first order that went wrong (forward first; its first part that did), else a
        `case` with every distinct forward output saved for the parent. None: a split case whose parts could
        have seen each other, or whose time added up may have run one worker out of it, to be run again as one
        task per order (schedule.py, run_whole)."""
        told = self._event(index, ends, launches, limit_s)
        if told is not None:
            self.told_tasks.update(_task_ids(ends))
        return told

    def read_ahead(self, index: int, ends: dict[str, list[Ended]], launches: int) -> None:
        """What case `index`'s workers left (every one ended), read back on a thread of the driver's while the
        cases before it are still to be told: a split case's parts' C read and merged (tens of ms for a large case,
        which starts first and ends before the small cases: schedule.py). Nothing is written or removed: a case
        the max_hangs cut never tells leaves no trace, and one run again (run_whole) is read again."""
        self._ahead[index] = (_task_ids(ends), self._reader.submit(self._read_all, index, ends, launches))

    def _read_all(self, index: int, ends: dict[str, list[Ended]], launches: int) -> dict[str, _Left]:
        """Each thread order's _Left, its outputs read and merged too where telling the case will (no order went
        wrong)."""
        left = self._read(index, ends, launches)
        if all(_first_problem(found.ends, found.reports, 0.0) is None for found in left.values()):
            for found in left.values():
                found.merge()
        return left

    def _read(self, index: int, ends: dict[str, list[Ended]], launches: int) -> dict[str, _Left]:
        spec, folder = self.job.cases[index], self.case_folder(index)
        return {order: _Left(spec, folder, ends[order], launches) for order, _ in ORDERS if order in ends}

    def _left(self, index: int, ends: dict[str, list[Ended]], launches: int) -> dict[str, _Left]:
        """What the case's workers left: read ahead, where these ends were (waited for), else read now."""
        tasks, future = self._ahead.pop(index, (None, None))
        if future is not None and tasks == _task_ids(ends):
            return future.result()
        return self._read(index, ends, launches)

    def _event(self, index: int, ends: dict[str, list[Ended]], launches: int, limit_s: float) -> dict | None:
        spec, folder = self.job.cases[index], self.case_folder(index)
        orders = [order for order, _ in ORDERS if order in ends]  # a sampled large case: the forward one alone
        left = self._left(index, ends, launches)
        parts = {order: left[order].reports for order in orders}
        for order in orders:
            found = _first_problem(ends[order], parts[order], limit_s)
            if not one_worker_met_it(ends[order], parts[order], found, limit_s):
                self._forget_printing(ends)
                return None
            if found is not None:
                self._forget_printing({order: ends[order][found[0] + 1:]})  # one worker stopped before them
                return {"event": "case_error", "case": spec.name, "schedule": order, "problem": found[1]}
        if not all(left[order].outputs_read for order in orders):
            return {"event": "case_error", "case": spec.name, "schedule": ORDERS[0][0],
                    "problem": {"event": "fault", "what": "crashed", "returncode": None}}
        reports, outputs = {}, {}
        for order in orders:
            _discard_parts_outputs(folder, ends[order], launches)
            joined = left[order].joined
            if joined is None:
                self._forget_printing(ends)
                return None
            reports[order], outputs[order] = joined
        forward, reversed_ = outputs[ORDERS[0][0]], outputs.get(ORDERS[1][0])
        distinct = _distinct(forward)
        for number, output in enumerate(distinct):
            np.save(self.job.output_path(spec.name, student_output(number)), output)
        return {"event": "case", "case": spec.name,
                "seconds": max(_span(ends[order]) for order in orders),
                "launches": launches, "distinct_outputs": len(distinct),
                "schedules_differ": _differing(forward, reversed_, spec.m * spec.n) if reversed_ else 0,
                **_found(reports)}

    def _forget_printing(self, ends: dict[str, list[Ended]]) -> None:
        """Parts whose printf output one worker would not have given: run again as one task per order (those
        tasks give it), or after the part where it stopped (each printf is written as it is made: harness.cpp)."""
        dropped = {end.task for order_ends in ends.values() for end in order_ends}
        self.printing = [started for started in self.printing if started[2] not in dropped]


class _Left:
    """What one thread order's workers of a case left: their reports, and (read when first asked) C after each
    launch, each part's (`outputs`, None for a part whose C is missing or not C's size) and merged into one worker's
    (`joined`: joined_parts)."""

    def __init__(self, spec: CaseSpec, folder: Path, ends: list[Ended], launches: int):
        self.spec, self.folder, self.ends, self.launches = spec, folder, ends, launches
        self.reports = [_events(folder / f"report-{end.task}.jsonl") for end in ends]

    @cached_property
    def outputs(self) -> list[list[np.ndarray] | None]:
        size = guarded_size(self.spec.m, self.spec.n)
        return [_outputs(self.folder, end.task, self.launches, size) for end in self.ends]

    @property
    def outputs_read(self) -> bool:
        return all(found is not None for found in self.outputs)

    @cached_property
    def joined(self) -> tuple[list[dict], list[np.ndarray]] | None:
        return joined_parts(self.spec, self.reports, self.outputs)

    def merge(self) -> tuple[list[dict], list[np.ndarray]] | None:
        """`joined`, made now where every part left its C (else None)."""
        return self.joined if self.outputs_read else None


def _task_ids(ends: dict[str, list[Ended]]) -> list[int]:
    return [end.task for order_ends in ends.values() for end in order_ends]


def _discard_parts_outputs(folder: Path, ends: list[Ended], launches: int) -> None:
    """A split case's parts' copies of C, read: each is C's size, and the folder may be in memory (/dev/shm)."""
    for end in ends if len(ends) > 1 else ():
        for number in range(launches):
            (folder / f"out-{end.task}-{number}.bin").unlink(missing_ok=True)


def _span(ends: list[Ended]) -> float:
    """A thread order's seconds: from its first part's start to its last part's end (one part: its own)."""
    return max(end.started + end.seconds for end in ends) - min(end.started for end in ends)


def _runs(printing: list[tuple[int, int, int]]) -> list[list[int]]:
    """The printing tasks grouped as workers' runs: a split case's parts together (part 0 starts a run)."""
    runs: list[list[int]] = []
    for _, part, task in printing:
        if part == 0 or not runs:
            runs.append([])
        runs[-1].append(task)
    return runs


def joined_printf(printed: list[bytes]) -> bytes:
    """One worker's printf output from its parts' (each part's launch capped at PRINTF_CAP, as the one launch
    was): one part's as it is; several, joined and capped once, as their blocks in one launch would have printed."""
    if len(printed) == 1:
        return printed[0]
    whole = b"".join(part[:-len(PRINTF_CUT)] if part.endswith(PRINTF_CUT) and len(part) == PRINTF_CAP + len(PRINTF_CUT)
                     else part for part in printed)
    return whole if len(whole) < PRINTF_CAP else whole[:PRINTF_CAP] + PRINTF_CUT


def joined_parts(spec: CaseSpec, reports: list[list[dict]], outputs: list[list[np.ndarray]]
                 ) -> tuple[list[dict], list[np.ndarray]] | None:
    """One thread order's reports and outputs, as one worker running every part's blocks in turn would have left
    them; None where its parts could have seen each other (see the module's doc). One part: as it is."""
    if len(reports) == 1:
        return reports[0], outputs[0]
    if not parts_apart(reports):
        return None
    merged = merged_output(guarded_c(spec.m, spec.n), [found[0] for found in outputs])  # one launch each
    return None if merged is None else (merged_reports(reports, spec), [merged])


def parts_apart(reports: list[list[dict]]) -> bool:
    """Whether nothing the parts reported could have gone otherwise with another part's blocks before theirs:
    no read of C (another part's store would be read), no element stored twice, A and B unchanged (later blocks
    read them), no thread that stored nothing beside a store where the launch does not map it (which thread
    the one worker would name depends on who stored what in every part), and the parts before the one holding C's
    first unwritten value saying how many reads they named (what that value's read is numbered by)."""
    events = [event for part in reports for event in part]
    if any(event["event"] in CROSSING for event in events):
        return False
    if any(event["event"] == "done" and (event["a_changed"] or event["b_changed"]) for event in events):
        return False
    misplaced = any(event["event"] == "c_mapping" and event["stores"] != event["as_launched"] for event in events)
    if misplaced and any(event["event"] == "c_unstored" for event in events):
        return False
    return _reads_named_alike(reports)


def _reads_named_alike(reports: list[list[dict]]) -> bool:
    """Whether the name of the read C's first unwritten value holds can be told as the one worker's
    (`_unwritten_in_c`): each part before its part says how many reads it named."""
    first = _first_unwritten_in_c(reports)
    return first is None or _named_before(reports, first[0]) is not None


def _first_unwritten_in_c(reports: list[list[dict]]) -> tuple[int, dict] | None:
    """The part whose `unwritten_in_c` is C's first marked element (no two parts changed one element), and it."""
    marked = [(event["row"], event["column"], number, event) for number, part in enumerate(reports)
              for event in part if event["event"] == "unwritten_in_c"]
    return None if not marked else min(marked, key=lambda found: found[:3])[2:]


def _named_before(reports: list[list[dict]], part: int) -> int | None:
    """The reads of unstored shared entries the parts before `part` named (None: one did not say)."""
    named = [event.get("unwritten_reads") for events in reports[:part] for event in events
             if event["event"] == "done"]
    return None if None in named else sum(named)


def merged_output(initial: np.ndarray, outputs: list[np.ndarray]) -> np.ndarray | None:
    """C (guard bands included) from its initial image, each part in turn writing the elements it changed;
    None where two parts changed one element (which store one worker would have kept, and whether it saw both,
    the parts cannot say)."""
    start = initial.view(np.uint32)
    merged, changed = start.copy(), np.zeros(start.size, dtype=bool)
    for output in outputs:
        bits = output.view(np.uint32)
        mine = bits != start
        if np.any(mine & changed):
            return None
        merged[mine] = bits[mine]
        changed |= mine
    return merged.view(np.float32)


MERGED = ("index", "unwritten_in_c", "tile_loop", "c_mapping", "done")  # reports merged_reports adds up


def merged_reports(reports: list[list[dict]], spec: CaseSpec) -> list[dict]:
    """The parts' reports as one worker running their blocks in turn would have written them: each kind reported
    once per launch is the first part's (`_found` takes the first), counts over the launch are added up, and a
    site's off-matrix access is told once per kind."""
    events = [event for part in reports for event in part]
    merged = [event for event in events if event["event"] not in MERGED]
    merged += _first_per_site_and_kind(events, {"A": (spec.m, spec.k), "B": (spec.k, spec.n), "C": (spec.m, spec.n)})
    if _first_unwritten_in_c(reports) is not None:
        merged.append(_unwritten_in_c(reports))
    for name, merge in (("tile_loop", _tile_loop), ("c_mapping", _c_mapping), ("done", _done)):
        found = [event for event in events if event["event"] == name]
        if found:
            merged.append(merge(found))
    return merged


def _first_per_site_and_kind(events: list[dict], shapes: dict[str, tuple[int, int]]) -> list[dict]:
    """The `index` reports one launch would have made: a site reports an access whose kinds of being off (a
    stride, a row, a column: cuda_emu.h, misindexed) it has not reported yet."""
    told: dict[int, set[str]] = {}
    kept = []
    for event in (event for event in events if event["event"] == "index"):
        rows, columns = shapes[event["matrix"]]
        kinds = {kind for kind, off in (("stride", event["stride"] != columns and event["row"] != 0),
                                        ("row", not 0 <= event["row"] < rows),
                                        ("column", not 0 <= event["column"] < columns)) if off}
        if kinds - told.setdefault(event["site"], set()):
            told[event["site"]] |= kinds
            kept.append(event)
    return kept


def _unwritten_in_c(reports: list[list[dict]]) -> dict:
    """C's first marked element is the lowest of the parts' (no two parts changed one element), the count theirs.
    The read its mark names is the one worker's too, numbered after the reads the parts before named, unless that
    number is past what a launch names (MAX_UNWRITTEN_READS, cuda_emu.h): the one worker had no name left for it.
    (Which reads a launch names, in order, depends on each block alone until then.)"""
    part, first = _first_unwritten_in_c(reports)
    elements = sum(event["elements"] for events in reports for event in events if event["event"] == "unwritten_in_c")
    told = {**first, "elements": elements}
    if "mark" in first:
        told["mark"] += _named_before(reports, part)
        if told["mark"] > MAX_UNWRITTEN_READS:
            told = {key: value for key, value in told.items() if key not in NAMED_READ}
    return told


def _tile_loop(found: list[dict]) -> dict:
    return {"event": "tile_loop", "fewest": min(event["fewest"] for event in found),
            "most": max(event["most"] for event in found), "threads": sum(event["threads"] for event in found)}


def _c_mapping(found: list[dict]) -> dict:
    """The counts added up; the first misplaced store is the first part's that saw one."""
    example = next((event for event in found if "thread" in event), {})
    return {**example, "event": "c_mapping", **{key: sum(event[key] for event in found)
                                                for key in ("stores", "as_launched", "transposed")}}


def _done(found: list[dict]) -> dict:
    return {"event": "done", "a_changed": any(event["a_changed"] for event in found),
            "b_changed": any(event["b_changed"] for event in found), "races": sum(event["races"] for event in found),
            "c_collisions": max(event.get("c_collisions", 0) for event in found),
            "unwritten_reads": sum(event.get("unwritten_reads", 0) for event in found)}


def _first_problem(ends: list[Ended], reports: list[list[dict]], limit_s: float) -> tuple[int, dict] | None:
    """The first part of one thread order that went wrong, and how; None when every part finished."""
    for number, (end, events) in enumerate(zip(ends, reports)):
        problem = _problem(end, events, limit_s)
        if problem is not None:
            return number, problem
    return None


def one_worker_met_it(ends: list[Ended], reports: list[list[dict]], found: tuple[int, dict] | None,
                      limit_s: float) -> bool:
    """Whether one worker running this order's blocks in turn would have reached the same end as its parts: the
    first problem (`found`) or the last block. Not where the parts up to it together took ONE_WORKERS_SHARE of the
    case's limit (one worker's time is theirs added up: it might have timed out first; a part that timed out alone
    would have timed out in it too), nor, where a later part went wrong, where those parts read C or changed A or B
    (what it read or spun on there may have been what an earlier part's blocks stored, in one worker)."""
    if len(ends) == 1 or (found is not None and found[0] == 0):
        return True  # the parts before the problem: none (one worker's first blocks are that part's)
    upto = len(ends) if found is None else found[0] + 1
    timed_out = found is not None and found[1]["event"] == "timeout"
    if not timed_out and sum(map(_own_seconds, ends[:upto], reports[:upto])) >= limit_s * ONE_WORKERS_SHARE:
        return False
    return found is None or not any(event["event"] in CROSSING or (event["event"] == "done" and (
        event["a_changed"] or event["b_changed"])) for events in reports[:upto] for event in events)


def _own_seconds(end: Ended, events: list[dict]) -> float:
    """A part's own CPU seconds as its worker reported them at its end (the most it reported: a line the kernel
    forged can only add a rerun), else (it did not finish) its seconds on the driver's clock, waits included."""
    return max((event["cpu_s"] for event in events if event["event"] == "done" and "cpu_s" in event),
               default=end.seconds)


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
