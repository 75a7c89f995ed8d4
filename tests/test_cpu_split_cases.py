"""A sampled large case of a kernel without state runs its blocks in parts, each in a worker of its own, side by
side (schedule.py), and so does a whole case of many blocks, in both thread orders; each is told exactly as one
worker running every block in turn tells it (case_files.py): the same event, the same C, bit for bit; where the
parts could have seen each other, one worker per order runs it again.
"""
import contextlib
import io
import itertools
import json

import numpy as np
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.cases import load_cases
from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import case_files, harness_driver
from grader.execute.cpu.build import build
from grader.execute.cpu.case_files import (
    MAX_UNWRITTEN_READS,
    ONE_WORKERS_SHARE,
    PRINTF_CAP,
    PRINTF_CUT,
    joined_printf,
    merged_output,
    merged_reports,
    one_worker_met_it,
    parts_apart,
)
from grader.execute.cpu.sampling import BlockSample, block_parts
from grader.execute.cpu.schedule import BLOCKS_PER_PART, PART_MACS, Ended, Schedule, parts_worth, split_parts
from grader.execute.cpu.schedule import DONE as DONE_HOW
from grader.execute.job import CaseSpec, Job, student_output
from grader.execute.protocol import EVENTS, HARNESS_REPORTS, check, harness_report
from grader.judge.inputs import guarded_c
from grader.pipeline import RunPlan, grade
from grader.report.json_report import to_json

# ---- the pure parts ---------------------------------------------------------------------------------------


def test_blocks_are_cut_into_contiguous_parts_of_nearly_equal_length():
    blocks = list(range(37))
    parts = block_parts(blocks, 4)
    assert [len(part) for part in parts] == [9, 9, 9, 10]
    assert [block for part in parts for block in part] == blocks  # in order, none lost, none twice
    assert block_parts(blocks, 1) == [blocks]


