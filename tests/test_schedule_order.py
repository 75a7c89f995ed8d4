"""The CPU driver starts a kernel without state's costliest tasks first (schedule.py) and tells its cases in job order
all the same: every event, every C and what the kernel printed are what starting in job order gives, a kernel that
hangs included (the max_hangs cut tells nothing past it, whatever ran there first).
"""
import contextlib
import io
import itertools

import numpy as np
import pytest
from hardware import needs_cxx
from test_cpu_split_cases import EVERY_BLOCK, _kernel, _TaskIds, _without_seconds

from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import case_files, harness_driver
from grader.execute.cpu.build import build
from grader.execute.cpu.schedule import Schedule
from grader.execute.job import CaseSpec, Job, student_output
from grader.execute.protocol import EVENTS, check

# ---- the order alone ----------------------------------------------------------------------------------------


def _waiting(stateful: bool = False, slots: int = 4, costs: dict[int, int] | None = None) -> list[tuple]:
    """The start order of four cases: case 1 whole and worth 2 parts, case 3 sampled (forward alone), 4 parts."""
    schedule = Schedule(_TaskIds(), 4, stateful, slots, 10.0, 3, lambda task: True, forward_only={3},
                        splits={1: 2, 3: 4}, costs=costs)
    return [(task.cases, task.order, task.part) for task in schedule.waiting]


COSTS = {0: 10, 1: 400, 2: 300, 3: 800}  # each part: case 1's 200, case 3's 200


def test_tasks_start_costliest_first_ties_in_job_order():
    assert _waiting(costs=COSTS) == [
        ([2], "forward", 0), ([2], "reversed", 0),
        ([1], "forward", 0), ([1], "forward", 1), ([1], "reversed", 0), ([1], "reversed", 1),
        *[([3], "forward", part) for part in range(4)],
        ([0], "forward", 0), ([0], "reversed", 0)]


@pytest.mark.parametrize("stateful, slots, costs", [(False, 4, None), (False, 1, COSTS), (True, 4, COSTS)])
def test_tasks_start_in_job_order_without_costs_with_one_slot_or_with_state(stateful, slots, costs):
    """No costs: job order, as asked; one slot: the last task ends as late in any order; a kernel with state: its
    launches carry state from case to case, in the GPU child's order."""
    in_job_order = _waiting(stateful, slots)
    assert _waiting(stateful, slots, costs) == in_job_order
    assert [cases[0] for cases, _, _ in in_job_order] == sorted(cases[0] for cases, _, _ in in_job_order)


# ---- on the emulator ----------------------------------------------------------------------------------------

# Job order puts the costly cases late, as the project's testcases do: at tile 16 "whole" is worth two parts a
# thread order (176 · 176 · 176 multiply-adds), "large" runs its 156 blocks sampled, in parts
SPECS = [CaseSpec("tiny", 16, 16, 16, 1, "uniform"), CaseSpec("ragged", 33, 17, 40, 2, "uniform"),
         CaseSpec("whole", 176, 176, 176, 3, "uniform"), CaseSpec("square", 64, 64, 64, 4, "uniform"),
         CaseSpec("large", 200, 184, 40, 7, "uniform", EVERY_BLOCK)]
ORDERS = ("job", "costliest")


@pytest.fixture(scope="module")
def workspace():
    with scratch_folder("sgemm-order-") as work:  # one cache: the harness's own object built once
        yield work


def told(work, source: str, order: str, limit_s: float = 30.0, max_hangs: int = 3, slots: int = 2) -> dict:
    """What the CPU driver tells with the tasks started in `order` (costliest: as it is now; job: as it was): the
    events (times left out), C as saved for the parent, what the kernel printed; and which tasks started, in turn,
    how many were stopped and run again, and which cases were read back before their turn to be told."""
    contract = load_config().kernel.contract()
    folder = work / f"{order}-{next(_runs)}"
    job = Job("", "", contract, [], str(work / "cache"), str(folder), cases=SPECS, launches_per_case=3)
    built = build(source, contract, job.tile, work / "cache", folder, detect(), 120)
    assert built.binary is not None, built.message
    launches = 1 if built.state == [] else job.launches_per_case
    cases = case_files.Cases(job, folder / "run")
    server = harness_driver.Server(harness_driver.readable_copy(built.binary, folder / "bin"), cases.folder,
                                   detect(), slots, len(SPECS))
    started, read_ahead = [], []

    def start(task) -> bool:
        started.append((SPECS[task.cases[0]].name, task.order, task.part))
        return cases.start(server, task, tile, launches)

    def ahead(index: int, ends: dict) -> None:
        read_ahead.append(SPECS[index].name)
        cases.read_ahead(index, ends, launches)

    try:
        tile = server.start(60)
        cases.write_inputs()
        limits = [limit_s] * len(SPECS)
        now = order == "costliest"  # the driver as it is now; else as it was (job order, each case read as told)
        schedule = Schedule(server, len(SPECS), built.state != [], slots, limit_s, max_hangs, start, limits,
                            cases.sampled(), cases.splits(tile),
                            costs=cases.multiply_adds(tile) if now else None, ahead=ahead if now else None)
        events = [check(event, EVENTS) for event in
                  harness_driver.case_events(schedule, cases, launches, limits, lambda index: None)]
        with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())) as stream:
            cases.print_outputs()
            printed = stream.buffer.getvalue()
    finally:
        server.close()
    outputs = {spec.name: [np.load(path).view(np.uint32).tobytes() for number in range(launches)
                           if (path := job.output_path(spec.name, student_output(number))).exists()]
               for spec in SPECS}
    return {"events": [_without_seconds(event) for event in events], "outputs": outputs, "printed": printed,
            "started": started, "preempted": schedule.preempted, "read_ahead": read_ahead}


