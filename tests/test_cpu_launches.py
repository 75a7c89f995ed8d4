"""The CPU emulator launches each case as the GPU child does: `launches_per_case` times, device globals kept
between launches and cases in job order, so a kernel that changes after some launches is seen changing; a
kernel with no mutable static storage runs each case once per thread order, the cases side by side (its later
launches would repeat the first bit for bit), which the compiled unit's symbol table tells.
"""
from pathlib import Path

import pytest
from conftest import RUN_TIMEOUT_S, SUBMISSIONS, make_grader
from hardware import needs_cxx

from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import case_files, harness_driver
from grader.execute.cpu.build import build
from grader.execute.cpu.schedule import Schedule
from grader.execute.cpu.statics import EMULATOR_NAMED
from grader.execute.job import CaseSpec, Job
from grader.execute.protocol import EVENTS, check
from grader.result import ERROR, FAILED, PASSED

pytestmark = needs_cxx
GOOD_BASIC = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
STORE = "        C[row * n + col] = sum;"
# The last block of a launch to finish counts it, after a barrier: every thread of a launch reads the same count.
COUNTED = """__device__ unsigned int launchesDone = 0;
__device__ unsigned int blocksDone = 0;

__global__ void mysgemm"""
COUNT = """
    __syncthreads();
    if (tx == 0 && ty == 0 && atomicAdd(&blocksDone, 1) + 1 == gridDim.x * gridDim.y) {
        blocksDone = 0;
        atomicAdd(&launchesDone, 1);
    }
}"""


def counting(store: str) -> str:
    """good_basic counting its launches, with C stored as `store` says (it may read launchesDone)."""
    assert GOOD_BASIC.count(STORE + "\n}") == 1
    return GOOD_BASIC.replace("__global__ void mysgemm", COUNTED).replace(STORE + "\n}", store + COUNT)


ALTERNATING = counting("        C[row * n + col] = launchesDone % 2 ? sum + 1.0f : sum;")


def submit(tmp_path: Path, source: str, name: str = "submission") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "kernel.cu").write_text(source)
    return folder


def emulated(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == "case" and "GPU only" not in c.message}


def test_a_kernel_that_counts_its_launches_fails_from_its_ninth_emulated_case_on(graders):
    """25 honest launches are the first 8 cases' 24 and the first of the 9th's: from then on the cases fail,
    as on a GPU that launches each case 3 times, the emulated cases first."""
    cases = list(emulated(graders("cpu")(SUBMISSIONS / "launch_counter_25")).values())
    cases.sort(key=lambda c: "checked" in c.metrics)  # job order: the cases run whole, then the sampled large ones
    assert [c.status for c in cases] == [PASSED] * 8 + [FAILED] * (len(cases) - 8), [c.message for c in cases]
    assert "the same inputs gave 2 different results in 3 launches" in cases[8].message


def test_a_kernel_whose_output_alternates_between_launches_fails_naming_its_different_results(tmp_path,
                                                                                                quick_config_file):
    cases = emulated(make_grader(quick_config_file, "cpu")(submit(tmp_path, ALTERNATING)))
    assert cases and all(c.status == FAILED and "the same inputs gave 2 different results in 3 launches" in c.message
                         for c in cases.values()), [c.message for c in cases.values()]


def test_the_call_counter_keeps_passing_every_cpu_case(graders):
    """It cheats after 70 launches: the 21 emulated cases make 63."""
    assert all(c.status == PASSED for c in emulated(graders("cpu")(SUBMISSIONS / "call_counter")).values())


# --- which kernels carry state ----------------------------------------------------------------------------

SHARED_AND_CONSTANT = GOOD_BASIC.replace("__global__ void mysgemm", """__constant__ float scale[2] = {1.0f, 0.0f};
__constant__ int unused;
__device__ const float one = 1.0f;
static const int table[4] = {1, 2, 3, 4};

__global__ void mysgemm""").replace(STORE, "        C[row * n + col] = sum * scale[0] * one + scale[1] * table[k % 4];")
STATIC_LOCAL = GOOD_BASIC.replace("    float sum = 0.0f;", """    static int calls = 0;
    calls += 1;
    float sum = 0.0f;""")
SHARED_SCALAR = GOOD_BASIC.replace("    float sum = 0.0f;", """    __shared__ float bias;
    if (tx == 0 && ty == 0)
        bias = A[0] - A[0];
    __syncthreads();
    float sum = bias;""")


@pytest.fixture(scope="module")
def state_of():
    """The mutable static storage build() reads from a source's compiled unit."""
    contract = load_config().kernel.contract()
    with scratch_folder("sgemm-statics-") as root:
        def state(source: str) -> list[str] | None:
            work = root / f"work{len(list(root.iterdir()))}"
            work.mkdir()
            built = build(source, contract, contract.tile_source(""), root / "cache", work, detect(), 120)
            assert built.binary is not None, built.message
            return built.state

        yield state


@pytest.mark.parametrize("name", ["good_basic", "extern_shared", "coop_groups", "warp_shfl", "vector_types",
                                  "intrinsics", "template_helper", "good_tile8_renamed"])
def test_kernels_without_state_are_told_as_such(state_of, name):
    assert state_of((SUBMISSIONS / name / "kernel.cu").read_text()) == []


