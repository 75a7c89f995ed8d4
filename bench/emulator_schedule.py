"""The CPU driver's cases phase on one kernel with N workers at once: its wall, and when each task started and ended.

Usage: python3 bench/emulator_schedule.py [--slots N] [--rounds R] [--order costliest|job|both] [--timeline]
[SUBMISSION]   (default: tests/submissions/good_basic; N: the cores this process may use less one, what a GPU
grade's emulator gets (on_gpu.py); both start orders, taking turns within each round).

The kernel is built once (the emulator's cache warm, as a grade's second submission finds it); each round then runs
the project's testcases as the driver does (harness_driver.py: one server, schedule.py's tasks, case_files.py's
events): `costliest`, as the driver does now (the costliest tasks first, a case read back as soon as its tasks ended),
or `job`, as it did before (tasks started in job order, each case read back as it is told).
Prints per order the median and best over the rounds of:
- cases: the cases phase, from the schedule's start to the last case told (what the parts left read back and merged
  included): the driver's wait beside a GPU grade;
- driver: the driver's run less its build: server start, inputs written, the cases phase, printf passed on;
- the last task's end (from the phase's start); the driver's reading back of the cases' ends (case_files.py, event:
  the parts' C merged, the outputs saved), in all and after the last task's end (what telling in job order adds);
- last cases: each case's span (its first task's start to its last task's end), the three that ended last.
With --timeline, the last round's tasks in start order: case, thread order, part, multiply-adds, start and end in ms
from the phase's start (`stopped`: a task stopped while ahead of a waiting case, run again). Both orders must tell
every case alike (events less their times, C bit for bit): the script fails otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchlib import ROOT
from emulator_hot_path import built, reachable, specs, without_times

from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import case_files, harness_driver
from grader.execute.cpu.schedule import Ended, Schedule, Task
from grader.execute.job import CaseSpec, Job, student_output

ORDERS = ("costliest", "job")


class Recorded:
    """The driver's Cases, keeping each told case's ends (when its tasks started and ended)."""

    def __init__(self, cases: case_files.Cases):
        self.cases, self.ends = cases, []
        self.reading: list[tuple[float, float]] = []  # when each case's ends began to be read back, for how long

    def event(self, index: int, ends: dict[str, list[Ended]], launches: int, limit_s: float) -> dict | None:
        self.ends += [end for order_ends in ends.values() for end in order_ends]
        began = time.monotonic()
        event = self.cases.event(index, ends, launches, limit_s)
        self.reading.append((began, time.monotonic() - began))
        return event


def driver_run(binary: Path, stateless: bool, cases_: list[CaseSpec], work: Path, slots: int, order: str) -> dict:
    """One run of every case as the driver runs them: its figures, its timeline and what it told."""
    config = load_config()
    limit_s, launches = float(config.timeouts.run_s), 1 if stateless else config.kernel.launches_per_case
    reachable(work)
    job = Job("", "", config.kernel.contract(), [], str(work / "cache"), str(work), cases=cases_)
    cases = case_files.Cases(job, work / "run")
    copy = harness_driver.readable_copy(binary, work / "bin")
    began = time.monotonic()
    server = harness_driver.Server(copy, cases.folder, detect(), slots, len(cases_))
    started: dict[int, tuple[Task, float]] = {}

    def start(task: Task) -> bool:
        started[task.id] = (task, time.monotonic())
        return cases.start(server, task, tile, launches)

    try:
        tile = server.start(60)
        cases.write_inputs()
        limits = [limit_s] * len(cases_)
        recorded = Recorded(cases)
        phase = time.monotonic()
        now = order == "costliest"  # the driver as it is now; else as it was
        schedule = Schedule(server, len(cases_), not stateless, slots, limit_s, config.timeouts.max_restarts + 1,
                            start, limits, cases.sampled(), cases.splits(tile),
                            costs=cases.multiply_adds(tile) if now else None,
                            ahead=(lambda index, ends: cases.read_ahead(index, ends, launches)) if now else None)
        events = list(harness_driver.case_events(schedule, recorded, launches, limits, lambda index: None))
        cases_s = time.monotonic() - phase
        with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):
            cases.print_outputs()
        costs = cases.multiply_adds(tile)
    finally:
        server.close()
    outputs = [job.output_path(spec.name, student_output(0)).read_bytes()
               for spec in cases_ if job.output_path(spec.name, student_output(0)).exists()]
    last_end = max(end.started + end.seconds for end in recorded.ends)
    return {"cases_s": cases_s, "driver_s": time.monotonic() - began, "preempted": schedule.preempted,
            "tasks_s": last_end - phase, "reading_s": sum(seconds for _, seconds in recorded.reading),
            "reading_after_s": sum(seconds for at, seconds in recorded.reading if at >= last_end),
            "timeline": timeline(started, recorded.ends, costs, cases_, phase),
            "told": [[json.dumps(without_times(event), sort_keys=True) for event in events], outputs]}


def timeline(started: dict[int, tuple[Task, float]], ends: list[Ended], costs: dict[int, int],
             cases_: list[CaseSpec], phase: float) -> list[dict]:
    """Each task started, in start order: what it ran and when (ms from the phase's start; no end: stopped)."""
    ended = {end.task: end for end in ends}
    rows = []
    for task, at in sorted(started.values(), key=lambda row: row[1]):
        end = ended.get(task.id)
        rows.append({"case": cases_[task.cases[0]].name, "order": task.order, "part": f"{task.part}/{task.parts}",
                     "macs": costs.get(task.cases[0], 0) // task.parts, "start_ms": (at - phase) * 1000,
                     "end_ms": None if end is None else (end.started + end.seconds - phase) * 1000,
                     "how": "stopped" if end is None else end.how})
    return rows


def last_cases(rows: list[dict]) -> list[tuple[str, float, float]]:
    """The three cases whose last task ended last: name, span (first start to last end) and end, in ms."""
    spans: dict[str, list[float]] = {}
    for row in (row for row in rows if row["end_ms"] is not None):
        first, last = spans.get(row["case"], [row["start_ms"], row["end_ms"]])
        spans[row["case"]] = [min(first, row["start_ms"]), max(last, row["end_ms"])]
    ranked = sorted(spans.items(), key=lambda item: item[1][1], reverse=True)[:3]
    return [(name, end - first, end) for name, (first, end) in ranked]


def print_timeline(rows: list[dict]) -> None:
    print(f"  {'case':14s} {'order':9s} {'part':6s} {'M macs':>7s} {'start':>7s} {'end':>7s}  (ms)")
    for row in rows:
        end = "stopped" if row["end_ms"] is None else f"{row['end_ms']:7.1f}"
        print(f"  {row['case']:14s} {row['order']:9s} {row['part']:6s} {row['macs'] / 1e6:7.2f} "
              f"{row['start_ms']:7.1f} {end:>7s}  {row['how'] if row['how'] != 'done' else ''}")


def summary(runs: list[dict], key: str) -> str:
    values = [run[key] for run in runs]
    return f"{statistics.median(values):.3f} s (best {min(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slots", type=int, default=max(1, len(os.sched_getaffinity(0)) - 1))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--order", choices=[*ORDERS, "both"], default="both")
    parser.add_argument("--timeline", action="store_true", help="the last round's tasks, when each started and ended")
    parser.add_argument("submission", nargs="?", default=str(ROOT / "tests" / "submissions" / "good_basic"))
    options = parser.parse_args()
    orders = ORDERS if options.order == "both" else (options.order,)
    submission = Path(options.submission).resolve()
    cases_ = specs()
    runs: dict[str, list[dict]] = {order: [] for order in orders}
    with scratch_folder("emulator-schedule-") as work:  # where the sandbox's uid can reach
        binary, stateless = built(ROOT, submission, work / "build")
        for number in range(options.rounds):
            for order in orders:
                runs[order].append(driver_run(binary, stateless, cases_, work / f"run{number}-{order}",
                                              options.slots, order))
            if len({json.dumps(runs[order][-1]["told"][0]) for order in orders}) > 1 or \
                    len({b"".join(runs[order][-1]["told"][1]) for order in orders}) > 1:
                sys.exit(f"{submission.name}: the start orders told the cases differently (round {number})")
    print(f"{submission.name}: {len(cases_)} cases, {options.slots} slots, {len(os.sched_getaffinity(0))} cores, "
          f"{options.rounds} rounds: median (best)"
          + ("; every event and output the same in both orders" if len(orders) == 2 else ""))
    for order in orders:
        last = "  ".join(f"{name} {span:.0f} ms ending {end:.0f}" for name, span, end in
                         last_cases(runs[order][-1]["timeline"]))
        print(f"{order:9s} start: cases {summary(runs[order], 'cases_s')}, driver {summary(runs[order], 'driver_s')}"
              f"; the last task's end {summary(runs[order], 'tasks_s')}; ends read back "
              f"{summary(runs[order], 'reading_s')}, of which after the last task's end "
              f"{summary(runs[order], 'reading_after_s')}; stopped and run again: "
              f"{sum(run['preempted'] for run in runs[order])}\n{'':16s}last cases: {last}")
        if options.timeline:
            print_timeline(runs[order][-1]["timeline"])


if __name__ == "__main__":
    main()