_runs = itertools.count()


def _same(job: dict, costliest: dict) -> None:
    assert costliest["events"] == job["events"]
    assert costliest["outputs"] == job["outputs"]  # C bit for bit, guard bands included, every distinct launch
    assert costliest["printed"] == job["printed"]


GOOD_BASIC = _kernel("good_basic")
PRINTS_IN_LARGE = GOOD_BASIC.replace("    float sum = 0.0f;", """\
    if (m == 200 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        printf("large ran\\n");
    float sum = 0.0f;""")


@needs_cxx
@pytest.mark.parametrize("name", ["good_basic", "missing_load_barrier", "no_bounds_checks", "illegal_address",
                                  "trap", "call_counter", "prints_in_large", "c_index_collision",
                                  "accumulate_into_c"])
def test_the_costliest_first_tells_every_case_as_job_order_tells_it(workspace, name):
    """Right, racy, reading and writing out of bounds, faulting in every case, carrying state from launch to
    launch (its workers keep job order), printing in the last case, storing one element twice or reading C (the
    split cases' parts are not merged: read back ahead, then run again whole, run_whole)."""
    source = PRINTS_IN_LARGE if name == "prints_in_large" else _kernel(name)
    job, costliest = (told(workspace, source, order) for order in ORDERS)
    _same(job, costliest)
    assert len(job["events"]) == len(SPECS)
    if name == "call_counter":  # a kernel with state: a worker per thread order, every case in job order
        assert costliest["started"] == job["started"] == [("tiny", "forward", 0), ("tiny", "reversed", 0)]
    else:
        assert job["started"][0][0] == "tiny"
        assert costliest["started"][0] == ("whole", "forward", 0)  # the costliest: started first
        names = [name for name, _, _ in costliest["started"]]
        assert names.index("large") < min(names.index(small) for small in ("tiny", "ragged", "square"))
    if name == "prints_in_large":
        assert job["printed"] == b"large ran\n"
    if name in ("c_index_collision", "accumulate_into_c"):  # "large" (k < n): part 0, then every block in one
        assert costliest["started"].count(("large", "forward", 0)) == job["started"].count(("large", "forward", 0)) \
            == 2


HANGS_IN = GOOD_BASIC.replace("    float sum = 0.0f;", """\
    if (HANGS) {
        volatile int forever = 1;
        while (forever) {
        }
    }
    float sum = 0.0f;""")
# The last case, the costliest but for "whole", runs first and ends well; a case past the cut it is all the same
HANGS_IN_TWO_SMALL_CASES = HANGS_IN.replace("HANGS", "m == 33 || m == 64").replace("    float sum = 0.0f;", """\
    if (m == 200 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        printf("large ran\\n");
    float sum = 0.0f;""", 1)


@needs_cxx
def test_nothing_past_the_max_hangs_cut_is_told_though_it_ran_first(workspace):
    """"ragged" and "square" hang: after the second, nothing more is told, as the GPU path gives up. "large" ran
    (and printed, and was read back) before either timed out, started first: it is told as job order tells it, not
    at all."""
    job, costliest = (told(workspace, HANGS_IN_TWO_SMALL_CASES, order, limit_s=1.0, max_hangs=2) for order in ORDERS)
    _same(job, costliest)
    assert [(event["case"], event["event"], event.get("problem", {}).get("event")) for event in job["events"]] == [
        ("tiny", "case", None), ("ragged", "case_error", "timeout"), ("whole", "case", None),
        ("square", "case_error", "timeout")]
    assert ("large", "forward", 0) in costliest["started"] and b"large ran" not in costliest["printed"]
    # "large", never told, left no C for the parent, though it ran and (on a machine with a core to spare for it
    # while "ragged" hangs: not a loaded CI's) was read back before the cut
    assert costliest["outputs"]["large"] == []


@needs_cxx
def test_a_kernel_hanging_everywhere_stops_what_started_ahead_and_goes_on_in_job_order(workspace):
    """The costly tasks started first hang: past their share of the limit they are stopped, and the first cases,
    the ones the cut tells, start; told as job order tells it."""
    job, costliest = (told(workspace, HANGS_IN.replace("HANGS", "1"), order, limit_s=1.0) for order in ORDERS)
    _same(job, costliest)
    assert [event["problem"]["event"] for event in job["events"]] == ["timeout"] * 3
    assert costliest["preempted"] == 2 and job["preempted"] == 0
    # whole's two forward parts started, were stopped, and tiny started next
    assert costliest["started"][:3] == [("whole", "forward", 0), ("whole", "forward", 1), ("tiny", "forward", 0)]