def test_a_case_is_cut_into_a_part_per_so_many_blocks_but_no_more_than_run_at_once():
    assert split_parts(parts_worth(130, True, 0), 16) == -(-130 // BLOCKS_PER_PART)
    assert split_parts(parts_worth(10_000, True, 0), 16) == 16
    assert split_parts(parts_worth(130, True, 0), 1) == 1  # one slot: one worker runs every block, as before
    assert split_parts(parts_worth(3, True, 0), 16) == 1


def test_a_whole_case_is_cut_into_a_part_per_so_much_work():
    """A whole case's blocks are cheap: a part must hold PART_MACS multiply-adds to be worth its fixed cost."""
    square_256 = 256 * 256 * 256  # at tile 16: 256 blocks of 256 threads × k = 256
    assert parts_worth(256, False, square_256 // 256) == square_256 // PART_MACS == 8
    assert parts_worth(64, False, square_256 // 64) == 8  # at tile 32: fewer blocks, the same work
    assert parts_worth(12, False, 256 * 64) == 1  # ragged_m: far below one part's worth, never cut
    assert parts_worth(2, False, PART_MACS * 10) == 2  # never more parts than blocks


class _TaskIds:
    """What a Schedule asks of its server before anything runs: a number for each task."""

    def __init__(self):
        self.task_id = itertools.count().__next__


@pytest.mark.parametrize("stateful, slots, expected", [
    (False, 4, [([0], "forward", 0, 1), ([0], "reversed", 0, 1)] + [([1], "forward", p, 4) for p in range(4)]
     + [([2], order, p, 3) for order in ("forward", "reversed") for p in range(3)]),
    (False, 1, [([0], "forward", 0, 1), ([0], "reversed", 0, 1), ([1], "forward", 0, 1), ([2], "forward", 0, 1),
                ([2], "reversed", 0, 1)]),
    # A kernel with state: its cases in one worker per order, as before (its state carries from block to block)
    (True, 4, [([0, 1, 2], "forward", 0, 1), ([0, 1, 2], "reversed", 0, 1)]),
])
def test_only_cases_of_a_kernel_without_state_worth_it_are_cut_into_parts(stateful, slots, expected):
    """Case 1 is sampled (its forward order alone), case 2 whole and worth 3 parts (both orders), case 0 one part."""
    schedule = Schedule(_TaskIds(), 3, stateful, slots, 10.0, 3, lambda task: True, forward_only={1},
                        splits={0: 1, 1: 10, 2: 3})
    assert [(task.cases, task.order, task.part, task.parts) for task in schedule.waiting] == expected


def _image(m=3, n=5):
    return guarded_c(m, n)


def test_c_is_merged_from_the_initial_image_each_part_writing_what_it_changed():
    start = _image()
    first, second = start.copy(), start.copy()
    first[4096], second[4097], second[-1] = 1.0, 2.0, 3.0  # second: an element and a stray store into the guard
    merged = merged_output(start, [first, start.copy(), second])  # a part that changed nothing changes nothing
    expected = start.copy()
    expected[4096], expected[4097], expected[-1] = 1.0, 2.0, 3.0
    assert np.array_equal(merged.view(np.uint32), expected.view(np.uint32))


def test_two_parts_that_changed_one_element_are_no_merge():
    start = _image()
    first, second = start.copy(), start.copy()
    first[4100], second[4100] = 1.0, 1.0  # even the same value: one worker would have seen two stores there
    assert merged_output(start, [first, second]) is None


DONE = {"event": "done", "a_changed": False, "b_changed": False, "races": 0, "c_collisions": 0}


def test_reports_of_the_parts_are_told_as_one_launchs():
    spec = CaseSpec("x", 40, 30, 20, 1, "uniform")
    index = {"event": "index", "site": 3, "matrix": "B", "thread": [0, 0, 0], "block": [0, 0, 0], "stride": 30}
    parts = [
        [{**index, "row": 20, "column": 1},  # past B's rows
         {"event": "tile_loop", "fewest": 2, "most": 2, "threads": 256},
         {"event": "c_mapping", "stores": 256, "as_launched": 256, "transposed": 16},
         {"event": "unwritten_in_c", "elements": 3, "row": 9, "column": 2, "line": 7}, {**DONE, "races": 2}],
        [{**index, "row": 21, "column": 2},  # past B's rows again: one launch would not have told it twice
         {**index, "row": 1, "column": 31},  # past its columns: a new kind at that site
         {"event": "tile_loop", "fewest": 1, "most": 3, "threads": 128},
         {"event": "c_mapping", "stores": 128, "as_launched": 120, "transposed": 0, "thread": [1, 0, 0],
          "block": [2, 0, 0], "row": 0, "column": 0, "line": 7},
         {"event": "unwritten_in_c", "elements": 1, "row": 3, "column": 4, "line": 7},
         {**DONE, "a_changed": False, "races": 1}],
    ]
    merged = {event["event"]: event for event in reversed(merged_reports(parts, spec))}
    assert [(e["row"], e["column"]) for e in merged_reports(parts, spec) if e["event"] == "index"] == [(20, 1), (1, 31)]
    assert merged["tile_loop"] == {"event": "tile_loop", "fewest": 1, "most": 3, "threads": 384}
    assert (merged["c_mapping"]["stores"], merged["c_mapping"]["as_launched"], merged["c_mapping"]["transposed"]) \
        == (384, 376, 16)
    assert merged["c_mapping"]["block"] == [2, 0, 0]  # the first misplaced store of the launch: the only part's
    assert (merged["unwritten_in_c"]["elements"], merged["unwritten_in_c"]["row"]) == (4, 3)  # C's first, in order
    assert merged["done"]["races"] == 3
    for event in merged_reports(parts, spec):
        check(event, HARNESS_REPORTS)  # what the event is made from is still a report the harness could write


@pytest.mark.parametrize("crossing", [
    {"event": "c_read", "site": 1, "row": 0, "column": 0, "thread": [0, 0, 0], "block": [0, 0, 0]},
    {"event": "c_collision", "row": 0, "column": 0, "line": 3, "thread": [0, 0, 0], "block": [0, 0, 0],
     "other_line": 3, "other_thread": [1, 0, 0], "other_block": [1, 0, 0]},
    {**DONE, "a_changed": True},
])
def test_what_another_parts_blocks_could_have_changed_is_no_merge(crossing):
    assert parts_apart([[DONE], [DONE]])
    assert not parts_apart([[DONE], [crossing, DONE]])


def test_a_thread_that_stored_nothing_beside_misplaced_stores_is_no_merge():
    unstored = {"event": "c_unstored", "thread": [0, 0, 0], "block": [0, 0, 0], "row": 0, "column": 0}
    misplaced = {"event": "c_mapping", "stores": 10, "as_launched": 9, "transposed": 0}
    placed = {**misplaced, "as_launched": 10}
    assert parts_apart([[placed, unstored], [placed]])  # its element is nobody's but its own: nobody stored it
    assert not parts_apart([[placed, unstored], [misplaced]])


def _unwritten(parts: list[list[dict]]) -> dict:
    return next(event for event in merged_reports(parts, CaseSpec("x", 40, 30, 20, 1, "uniform"))
                if event["event"] == "unwritten_in_c")


def test_the_read_c_first_unwritten_value_names_is_numbered_as_one_launch_numbers_it():
    """A launch names so many unwritten reads (cuda_emu.h, MAX_UNWRITTEN_READS), in its blocks' order: the value's
    read is numbered after the reads the parts before named, and past the last name the one worker had none left
    for it (nothing of the read is told)."""
    read = {"event": "unstored_read", "array": "As", "two_d": True, "row": 0, "column": 0, "line": 20,
            "thread": [0, 0, 0], "block": [0, 0, 0]}
    named = {"mark": 7, "array": "As", "two_d": True, "entry_row": 0, "entry_column": 3, "read_line": 20,
             "read_thread": [3, 0, 0], "read_block": [1, 0, 0]}
    marked = {"event": "unwritten_in_c", "elements": 1, "row": 5, "column": 0, "line": 23, "thread": [0, 5, 0],
              "block": [1, 0, 0], **named}

    def done(count):
        return {**DONE, "unwritten_reads": count}
    most = MAX_UNWRITTEN_READS
    # C's first marked element is the first part's: its number is its own
    assert _unwritten([[read, marked, done(9)], [read, {**marked, "row": 9}, done(9)]]) == {**marked, "elements": 2}
    assert _unwritten([[read, done(40)], [read, marked, done(9)]]) == {**marked, "mark": 47}
    assert _unwritten([[read, done(most - 7)], [read, marked, done(9)]])["mark"] == most  # the last name
    unnamed = _unwritten([[read, done(most - 6)], [read, marked, done(9)]])
    assert unnamed == {key: value for key, value in marked.items() if key not in named}
    check(unnamed, HARNESS_REPORTS)
    # Parts that did not say how many reads they named: no telling, one worker runs the case again
    assert parts_apart([[read, done(3)], [read, marked, done(9)]])
    assert not parts_apart([[read, DONE], [read, marked, DONE]])


def test_the_parts_printf_output_is_capped_once_as_one_launchs():
    assert joined_printf([b"a\n", b"b\n"]) == b"a\nb\n"
    half = b"x" * (PRINTF_CAP // 2 + 10)
    assert joined_printf([half, half]) == (half + half)[:PRINTF_CAP] + PRINTF_CUT
    capped = b"y" * PRINTF_CAP + PRINTF_CUT
    assert joined_printf([capped, b"z"]) == capped  # the first part filled the launch's cap: nothing after it
    assert joined_printf([capped]) == capped


# ---- on the emulator --------------------------------------------------------------------------------------

def _kernel(name: str) -> str:
    return (SUBMISSIONS / name / "kernel.cu").read_text()


M, N, K = 200, 184, 40  # ragged every way at tile 16: a 13 × 12 grid of 156 blocks
EVERY_BLOCK = BlockSample(seed=5, interior=500).to_wire()  # every interior tile: block (9, 11) among them
SPECS = [CaseSpec("small", 33, 17, 40, 2, "uniform"), CaseSpec("large", M, N, K, 7, "uniform", EVERY_BLOCK)]


def run_split(source: str, *slots: int, specs: list[CaseSpec] = SPECS, limit_s: float = 30.0) -> list[dict]:
    """What the CPU driver tells of each case with so many `slots` workers at once, each in turn: the events
    (seconds left out), C as saved for the parent, what the kernel printed, and the blocks files its tasks ran
    (how many blocks each)."""
    contract = load_config().kernel.contract()
    with scratch_folder("sgemm-split-") as work:
        job = Job("", "", contract, [], str(work / "cache"), str(work), cases=specs)
        built = build(source, contract, job.tile, work / "cache", work, detect(), 120)
        assert built.binary is not None, built.message
        assert built.state == []  # a kernel without state: the split applies
        return [_driven(job, built.binary, work / f"run{number}", count, limit_s)
                for number, count in enumerate(slots)]


def _driven(job: Job, binary, folder, slots: int, limit_s: float) -> dict:
    specs = job.cases
    for spec in specs:
        job.output_path(spec.name, student_output(0)).unlink(missing_ok=True)
    cases = case_files.Cases(job, folder)
    copy = harness_driver.readable_copy(binary, folder.parent / f"bin-{folder.name}")  # the last run's may be busy
    server = harness_driver.Server(copy, cases.folder, detect(), slots, len(specs))
    try:
        tile = server.start(60)
        cases.write_inputs()
        limits = [limit_s] * len(specs)
        schedule = Schedule(server, len(specs), False, slots, limit_s, 3,
                            lambda task: cases.start(server, task, tile, 1), limits, cases.sampled(),
                            cases.splits(tile))
        events = [check(event, EVENTS) for event in
                  harness_driver.case_events(schedule, cases, 1, limits, lambda index: None)]
        with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())) as stream:
            cases.print_outputs()
            printed = stream.buffer.getvalue()
    finally:
        server.close()
    outputs = {spec.name: np.load(job.output_path(spec.name, student_output(0))).view(np.uint32)
               for spec in specs if job.output_path(spec.name, student_output(0)).exists()}
    last = cases.case_folder(len(specs) - 1)
    blocks = [len(path.read_text().splitlines()) for path in sorted(
        last.glob("blocks-*.txt"), key=lambda path: int(path.stem.split("-")[1]))]
    return {"events": [{key: value for key, value in event.items() if key != "seconds"} for event in events],
            "outputs": outputs, "printed": printed, "blocks": blocks, "hangs": schedule.hangs,
            "tasks": len(list(last.glob("report-*.jsonl"))),
            "cpu_s": [event["cpu_s"] for path in last.glob("report-*.jsonl")
                      for event in map(harness_report, path.read_text().splitlines()) if event["event"] == "done"]}


GOOD_BASIC = _kernel("good_basic")
STORE = "        C[row * n + col] = sum;"
# good_basic reading A[row][k] (past A's row: the next row's first element, inside A's buffer) in the first column
# of blocks: in every part
READS_A_PAST_ITS_ROWS = GOOD_BASIC.replace(STORE, """        C[row * n + col] = sum;
    float off = 0.0f;
    if (col == 0 && row + 1 < m)
        off = A[row * k + k];
    if (row < m && col < n && off != off)
        C[row * n + col] = off;""")


def _ran_in_parts(one: dict, split: dict, parts: list[int]) -> None:
    """The split ran in these parts (blocks each); where the case went wrong, those that could not change what is
    told may never have started (schedule.py, _skip_moot): the first ones did."""
    if any(event["event"] == "case_error" for event in one["events"]):
        assert split["blocks"] and split["blocks"] == parts[:len(split["blocks"])]
    else:
        assert split["blocks"] == parts


def _same(one: dict, split: dict) -> None:
    assert split["events"] == one["events"]
    assert split["printed"] == one["printed"]
    assert one["outputs"].keys() == split["outputs"].keys()
    for name, output in one["outputs"].items():
        assert np.array_equal(output, split["outputs"][name]), name  # C bit for bit, guard bands included


SPLIT_KERNELS = [
    "good_basic",  # right everywhere
    "trap_one_interior_block",  # a fault in block (9, 11): in one part, after parts that ran clean (forward)
    "store_outside_c",  # stores into the guard band past C, from the last block row
    "loads_check_k_only",  # reads past A's and B's ends at several sites: each site's kinds told once
    "missing_load_barrier",  # races in every block: the first of each kind, the first part's
    "unwritten_times_zero",  # values of shared entries no thread stored reach C
    "printf_debug",  # prints past the launch's printf cap
    "tile_never_loaded",  # values of shared entries no thread stored reach C in every block
    "reads_a_past_its_rows",  # one site reads off A in many blocks (inside A's buffer): told once a launch
]


@needs_cxx
@pytest.mark.parametrize("name", SPLIT_KERNELS)
def test_a_split_case_is_told_as_one_worker_running_every_block_tells_it(name):
    source = READS_A_PAST_ITS_ROWS if name == "reads_a_past_its_rows" else _kernel(name)
    one, split = run_split(source, 1, 4)
    assert one["blocks"] == [156]
    _ran_in_parts(one, split, [39] * 4)
    _same(one, split)


@needs_cxx
@pytest.mark.parametrize("name", ["c_index_collision", "accumulate_into_c", "launch_x_rows"])
def test_a_case_whose_parts_could_see_each_other_is_run_again_by_one_worker(name):
    """Two threads storing one element, a read of C, threads storing elements the launch gives others: the parts'
    merge is not trusted; one worker's run is told."""
    one, split = run_split(_kernel(name), 1, 4)
    assert split["blocks"] == [39] * 4 + [156]  # the parts, then the case again in one worker
    _same(one, split)


HANGS_IN_TWO_BLOCKS = GOOD_BASIC.replace("    float sum = 0.0f;", """\
    if ((blockIdx.x == 3 && blockIdx.y == 2) || (blockIdx.x == 9 && blockIdx.y == 11)) {
        volatile int forever = 1;
        while (forever) {
        }
    }
    float sum = 0.0f;""")


@needs_cxx
def test_a_split_case_whose_parts_hang_times_out_once_with_the_cases_limit():
    """Blocks (3, 2) and (9, 11) hang, in the first part and the last: each part has the case's limit, and the case
    is one hang."""
    one, split = run_split(HANGS_IN_TWO_BLOCKS, 1, 4, limit_s=2.0)
    assert split["blocks"] == [39] * 4
    _same(one, split)
    assert split["events"][1]["problem"] == {"event": "timeout", "limit_s": 2.0}
    assert one["hangs"] == split["hangs"] == 1


FIRST_ELEMENT_TWICE = STORE + """
        if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0) C[0] = sum;"""


@needs_cxx
def test_two_blocks_of_different_parts_storing_one_element_are_told_as_a_collision():
    """Block (0, 0) stores C[0][0] in the first part, the last block again in the last: neither part saw two
    stores, so only the merge shows it (both changed that element); one worker's run then tells the collision."""
    source = GOOD_BASIC.replace(STORE, FIRST_ELEMENT_TWICE)
    one, split = run_split(source, 1, 4)
    assert split["blocks"] == [39] * 4 + [156]
    _same(one, split)
    large = split["events"][1]
    assert large["collisions"] and (large["collisions"][0]["row"], large["collisions"][0]["column"]) == (0, 0)
    assert large["collisions"][0]["other_block"] == [0, 0, 0] and large["c_collisions"] == 1


NOTHING_STORED = """__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {
}
"""


@needs_cxx
def test_a_part_that_stored_nothing_leaves_the_image_the_merge_starts_from():
    """The merge's start (judge/inputs.py, guarded_c) is C as the harness fills it, bit for bit."""
    split, = run_split(GOOD_BASIC[:GOOD_BASIC.index("__global__")] + NOTHING_STORED, 4)
    assert np.array_equal(split["outputs"]["large"], guarded_c(M, N).view(np.uint32))
    assert split["outputs"]["large"].tobytes() == guarded_c(M, N).tobytes()


# ---- a whole grade ----------------------------------------------------------------------------------------


def _without_seconds(value):
    """A result's part with every time left out (`seconds`, `*_s`): what a run measured, not what it found."""
    if isinstance(value, dict):
        return {key: _without_seconds(item) for key, item in value.items()
                if key != "seconds" and not key.endswith("_s")}
    if isinstance(value, list):
        return [_without_seconds(item) for item in value]
    return value


def _graded_checks(config_file, name: str, workers: int) -> list[dict]:
    """The result JSON's checks of a CPU grade on every case (square_256 split whole, in both orders, the large
    ones by sampled blocks), times left out."""
    config = load_config(config_file)
    config.timeouts.run_s = 30  # the large cases on a shared machine, one worker
    cases = load_cases(config.testcases_dir)
    result = json.loads(to_json(grade(SUBMISSIONS / name, config, cases, RunPlan("cpu", emulator_workers=workers))))
    return [_without_seconds(check) for check in result["checks"]]


@needs_cxx
@pytest.mark.parametrize("name", ["good_basic", "good_tile32_macro_sync"])
def test_a_cpu_grade_with_workers_side_by_side_is_the_grade_of_one_worker(config_file, name):
    one, split = (_graded_checks(config_file, name, workers) for workers in (1, 4))
    assert split == one
    statuses = [check["status"] for check in one if check["kind"] == "case"]
    assert len(statuses) > 20 and set(statuses) == {"passed"}


@needs_cxx
def test_a_wrong_bound_fails_the_large_cases_alike_with_workers_side_by_side(config_file):
    """b_column_unbounded: large_ragged fails at its last block column, in the last part, with ragged_n's cause."""
    one, split = (_graded_checks(config_file, "b_column_unbounded", workers) for workers in (1, 4))
    assert split == one
    large = next(check for check in one if check["name"] == "large_ragged")
    assert large["status"] != "passed" and "out-of-bounds read of B at line 19" in large["message"]


def _gpu_case_checks(config_file, name: str, workers: int) -> dict[str, tuple[str, str]]:
    """Each case's status and words in a GPU grade, the emulator beside it with so many workers."""
    config = load_config(config_file)
    cases = load_cases(config.testcases_dir)
    result = grade(SUBMISSIONS / name, config, cases, RunPlan("gpu", emulator_workers=workers))
    return {check.name: (check.status, check.message) for check in result.checks if check.kind == "case"}


@pytest.mark.gpu
@needs_gpu
@needs_cxx
@pytest.mark.parametrize("name", ["good_basic", "good_tile32_macro_sync", "tile_never_loaded", "c_index_collision"])
def test_a_gpu_grade_with_the_emulator_split_beside_it_is_the_grade_with_one_emulator_worker(config_file, name):
    """Beside the GPU child the emulator cuts square_256 (both orders) and the large cases into parts with 8 workers,
    none with 1: the cases read the same (unwritten reads named, a collision's case run again by one worker)."""
    one, split = (_gpu_case_checks(config_file, name, workers) for workers in (1, 8))
    assert split == one
    assert len(one) > 20


# ---- a whole case, in both thread orders ------------------------------------------------------------------

# 156 blocks of 256 threads × k = 224: 8.9 M multiply-adds, worth 4 parts (PART_MACS) of 39 blocks
WHOLE = CaseSpec("whole", M, N, 224, 9, "uniform")
WHOLE_SPECS = [CaseSpec("small", 33, 17, 40, 2, "uniform"), WHOLE]
SPLIT_IN_BOTH_ORDERS = [39] * 8  # four parts forward, four reversed

# Reads before A in blocks (1, 0) and (10, 12), in the first part and the last: in the forward layout that is
# mapped memory (A ends at its guard page), in the reversed one A starts right after its guard page, so that order
# faults, at the block its worker runs first, (10, 12), as one worker running the grid backwards meets it
READS_BEFORE_A_IN_TWO_BLOCKS = GOOD_BASIC.replace("    float sum = 0.0f;", """    float sum = 0.0f;
    if (tx == 0 && ty == 0 && ((blockIdx.x == 1 && blockIdx.y == 0) || (blockIdx.x == 10 && blockIdx.y == 12)))
        sum = A[-1 - (int)blockIdx.x];""")


@needs_cxx
# the last: the reversed order faults in its first part's last block, not in (1, 0)
@pytest.mark.parametrize("name", SPLIT_KERNELS + ["reads_before_a_in_two_blocks"])
def test_a_split_whole_case_is_told_as_one_worker_running_every_block_tells_it(name):
    source = {"reads_a_past_its_rows": READS_A_PAST_ITS_ROWS,
              "reads_before_a_in_two_blocks": READS_BEFORE_A_IN_TWO_BLOCKS}.get(name) or _kernel(name)
    one, split = run_split(source, 1, 4, specs=WHOLE_SPECS)
    assert one["blocks"] == []  # one worker: the grid, no block list
    _ran_in_parts(one, split, SPLIT_IN_BOTH_ORDERS)
    assert split["tasks"] == len(split["blocks"])  # no part's merge was refused
    _same(one, split)
    if name == "reads_before_a_in_two_blocks":
        problem = one["events"][1]["problem"]
        assert one["events"][1]["schedule"] == "reversed" and problem["block"] == [10, 12, 0], problem


@needs_cxx
@pytest.mark.parametrize("name", ["c_index_collision", "accumulate_into_c", "launch_x_rows"])
def test_a_whole_case_whose_parts_could_see_each_other_is_run_again_by_one_worker_per_order(name):
    """Two threads storing one element, a read of C, threads storing elements the launch gives others: one worker
    per order runs the case again (its whole grid: no block list), and that run is told."""
    one, split = run_split(_kernel(name), 1, 4, specs=WHOLE_SPECS)
    assert split["blocks"] == SPLIT_IN_BOTH_ORDERS and split["tasks"] == 8 + 2
    _same(one, split)


@needs_cxx
def test_two_blocks_of_different_parts_of_a_whole_case_storing_one_element_are_told_as_a_collision():
    source = GOOD_BASIC.replace(STORE, FIRST_ELEMENT_TWICE)
    one, split = run_split(source, 1, 4, specs=WHOLE_SPECS)
    assert split["tasks"] == 8 + 2
    _same(one, split)
    assert split["events"][1]["collisions"][0]["other_block"] == [0, 0, 0]


# Each block prints its name, block (5, 6) (the 78th, the last of the second of four parts) traps after printing
PRINTS_THEN_TRAPS = GOOD_BASIC.replace("    float sum = 0.0f;", """    float sum = 0.0f;
    if (tx == 0 && ty == 0)
        printf("block %d %d\\n", (int)blockIdx.x, (int)blockIdx.y);
    if (blockIdx.x == 5 && blockIdx.y == 6)
        __trap();""")


@needs_cxx
def test_a_split_case_prints_what_one_worker_printed_before_it_stopped():
    """Each printf is written as it is made (harness.cpp), so one worker printed every block's line up to the trap;
    the parts after the one that trapped ran side by side and printed, but one worker never reached their blocks."""
    one, split = run_split(PRINTS_THEN_TRAPS, 1, 4, specs=[WHOLE])
    _same(one, split)
    assert one["events"][0]["event"] == "case_error"
    assert one["printed"].endswith(b"block 5 6\n") and one["printed"].count(b"\n") == 78


HANGS_EVERYWHERE = GOOD_BASIC.replace("    float sum = 0.0f;", """\
    volatile int forever = 1;
    while (forever) {
    }
    float sum = 0.0f;""")


@needs_cxx
def test_a_whole_case_hung_in_its_forward_parts_never_starts_what_cannot_change_its_verdict():
    """Two workers: the forward order's two parts hang side by side; the reversed order's parts, waiting, could not
    change what is told (the forward order's first problem), so they never run: one limit, not two, and the case
    reads as one worker's hang."""
    one, split = run_split(HANGS_EVERYWHERE, 1, 2, specs=[WHOLE], limit_s=1.0)
    assert split["blocks"] == [78, 78] and split["tasks"] == 2  # the forward order's two parts alone
    _same(one, split)
    assert split["events"][0]["problem"] == {"event": "timeout", "limit_s": 1.0} and split["hangs"] == 1


LAST_BLOCK = "blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && tx == 0 && ty == 0"
# The grid's last block traps where C[0][0] still holds its poison: in one worker's forward run block (0, 0) stored it
# before; in the reversed run, and in the forward order's last part alone, nobody did
TRAPS_WHERE_C_UNSTORED = GOOD_BASIC.replace("    float sum = 0.0f;", f"""    float sum = 0.0f;
    if ({LAST_BLOCK} && C[0] != C[0])
        __trap();""")
# The same block spins there instead: a hang in the forward order's last part, none in one worker's forward run
SPINS_WHERE_C_UNSTORED = GOOD_BASIC.replace("    float sum = 0.0f;", f"""    float sum = 0.0f;
    if ({LAST_BLOCK}) {{
        while (C[0] != C[0]) {{
        }}
    }}""")


@needs_cxx
@pytest.mark.parametrize("name", ["traps", "spins"])
def test_a_later_parts_problem_after_a_read_of_c_is_run_again_by_one_worker_per_order(name):
    """What the part read in C (and trapped or spun on) would have been an earlier part's store in one worker: the
    forward order's problem is not told from the parts; one worker per order runs the case, and its reversed
    order's problem is told (a hang counted once)."""
    source = TRAPS_WHERE_C_UNSTORED if name == "traps" else SPINS_WHERE_C_UNSTORED
    one, split = run_split(source, 1, 4, specs=[WHOLE], limit_s=1.0)
    # The forward order's four parts, the reversed order's that started before the forward one went wrong (the
    # rest never start: _skip_moot), then the case again in one worker per order (no block list)
    assert split["blocks"][:4] == [39] * 4 and set(split["blocks"]) == {39}
    assert split["tasks"] == len(split["blocks"]) + 2
    _same(one, split)
    assert one["events"][0]["schedule"] == "reversed"
    assert one["events"][0]["problem"]["event"] == ("fault" if name == "traps" else "timeout")
    assert one["hangs"] == split["hangs"] == (name == "spins")


# Each block's thread (0, 0) spins for 6 ms of its process's CPU time
SLOW_BLOCKS = "#include <time.h>\n" + GOOD_BASIC.replace("    float sum = 0.0f;", """    float sum = 0.0f;
    if (tx == 0 && ty == 0) {
        clock_t until = clock() + CLOCKS_PER_SEC * 6 / 1000;
        while (clock() < until) {
        }
    }""")


@needs_cxx
def test_a_worker_reports_its_own_cpu_time_which_waits_for_a_cpu_do_not_add_to():
    """What the rule below adds up: small's 6 blocks spin 36 ms of CPU time, whatever the machine's load."""
    one, = run_split(SLOW_BLOCKS, 1, specs=[SPECS[0]])
    assert 0.036 <= min(one["cpu_s"]) < 5


def _ended(*cpu_s: float, wall_s: float = 0.1) -> tuple[list[Ended], list[list[dict]]]:
    return [Ended(task, DONE_HOW, seconds=wall_s) for task in range(len(cpu_s))], \
        [[{**DONE, "cpu_s": seconds}] for seconds in cpu_s]


def test_parts_that_took_most_of_the_cases_limit_together_are_not_told_as_one_worker():
    """One worker's time is its parts' added up (their own CPU time, which its deadline counts too): from
    ONE_WORKERS_SHARE of the case's limit on, it might have timed out first."""
    limit = 2.0
    assert one_worker_met_it(*_ended(0.3, 0.3, 0.3, 0.3), None, limit)
    assert not one_worker_met_it(*_ended(0.4, 0.4, 0.4, 0.4), None, limit)
    assert one_worker_met_it(*_ended(0.3, 0.3, 0.3, 0.3, wall_s=1.9), None, limit)  # waits for a CPU: not its own
    # A part that faulted left no report of its time: the driver's clock's counts, up to it
    fault = {"event": "fault", "what": "trap"}
    ends, reports = _ended(0.6, 0.6, 0.6, 0.6, wall_s=0.2)
    assert one_worker_met_it(ends, reports[:2] + [[], reports[3]], (2, fault), limit)  # 0.6 + 0.6 + 0.2
    assert not one_worker_met_it(ends, reports[:3] + [[]], (3, fault), limit)  # 0.6 × 3 + 0.2
    # A part that timed out alone would have in one worker too; the first part's problem is one worker's first
    assert one_worker_met_it(ends, reports, (3, {"event": "timeout", "limit_s": limit}), limit)
    assert one_worker_met_it(*_ended(5.0, 0.1), (0, fault), limit)
    assert ONE_WORKERS_SHARE * limit == 1.5
