"""Late warps (grader/execute/gpu/late_warps.py): every kernel the grader compiles can have every other warp held
back, so a missing barrier shows on every grading, alone or in a batch.

The text tests run anywhere; the compile test needs nvcc (CI has it); the run tests need a GPU.
"""
import re
import subprocess

import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu, needs_nvcc

from grader.execute.gpu.late_warps import (
    ENTRY_HOOK,
    LATE_CYCLES,
    ODD_WARPS_LATE,
    POISON_SHARED,
    SINK_SYMBOL,
    SKEW_SYMBOL,
    with_late_warps,
)
from grader.execute.nvcc.compile import prepare_source
from grader.result import FAILED, PASSED

TILE = 16
ENTRY = f" {ENTRY_HOOK}();"


def test_each_kernel_gets_one_hook_at_its_entry_and_every_line_keeps_its_number():
    source = (SUBMISSIONS / "ece408_mp3" / "kernel.cu").read_text()  # a kernel, host code and a libwb main
    hooked = with_late_warps(source)
    before, after = source.split("\n"), hooked.split("\n")
    assert len(after) == len(before)
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    assert len(changed) == source.count("__global__")
    for old, new in changed:
        assert new.replace(ENTRY, "", 1) == old and new.index(ENTRY) == new.index("{") + 1


def test_device_and_host_functions_get_no_hook():
    source = ("__device__ float twice(float x) { return 2 * x; }\n"
              "void host(void) { }\n"
              "__global__ void k(float *x) { x[0] = twice(x[0]); }\n")
    assert with_late_warps(source).count(ENTRY_HOOK) == 1
    assert f"k(float *x) {{{ENTRY}" in with_late_warps(source)


def test_a_file_without_kernels_is_left_as_it_is():
    assert with_late_warps("int x;\n") == "int x;\n"


@needs_nvcc
def test_every_barrier_of_a_compiled_kernel_is_followed_by_the_hook(tmp_path):
    """In the PTX: the switch is a module constant, and each bar.sync (two per tile phase) and the
    kernel's entry branch on it; the student's macro-wrapped barriers (SYNC()) included. The entry's
    poisoning has a barrier of its own, behind its own bit of the switch."""
    source = (SUBMISSIONS / "good_tile32_macro_sync" / "kernel.cu").read_text()
    (tmp_path / "kernel.cu").write_text(prepare_source(source))  # as the student's is compiled: C++ linkage
    subprocess.run(["nvcc", "--ptx", "-arch", "sm_80", "kernel.cu", "-o", "kernel.ptx"], cwd=tmp_path, check=True)
    ptx = (tmp_path / "kernel.ptx").read_text()
    assert re.search(rf"\.const \.align 4 \.u32 {SKEW_SYMBOL}", ptx)
    kernel = ptx[ptx.index(".entry _Z7mysgemm"):]  # mysgemm(int, int, int, const float *, ...), mangled
    barriers = kernel.count("bar.sync") - 1  # the entry's, after the poison
    assert barriers == 2
    assert "%total_smem_size" in kernel and "st.shared.u32" in kernel
    # the late warps' chain of work is kept: its result feeds a store the compiler cannot drop
    assert "mad.lo.u32" in kernel and f"st.global.u32 \t[{SINK_SYMBOL}]" in kernel
    switch = re.search(rf"ld\.const\.u32\s+(%r\d+), \[{SKEW_SYMBOL}\]", kernel).group(1)
    late = re.findall(rf"and\.b32\s+(%r\d+), {re.escape(switch)}, 3;", kernel)
    poison = re.findall(rf"and\.b32\s+(%r\d+), {re.escape(switch)}, {POISON_SHARED};", kernel)
    assert len(poison) == 1
    assert len(late) in (1, barriers + 1)  # the compiler may test the bits once or at every hook
    # which blocks hold warps back depends on the block's place in its grid
    assert "%ctaid.x" in kernel and "%nctaid.x" in kernel and "%nctaid.y" in kernel


@pytest.fixture(scope="module")
def grade_on_gpu(graders):
    return graders("gpu")


def cases_of(result):
    return {c.name: c for c in result.checks if c.kind == "case"}


@pytest.mark.gpu
@needs_gpu
def test_a_missing_load_barrier_fails_every_case_on_the_gpu(grade_on_gpu):
    cases = cases_of(grade_on_gpu(SUBMISSIONS / "missing_load_barrier"))
    assert [name for name, case in cases.items() if case.status != FAILED] == []


@pytest.mark.gpu
@needs_gpu
def test_a_missing_use_barrier_fails_every_case_with_a_next_phase_on_the_gpu(grade_on_gpu):
    for name, case in cases_of(grade_on_gpu(SUBMISSIONS / "missing_use_barrier")).items():
        # one phase: nothing is overwritten, and the kernel is right
        assert case.status == (FAILED if case.metrics["k"] > TILE else PASSED), name