def test_shared_arrays_constant_and_const_data_are_no_state(state_of):
    assert state_of(SHARED_AND_CONSTANT) == []


@pytest.mark.parametrize("source, names", [
    (STATIC_LOCAL, ["_ZZ7mysgemmiiiPKfS0_PfE5calls"]),
    (SHARED_SCALAR, ["_ZZ7mysgemmiiiPKfS0_PfE4bias"]),  # never poisoned: it keeps its value from launch to launch
    ((SUBMISSIONS / "launch_counter_25" / "kernel.cu").read_text(), ["blocksDone", "launchesDone"]),
], ids=["static_local", "shared_scalar", "device_globals"])
def test_static_locals_shared_scalars_and_device_globals_are_state(state_of, source, names):
    assert state_of(source) == names


def test_a_kernel_that_names_the_emulator_counts_as_stateful(state_of):
    """Its code could count launches in the emulator's own variables, which no symbol of its unit shows."""
    counting_inside = GOOD_BASIC.replace("    float sum = 0.0f;", """#ifndef __NVCC__
    ++::cuda_emu::dynamic_element;
#endif
    float sum = 0.0f;""")
    assert state_of(counting_inside) == [EMULATOR_NAMED]


def test_a_section_named_like_the_graders_holds_no_state_it_did_not_place(state_of):
    """A variable the student puts in a section named as the grader names its own is still state: the grader's
    names hold a hash of the submission. (The name is spelled in two pieces: the file never names the emulator.)"""
    forged = GOOD_BASIC.replace("__global__ void mysgemm", '__device__ int hidden __attribute__((section('
                                '"cuda_" "emu_0123456789abcdef0123.1")));\n\n__global__ void mysgemm')
    assert state_of(forged) == ["hidden"]


# --- how the cases run -------------------------------------------------------------------------------------

def run_cases(source: str, specs: list[CaseSpec], launches: int = 3, limit_s: float = 10.0) -> list[dict]:
    """The CPU driver's case events for a source (its build, server, schedule and reading back)."""
    config = load_config()
    contract = config.kernel.contract()
    with scratch_folder("sgemm-launches-") as work:
        job = Job("", "", contract, [], str(work / "cache"), str(work), cases=specs, launches_per_case=launches)
        built = build(source, contract, job.tile, work / "cache", work, detect(), 120)
        cases = case_files.Cases(job, work / "run")
        server = harness_driver.Server(harness_driver.readable_copy(built.binary, work / "bin"), cases.folder,
                                       detect(), 2)
        try:
            tile = server.start(60)
            cases.write_inputs()
            stateful = built.state != []
            runs = launches if stateful else 1
            schedule = Schedule(server, len(specs), stateful, 2, limit_s, 3,
                                lambda task: cases.start(server, task, tile, runs))
            return [check(cases.event(index, ends, runs, limit_s), EVENTS)
                    for index, ends in schedule.cases(lambda index: None)]
        finally:
            server.close()


SPECS = [CaseSpec("square", 32, 32, 32, 1, "uniform"), CaseSpec("ragged", 33, 17, 40, 2, "uniform")]


def test_a_kernel_with_state_runs_every_launch_and_one_without_runs_one_per_order():
    stateless = run_cases(GOOD_BASIC, SPECS)
    assert [(e["event"], e["launches"], e["distinct_outputs"]) for e in stateless] == [("case", 1, 1)] * 2
    stateful = run_cases(ALTERNATING, SPECS)
    assert [(e["event"], e["launches"], e["distinct_outputs"]) for e in stateful] == [("case", 3, 2)] * 2


def test_a_fresh_pair_of_workers_follows_a_case_that_went_wrong():
    """A stateful kernel that faults in its second case: the third starts from the state of a fresh process,
    as the GPU path's fresh child does: its count starts again, so its third launch differs again (with the
    count carried on, its three launches would be the 4th to 6th, all alike)."""
    faulting = counting("        C[row * n + col] = launchesDone == 2 ? sum + 1.0f : sum;").replace(
        "    float sum = 0.0f;", "    if (m == 33 && launchesDone == 3) __trap();\n    float sum = 0.0f;")
    events = run_cases(faulting, [SPECS[0], SPECS[1], SPECS[0]])
    assert [e["event"] for e in events] == ["case", "case_error", "case"]
    assert (events[0]["distinct_outputs"], events[2]["distinct_outputs"]) == (2, 2)


HANGS_IN_ONE_CASE = GOOD_BASIC.replace("    float sum = 0.0f;", """    if (m == 100) {  // ragged_all
        volatile int forever = 1;
        while (forever) {
        }
    }
    float sum = 0.0f;""")


def test_a_case_that_hangs_times_out_alone_while_the_others_are_judged(tmp_path, quick_config_file):
    cases = emulated(make_grader(quick_config_file, "cpu")(submit(tmp_path, HANGS_IN_ONE_CASE)))
    hung = cases.pop("ragged_all")
    assert hung.status == ERROR and hung.message.startswith(
        f"timed out after {RUN_TIMEOUT_S} s of its own time in case ragged_all: the kernel did not finish")
    assert cases and all(c.status == PASSED for c in cases.values()), [c.message for c in cases.values()]
