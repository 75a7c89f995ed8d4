"""Late warps: a kernel that races gets the same verdict every time, alone or in a batch.

A kernel missing a barrier reads a tile before a neighbouring warp has stored it, or after that warp
stored the next phase's, only when that warp happens to be late. On a GPU that is luck, and the luck
depends on what else the machine is doing: on an H100, `missing_load_barrier` failed square_16 in every
batch and passed it alone 8 times in 9 (bench/racy_isolation.sh). So the grader makes the luck bad on
purpose. Every kernel it compiles (the student's and the reference's, so timing stays fair) gets a hook
at the start of each `__global__` function and after each `__syncthreads()`. The hook costs one uniform
branch on a `__constant__` while it is off. Switched on for a launch, it holds back every other warp of
a block for a few microseconds of its own work: long enough for the early warps to store and read a
whole tile. It does so in the blocks where the grid's first two and last rows cross its first two and
last columns (at most 9 of a 2-D grid): every kind of block a tiled kernel has is among them (each corner,
the first and last row's and column's edge blocks, and an interior block where the grid has one), so a
race shows in each kind, while a large case's launch is not held up by the rest. Holding back every block
of a 1031×1009×1013 case took 25 ms a launch on an H100; with the whole border band (a tenth of its blocks)
held back, that case's turn still took 21-28 ms of a tile-16 kernel's 85-116 ms on an H200, and 7-8 ms with
these 9 (and its inputs sent before the turn, child.py's CaseMemory). A small grid is all crossings, and
every block there is held back as before.
A correctly synchronized kernel cannot tell (the same threads do the same arithmetic in the same
order: its output is bit for bit the same); a racy one reads poison or the next phase's tile.

The poison is part of the launch too: at the kernel's entry each block fills its own shared memory
(every `__shared__` array, static and dynamic) with the poison bits and waits at a barrier before the
student's first line. A separate poisoning kernel before the launch was not enough under load: the GPU
time-slices between processes' contexts, so another context's kernel could run between the two and
leave finite values behind, and `missing_load_barrier` then passed the 1×1×1 case in one grading of a
class and failed it in another (bench/racy_under_load.py).

Device printf is part of the prelude too: students leave debug lines in (`printf("C[%d][%d] = %f\\n", …)`
before the store), and a million threads printing through the driver's FIFO took 119 s for one 1031×1031
launch on an H200 (9.3 s at 512), so such a kernel timed out in the large cases and lost its timing check
on the GPU only. `printf` is routed through a wrapper that prints only while the switch's PRINTS bit is
on: the GPU child turns it on for the first launch of the first case alone (the student still sees what
their kernel prints), and every other launch, the timing's, the sanitizer's and the profiler's run as if
the kernel did not print.

Only text is inserted, never a newline, so every line keeps the student's number.
"""
from __future__ import annotations

from ...judge.layout import POISON_BITS
from ...source import cuda_syntax as cs

SKEW_SYMBOL = "sgemm_grader_late_warps_"
HOOK = "sgemm_grader_hold_back_"
ENTRY_HOOK = "sgemm_grader_enter_"
SINK_SYMBOL = "sgemm_grader_sink_"
THREAD_IN_BLOCK = "sgemm_grader_thread_in_block_"
HELD_BACK_BLOCK = "sgemm_grader_block_held_back_"
NEAR_BORDER = "sgemm_grader_near_border_"
PRINTF = "sgemm_grader_printf_"
# The switch's bits: which warps are late (none, odd, even), whether blocks poison their shared memory, and
# whether the kernel's printf prints (off unless the child says so: a launch the child does not set is quiet).
OFF, ODD_WARPS_LATE, EVEN_WARPS_LATE, POISON_SHARED, PRINTS = 0, 1, 2, 4, 8
# 10,000 cycles (~5 µs at an H100's clock): several global-memory latencies, so the early warps finish
# a tile's loads, stores and reads before the late ones store anything. And some of it in the late warp's
# own work, a chain of dependent multiply-adds (4 cycles a step with the SM to itself, up to 16 with
# every warp of a full SM in the chain): the GPU time-slices between processes' contexts, and a switch
# during a wait timed by the clock alone would end it as soon as the block resumed, with the early warps
# no further along. The chain is kept short of the clock's wait: one as long as the wait itself holds a
# full SM's late warps back up to four times as long (in a trial batch a tile-8 kernel's large case then
# ran past its 3 s).
LATE_CYCLES, LATE_STEPS = 10_000, 600

