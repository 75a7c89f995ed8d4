"""Which worker runs which of the CPU driver's cases, and when; how each thread order of each case ended.

A kernel whose compiled unit holds no mutable static storage (statics.py) launches as a pure function of its
inputs and thread order here (each launch starts from the emulator's initial state: cuda_emu.h, new_launch),
so a later launch of a case would repeat the first bit for bit: each case runs once per thread order, each
order of each case in a worker of its own, as many at once as there are `slots`. A kernel with state (device
globals, static locals) runs its cases in job order, `launches` times each, in one worker per thread order:
its state carries from launch to launch and from case to case, as in the GPU child's one process. After a
case that faulted, diverged or hung in either order, a fresh pair of workers runs the rest, as the GPU path
starts a fresh child.

A case of a kernel without state whose blocks cost more than a worker's start (a sampled large case: seconds; a
whole case of many blocks: square_256's quarter of a second) would be the grade's last wait: where slots are left
for it, its block list is cut into contiguous parts (`split_parts`, at most `splits[index]`: how many parts its
blocks are worth), each a task of its own, in both thread orders (a sampled case: the forward order alone), and
told once every part ended, each part's end under its key (order, part). Parts are numbered in the order one
worker runs their blocks, in either thread order (case_files.py gives the reversed order's part 0 the last
blocks). The driver merges what the parts left (case_files.py) into what one worker running every block in turn
would have left; where it cannot vouch for that (parts that stored one element of C, a read of C, ...) it asks
for the case again (`run_whole`): one task per thread order of all its blocks, queued first, told in its place.

Which task starts first: a kernel with state's workers start in job order. A kernel without state's tasks start
costliest first (`costs`: each case's multiply-adds, its parts sharing them alike; ties in job order), so that the
large sampled cases, last in job order, are not the last to start and so the last to end; without `costs`, or with
one slot (its last task ends as late either way), in job order. Either way cases are told in job order, each from
its own tasks' ends (a pure function of the case's inputs, its thread order and its blocks): the start order changes
when a case can be told, not what is told (a case whose tasks all ended while an earlier one is still to be told is
offered to `ahead`, to read back what they left meanwhile). A case's tasks cost alike and start one after another in
either order, so what a problem in one of them makes moot (`_skip_moot`) is moot alike. A task started ahead of an
earlier case that still waits, once it ran SPECULATE_SHARE of its limit (its own time), is stopped and queued again
(a new worker runs it from the start, to the same end), and from then on tasks start in job order: a kernel that
hangs does not spend limits on costly cases past the max_hangs cut while the cases that make the cut wait for a
slot.

Each case has `limit_s` of its worker's own time, or the limit `limits` gives it (a sampled large case of a kernel
with state has one per launch; each part of a split case has the case's); waiting for a CPU is not counted
(deadline.py). A worker past it is killed and its case ends timed out, while the other cases go on. After
`max_hangs` cases timed out (in job order; a case whose parts hung counts once) nothing more is told or runs, as the
GPU path gives up after restarting its child so often: a case past that cut that ran already, or ended, is never
told (as the GPU path never runs it), whichever order the tasks started in. `caps()`, asked as the cases run,
lowers a case's limit: beside a GPU run, a case the GPU hung in gets the seconds it had there (hang_notices.py),
running or not started yet (a case that ended within its limit before the notice came keeps its end).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..confine.deadline import Deadline
from .server import Reply, Server

ORDERS = (("forward", "end"), ("reversed", "start"))  # thread order, and where A, B, C sit by their guard pages
DONE, DIED, TIMED_OUT = "done", "died", "timed_out"
SKIPPED = "skipped"  # a part never started: what it would have found could not change how its case is told
# Blocks of a sampled case worth a worker of their own: a part's fixed cost (a fork, reading A and B, writing and
# merging C: ~35 ms for large_ragged's 1031×1009×1013, measured on 2 cores) stays small beside its blocks' (~18 ms a
# block of tile 32, ~5 ms of tile 16)
BLOCKS_PER_PART = 16
# Multiply-adds a whole case's part must hold (its blocks' threads × k) to be worth a worker of its own: a part's
# fixed cost for a small case (a fork, placing A, B and C, the parent's reading and merging its C) measured 4-9 ms on
# 2 cores under a load of 10 (square_256 at tile 16 in 16 parts against one task per order), where a multiply-add
# costs ~16-20 ns (square_256's 16.8 M in 0.27-0.35 s); 2 M of them (~35 ms) keep that near a fifth, and a
# part no longer than a sampled case's (16 blocks of ~5 ms at tile 16)
PART_MACS = 1 << 21
CAPS_EVERY_S = 0.25  # how soon a lowered limit (caps) takes hold of a running case
# Of a case's limit, what a task started ahead of an earlier waiting case may run before it is stopped and the rest
# start in job order: good_basic's costliest part takes ~70 ms of a 10 s limit, and a kernel that hangs everywhere
# costs one share more than in job order (not a limit per costly case started ahead)
SPECULATE_SHARE = 1 / 8

Key = tuple[str, int]  # what ran: a thread order, and which part of the case's blocks (0: the first, or all)


def parts_worth(blocks: int, sampled: bool, block_macs: int) -> int:
    """Into how many parts a case of `blocks` blocks (each `block_macs` multiply-adds) is worth cutting: a sampled
    case one per BLOCKS_PER_PART blocks, a whole one a part per PART_MACS of its work (none for less)."""
    if sampled:
        return -(-blocks // BLOCKS_PER_PART)
    return max(1, min(blocks, blocks * block_macs // PART_MACS))


def split_parts(worth: int, slots: int) -> int:
    """Into how many parts a case worth `worth` parts is cut: no more than run at once (one slot: one part, one
    worker running every block, as before)."""
    return max(1, min(slots, worth))


@dataclass
class Ended:
    """How one thread order of one case (or one part of it) ended: done, died (`returncode`: how its worker ended),
    timed out, or skipped (never started: `_skip_moot`); `seconds` on the driver's clock, every launch of it."""

    task: int
    how: str
    returncode: int | None = None
    seconds: float = 0.0
    started: float = 0.0  # on the driver's clock (a split case's seconds: its first part's start to its last's end)