@pytest.mark.gpu
@needs_gpu
def test_a_racy_kernel_gets_the_same_verdicts_every_time_on_the_gpu(grade_on_gpu, config_file):
    from conftest import make_grader

    fresh = make_grader(config_file, "gpu")  # not the cached result of the tests above

    def verdicts(result):
        return {name: case.status for name, case in cases_of(result).items()}

    for name in ("missing_load_barrier", "barrier_in_comment"):
        assert verdicts(fresh(SUBMISSIONS / name)) == verdicts(grade_on_gpu(SUBMISSIONS / name)), name


STALE_READER = """
__global__ void read_stale(unsigned int *out, unsigned int dynamic_words)
{
    __shared__ unsigned int first[16][16];
    __shared__ unsigned int second[7];
    extern __shared__ unsigned int dynamic[];
    unsigned int t = threadIdx.x, at = blockIdx.x * (256 + 7 + dynamic_words);
    out[at + t] = first[t / 16][t % 16];  /* read before anything is stored: what the block found */
    if (t < 7) out[at + 256 + t] = second[t];
    for (unsigned int i = t; i < dynamic_words; i += blockDim.x) out[at + 263 + i] = dynamic[i];
    first[t / 16][t % 16] = 0u; if (t < 7) second[t] = 0u;  /* the next launch's blocks find zeros */
    for (unsigned int i = t; i < dynamic_words; i += blockDim.x) dynamic[i] = 0u;
}
"""


@pytest.mark.gpu
@needs_gpu
def test_each_block_finds_every_shared_array_poisoned_whatever_ran_before():
    """The entry hook poisons the block's static and dynamic shared arrays itself, inside the launch: a
    kernel that ran just before and left zeros on the same SMs (as another context's kernel can, between
    a separate poisoning kernel and the launch) leaves nothing behind."""
    cuda = pytest.importorskip("pycuda.driver")
    pytest.importorskip("pycuda.autoinit")
    import numpy as np
    from pycuda.compiler import SourceModule

    from grader.judge.layout import POISON_BITS

    module = SourceModule(prepare_source(STALE_READER))
    kernel, switch = module.get_function("read_stale"), module.get_global(SKEW_SYMBOL)[0]
    blocks, dynamic_words = 264, 300
    out = np.zeros(blocks * (263 + dynamic_words), np.uint32)

    def launch(skew):
        cuda.memcpy_htod(switch, np.array([skew], np.uint32))
        kernel(cuda.Out(out), np.uint32(dynamic_words), block=(256, 1, 1), grid=(blocks, 1),
               shared=4 * dynamic_words)
        return out.copy()

    launch(0)  # leaves zeros in every array on every SM
    assert (launch(0) == 0).any()  # unpoisoned, a block finds what the last one left
    for skew in (POISON_SHARED, POISON_SHARED | 1, POISON_SHARED | 2):
        found = launch(skew)
        assert (found == POISON_BITS).all(), f"switch {skew}: {np.count_nonzero(found != POISON_BITS)} words not poison"


WAIT_RECORDER = """
__global__ void record_wait(long long *waited)
{
    long long before = clock64();
    __syncthreads();  /* the hook after it holds the late warps of a held-back block */
    long long after = clock64();
    unsigned int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x % 32 == 0) waited[2 * block + threadIdx.x / 32] = after - before;
}
"""


def held_back_blocks(grid: tuple[int, int, int]) -> set[tuple[int, int, int]]:
    """The blocks the hook should hold back: within two of the start or at the end of every dimension (the
    crossings of the grid's first two and last rows and columns)."""
    def near(index, extent):
        return index <= 1 or index == extent - 1

    every = {(x, y, z) for x in range(grid[0]) for y in range(grid[1]) for z in range(grid[2])}
    return {b for b in every if all(near(i, e) for i, e in zip(b, grid))}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("grid", [(7, 6, 1), (1, 5, 1), (9, 1, 1), (4, 4, 3), (1, 1, 1), (65, 64, 1)])
def test_warps_are_held_back_where_the_grids_border_rows_and_columns_cross(grid):
    """Every kind of block a tiled kernel has (each corner, edge and an interior one) holds its late warps
    back; the rest of a large grid does not, so a large case's launch is not held up by its whole border."""
    cuda = pytest.importorskip("pycuda.driver")
    pytest.importorskip("pycuda.autoinit")
    import numpy as np
    from pycuda.compiler import SourceModule

    module = SourceModule(prepare_source(WAIT_RECORDER))
    kernel, switch = module.get_function("record_wait"), module.get_global(SKEW_SYMBOL)[0]
    cuda.memcpy_htod(switch, np.array([ODD_WARPS_LATE], np.uint32))
    blocks = grid[0] * grid[1] * grid[2]
    waited = np.zeros(2 * blocks, np.int64)
    kernel(cuda.Out(waited), block=(64, 1, 1), grid=grid)
    late_warp = waited[1::2].reshape(grid[2], grid[1], grid[0])
    held = {(x, y, z) for z in range(grid[2]) for y in range(grid[1]) for x in range(grid[0])
            if late_warp[z, y, x] >= LATE_CYCLES}
    assert held == held_back_blocks(grid)