PRELUDE = f"""#line 1 "<grader: late warps>"
__constant__ unsigned int {SKEW_SYMBOL};
__device__ unsigned int {SINK_SYMBOL};
static __device__ __forceinline__ unsigned int {THREAD_IN_BLOCK}(void)
{{
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}}
/* Whether a block is at its grid's first two or last index along a dimension. */
static __device__ __forceinline__ bool {NEAR_BORDER}(unsigned int index, unsigned int extent)
{{
    return index <= 1u || index + 1u == extent;
}}
static __device__ __forceinline__ bool {HELD_BACK_BLOCK}(void)
{{
    return {NEAR_BORDER}(blockIdx.x, gridDim.x) && {NEAR_BORDER}(blockIdx.y, gridDim.y)
        && {NEAR_BORDER}(blockIdx.z, gridDim.z);
}}
static __device__ __forceinline__ void {HOOK}(void)
{{
    if (({SKEW_SYMBOL} & {ODD_WARPS_LATE | EVEN_WARPS_LATE}u) && {HELD_BACK_BLOCK}()) {{
        unsigned int warp = {THREAD_IN_BLOCK}() / warpSize;
        if ((warp & 1u) == ({SKEW_SYMBOL} & 1u)) {{
            unsigned int chain = warp;
            long long start = clock64();
            for (int step = 0; step < {LATE_STEPS} || clock64() - start < {LATE_CYCLES}; ++step)
                asm volatile("mad.lo.u32 %0, %0, 1664525, 1013904223;" : "+r"(chain));
            if (chain == 0x2545F491u) {SINK_SYMBOL} = chain;  /* the chain is used, so it is computed */
        }}
    }}
}}
static __device__ __forceinline__ void {ENTRY_HOOK}(void)
{{
    if ({SKEW_SYMBOL} & {POISON_SHARED}u) {{
        /* The block's own shared memory, in the shared window: from sm_80 on, the driver's reserved
           region comes first and the kernel's arrays start at its end (its cap). */
        unsigned int first = 0u, size;
#if __CUDA_ARCH__ >= 800
        asm volatile("mov.u32 %0, %%reserved_smem_offset_cap;" : "=r"(first));
#endif
        asm volatile("mov.u32 %0, %%total_smem_size;" : "=r"(size));
        unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
        for (unsigned int at = first + 4u * {THREAD_IN_BLOCK}(); at + 4u <= first + size; at += 4u * threads)
            asm volatile("st.shared.u32 [%0], %1;" :: "r"(at), "r"({POISON_BITS:#x}u) : "memory");
        __syncthreads();  /* every block's poison is down before any warp runs the student's first line */
    }}
    {HOOK}();
}}
#define __syncthreads() (__syncthreads(), {HOOK}())
/* The C library's declarations first (a later #include of them is a no-op), then printf as the wrapper;
   C++ linkage, as the reference's module is compiled inside SourceModule's extern "C". */
extern "C++" {{
#include <cstdio>
#include <stdio.h>
template <typename... Arguments>
static __host__ __device__ __forceinline__ int {PRINTF}(const char *format, Arguments... arguments)
{{
#ifdef __CUDA_ARCH__
    if (!({SKEW_SYMBOL} & {PRINTS}u))
        return 0;
#endif
    return printf(format, arguments...);
}}
namespace std {{ using ::{PRINTF}; }}
}}
#define printf {PRINTF}
"""


def skew_for(launch: int, prints: bool = False) -> int:
    """A case's launches, each on poisoned shared memory: the first as the GPU schedules it, then odd warps
    late, then even warps late, …; the kernel's printf prints only where `prints` says so."""
    late = OFF if launch == 0 else (ODD_WARPS_LATE if launch % 2 else EVEN_WARPS_LATE)
    return POISON_SHARED | late | (PRINTS if prints else OFF)


def with_late_warps(source: str) -> str:
    """The prelude is put before the file by prepare_source; this adds the entry hook to each kernel."""
    tree = cs.parse(source)
    entries = [(body.start_byte + 1, f" {ENTRY_HOOK}();") for function in cs.function_definitions(tree.root_node)
               if cs.has_keyword(function, "__global__")
               and (body := function.child_by_field_name("body")) is not None]
    return cs.insert_text(source, entries) if entries else source