@dataclass
class Task:
    """One worker: one thread order over a run of cases (positions in the job's list), each `launches` times."""

    id: int
    order: str
    layout: str
    cases: list[int]
    part: int = 0  # which of its case's `parts` runs of blocks (a split sampled case; else 0 of 1: every block)
    parts: int = 1
    finished: int = 0  # of its cases
    since: float = 0.0  # when its current case began
    deadline: Deadline | None = None
    check_at: float = 0.0  # when its deadline is next worth asking (deadline.py reads /proc past the wall limit)
    ahead: Deadline | None = None  # started ahead of an earlier case: how long it may run so (SPECULATE_SHARE)
    ahead_at: float = float("inf")  # when that is next worth asking

    @property
    def current(self) -> int:
        return self.cases[self.finished]

    @property
    def key(self) -> Key:
        return self.order, self.part


class Schedule:
    """The cases of one job on one server. `start(task)` sends a task to it (False: the server is gone).
    `forward_only`: the sampled cases (run in the forward order alone); `splits`: how many parts each case's blocks
    are worth (parts_worth; a case not there: one); `costs`: each case's multiply-adds, its blocks' in one order
    (tasks start costliest first; None: in job order); `ahead(position, ends)`: a case whose every task ended
    while an earlier one is still to be told (what they left may be read back meanwhile)."""

    def __init__(self, server: Server, count: int, stateful: bool, slots: int, limit_s: float, max_hangs: int,
                 start: Callable[[Task], bool], limits: list[float] | None = None,
                 forward_only: set[int] | None = None, splits: dict[int, int] | None = None,
                 caps: Callable[[], dict[int, float]] | None = None, costs: dict[int, int] | None = None,
                 ahead: Callable[[int, dict[str, list[Ended]]], None] | None = None):
        self.server, self.count, self.stateful, self.start = server, count, stateful, start
        self.ahead, self.offered = ahead, set()  # the cases offered to `ahead`
        self.caps = caps
        self.slots, self.limit_s, self.max_hangs = max(slots, 1), limit_s, max_hangs
        # each case's; the caller's list, lowered in place by caps: a time-out is told with the limit the case had
        self.limits = limits or [limit_s] * count
        # Cases run in the forward order alone (a sampled large case of a kernel without state: half the time)
        self.forward_only = forward_only or set()
        self.splits = splits or {}
        self.whole: set[int] = set()  # split cases run again as one task (run_whole)
        self.waiting: list[Task] = []  # in the order they are to start
        self.running: dict[int, Task] = {}
        self.ends: dict[int, dict[Key, Ended]] = {}  # per case not told yet, per thread order and part
        self.told = 0  # cases told so far, in job order
        self.hangs = 0
        self.hung: set[int] = set()  # the cases told as hung
        self.costs = costs or {}
        # Tasks start costliest first, not in job order (one slot: whichever order, the last ends at the same time)
        self.speculating = not stateful and costs is not None and self.slots > 1
        self.preempted = 0  # tasks stopped while ahead of an earlier case, and queued again
        if stateful:
            self._workers_from(0)
        else:
            self.waiting = [task for index in range(count) for task in self._tasks_of(index)]
            if self.speculating:
                self.waiting.sort(key=self._cost, reverse=True)  # stable: ties stay in job order

    def orders(self, index: int) -> tuple[tuple[str, str], ...]:
        """The thread orders (and layouts) case `index` runs in."""
        return ORDERS[:1] if index in self.forward_only and not self.stateful else ORDERS

    def parts(self, index: int) -> int:
        """Into how many parts case `index`'s blocks are cut (1: one task runs them all)."""
        if self.stateful or index in self.whole:
            return 1
        return split_parts(self.splits.get(index, 1), self.slots)

    def keys(self, index: int) -> list[Key]:
        """What of case `index` must end before it is told: each thread order's parts."""
        return [(order, part) for order, _ in self.orders(index) for part in range(self.parts(index))]

    def run_whole(self, index: int) -> None:
        """The case just told is told again, from one task per thread order of all its blocks, queued first: its
        parts' merge would not be what one task gives (case_files.py). A case whose parts hung comes back so
        only where they read C (what they spun on): its hang is counted by the run told."""
        if index in self.hung:
            self.hung.discard(index)
            self.hangs -= 1
        self.whole.add(index)
        self.told = index
        self.waiting[:0] = self._tasks_of(index)

    def _cost(self, task: Task) -> int:
        """A task's estimated work: its case's multiply-adds, shared by its parts."""
        return self.costs.get(task.current, 0) // task.parts

    def cases(self, heartbeat: Callable[[int], None]) -> Iterator[tuple[int, dict[str, list[Ended]]]]:
        """Each case's position and its thread orders' ends (each order's parts' in part order), in job order;
        `heartbeat(first case not told)` whenever a quarter of a case's limit passed without one (the parent's
        deadline is a backstop to ours). The consumer may call run_whole(position) before asking for the next."""
        beat = time.monotonic()
        while self.told < self.count:
            self._lower_limits()
            self._start_waiting()
            self._take(self.server.replies(self._wait_s()))
            self._time_out()
            self._stop_ahead()
            if self.server.closed:
                self._lost_running()
            told = self.told
            self._offer_ahead()
            yield from self._in_job_order()
            if self.told != told or time.monotonic() - beat >= self.limit_s / 4:
                if self.told < self.count:
                    heartbeat(self.told)
                beat = time.monotonic()
        self._stop()

    def _task(self, order: str, layout: str, cases: list[int], part: int = 0, parts: int = 1) -> Task:
        return Task(self.server.task_id(), order, layout, cases, part, parts)

    def _tasks_of(self, index: int) -> list[Task]:
        """A task per thread order and part of case `index` (a kernel without state)."""
        parts = self.parts(index)
        return [self._task(order, layout, [index], part, parts) for order, layout in self.orders(index)
                for part in range(parts)]

    def _workers_from(self, first: int) -> None:
        """A fresh pair of workers for the cases from `first` on, one per thread order (a stateful kernel)."""
        self.waiting = [self._task(order, layout, list(range(first, self.count))) for order, layout in ORDERS]

    def _start_waiting(self) -> None:
        while self.waiting and len(self.running) < self.slots:
            task = self.waiting.pop(0)
            task.since = time.monotonic()
            limit_s = self.limits[task.current]
            task.deadline, task.check_at = Deadline(self.server.pid, limit_s), task.since + limit_s
            if self.speculating and self.waiting and task.current > min(waiting.current for waiting in self.waiting):
                task.ahead = Deadline(self.server.pid, limit_s * SPECULATE_SHARE)
                task.ahead_at = task.since + limit_s * SPECULATE_SHARE
            self.running[task.id] = task
            if self.server.closed or not self.start(task):
                self._end_case(task, DIED)

    def _wait_s(self) -> float:
        """Until the soonest deadline, or a heartbeat's interval at most (where limits may be lowered, less)."""
        soonest = min((min(task.check_at, task.ahead_at) for task in self.running.values()), default=float("inf"))
        interval = min(self.limit_s / 4, CAPS_EVERY_S) if self.caps is not None else self.limit_s / 4
        return max(0.0, min(soonest - time.monotonic(), interval))

    def _lower_limits(self) -> None:
        """Each case's limit lowered to its cap, where it has one: a running case's deadline with it."""
        for index, cap in (self.caps() if self.caps is not None else {}).items():
            if cap >= self.limits[index]:
                continue
            self.limits[index] = cap
            for task in self.running.values():
                if task.current == index:
                    task.deadline.shorten(cap)
                    task.check_at = min(task.check_at, task.since + cap)

    def _take(self, replies: list[Reply]) -> None:
        for reply in replies:
            task = self.running.get(reply.task)
            if task is None:
                continue  # a worker this schedule killed or stopped waiting for (or a line student code wrote)
            if reply.kind == "done" and reply.value == task.finished:
                self._end_case(task, DONE)
            elif reply.kind == "exit":
                self._end_case(task, DIED, reply.value)

    def _end_case(self, task: Task, how: str, returncode: int | None = None) -> None:
        """The task's current case ended so; a task that will run no more cases gives its slot back."""
        now, index = time.monotonic(), task.current
        self.ends.setdefault(index, {})[task.key] = Ended(task.id, how, returncode, now - task.since, task.since)
        task.finished += 1
        if how != DONE or task.finished == len(task.cases):
            del self.running[task.id]
            if how != DONE and not self.stateful:
                self._skip_moot(index, task)
            return
        task.since, task.check_at = now, now + self.limits[task.current]
        task.deadline.restart(self.limits[task.current])

    def _skip_moot(self, index: int, ended: Task) -> None:
        """A thread order of case `index` went wrong in this part: its later parts, and after the forward order's
        the reversed order's, cannot change how the case is told (its first problem in part order, the forward
        order's first: case_files.py), so those not started yet never start (a kernel hung everywhere costs a
        split case one limit, not one per round of parts)."""
        def moot(task: Task) -> bool:
            later = task.order == ended.order and task.part > ended.part
            return task.cases == [index] and (later or (ended.order == ORDERS[0][0] and task.order != ended.order))
        for task in [task for task in self.waiting if moot(task)]:
            self.waiting.remove(task)
            self.ends[index][task.key] = Ended(task.id, SKIPPED)

    def _time_out(self) -> None:
        now = time.monotonic()
        for task in [task for task in self.running.values() if now >= task.check_at]:
            left = task.deadline.remaining()  # past the wall-clock limit: the worker's waits for a CPU forgiven
            task.check_at = now + left
            if left <= 0:
                self.server.kill(task.id)
                self._end_case(task, TIMED_OUT)

    def _stop_ahead(self) -> None:
        """A task started ahead of an earlier case that still waits, past its share of the limit: the kernel may
        hang, and the slot it holds keeps a case the max_hangs cut may tell from starting. It is stopped and queued
        again (a stateless kernel's task ends alike in a new worker), and the rest start in job order."""
        now = time.monotonic()
        due = [task for task in self.running.values() if now >= task.ahead_at]
        if not due:
            return
        earliest = min((task.current for task in self.waiting), default=self.count)
        stopped = []
        for task in due:
            left = task.ahead.remaining()  # its own time: waits for a CPU forgiven, as its limit's
            task.ahead_at = now + (left if left > 0 else self.limits[task.current] * SPECULATE_SHARE)
            if left <= 0 and task.current > earliest:
                stopped.append(task)
        for task in stopped:
            self.server.kill(task.id)
            del self.running[task.id]
            self.waiting.append(self._task(task.order, task.layout, task.cases, task.part, task.parts))
        if stopped:  # what else started ahead is stopped likewise once past its share (a few ms apart)
            self.preempted += len(stopped)
            self.speculating = False
            self.waiting.sort(key=_job_order)

    def _lost_running(self) -> None:
        """The server is gone, and every worker with it: what ran ends there (what waits cannot start)."""
        for task in list(self.running.values()):
            self._end_case(task, DIED, self.server.process.poll())

    def _in_job_order(self) -> Iterator[tuple[int, dict[str, list[Ended]]]]:
        while self.told < self.count and len(self.ends.get(self.told, {})) == len(self.keys(self.told)):
            index, ends = self.told, self.ends.pop(self.told)
            self.told += 1
            if any(end.how == TIMED_OUT for end in ends.values()):
                self.hangs += 1  # once for the case, however many of its parts hung
                self.hung.add(index)
            if self.stateful and any(end.how != DONE for end in ends.values()):
                self._fresh_workers_after(index)
            yield index, self._by_order(index, ends)
            if self.hangs >= self.max_hangs:
                self.told = self.count  # the rest is not run, as the GPU path stops restarting its child

    def _offer_ahead(self) -> None:
        """Each case whose every task ended while an earlier case is still to be told, offered to `ahead` once."""
        if self.ahead is None:
            return
        for index, ends in self.ends.items():
            if index > self.told and index not in self.offered and len(ends) == len(self.keys(index)):
                self.offered.add(index)
                self.ahead(index, self._by_order(index, ends))

    def _by_order(self, index: int, ends: dict[Key, Ended]) -> dict[str, list[Ended]]:
        return {order: [ends[order, part] for part in range(self.parts(index))] for order, _ in self.orders(index)}

    def _fresh_workers_after(self, index: int) -> None:
        """A stateful kernel's case went wrong: its workers are ended, and what they ran past it is forgotten
        (it ran after the fault, as no GPU process would); fresh ones run the cases after it."""
        self._stop()
        self.ends.clear()
        if index + 1 < self.count:
            self._workers_from(index + 1)

    def _stop(self) -> None:
        for task in self.running.values():
            self.server.kill(task.id)
        self.running.clear()
        self.waiting.clear()


def _job_order(task: Task) -> tuple[int, int, int]:
    """Where a task of a kernel without state stands in job order: its case, the forward order first, its part."""
    return task.current, [order for order, _ in ORDERS].index(task.order), task.part
