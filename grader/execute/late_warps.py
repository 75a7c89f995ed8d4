"""Late warps: a kernel that races gets the same verdict every time, alone or in a batch.

A kernel missing a barrier reads a tile before a neighbouring warp has stored it, or after that warp
stored the next phase's, only when that warp happens to be late. On a GPU that is luck, and the luck
depends on what else the machine is doing: on an H100, `missing_load_barrier` failed square_16 in every
batch and passed it alone 8 times in 9 (bench/racy_isolation.sh). So the grader makes the luck bad on
purpose. Every kernel it compiles (the student's and the reference's, so timing stays fair) gets a hook
at the start of each `__global__` function and after each `__syncthreads()`. The hook costs one uniform
branch on a `__constant__` while it is off. Switched on for a launch, it holds back every other warp of
each block for a few microseconds: long enough for the early warps to store and read a whole tile.
A correctly synchronized kernel cannot tell (the same threads do the same arithmetic in the same
order: its output is bit for bit the same); a racy one reads poison or the next phase's tile.

Only text is inserted, never a newline, so every line keeps the student's number.
"""
from __future__ import annotations

from .. import cuda_syntax as cs

SKEW_SYMBOL = "sgemm_grader_late_warps_"
HOOK = "sgemm_grader_hold_back_"
OFF, ODD_WARPS_LATE, EVEN_WARPS_LATE = 0, 1, 2
# ~5 µs at an H100's clock: several global-memory latencies, so the early warps finish a tile's
# loads, stores and reads before the late ones store anything.
LATE_CYCLES = 10_000

PRELUDE = f"""#line 1 "<grader: late warps>"
__constant__ unsigned int {SKEW_SYMBOL};
static __device__ __forceinline__ void {HOOK}(void)
{{
    if ({SKEW_SYMBOL}) {{
        unsigned int warp = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / warpSize;
        if ((warp & 1u) == ({SKEW_SYMBOL} & 1u)) {{
            long long start = clock64();
            while (clock64() - start < {LATE_CYCLES}) {{ }}
        }}
    }}
}}
#define __syncthreads() (__syncthreads(), {HOOK}())
"""


def skew_for(launch: int) -> int:
    """A case's launches: the first as the GPU schedules it, then odd warps late, then even warps late, …"""
    return OFF if launch == 0 else (ODD_WARPS_LATE if launch % 2 else EVEN_WARPS_LATE)


def with_late_warps(source: str) -> str:
    """The prelude is put before the file by prepare_source; this adds the hook at each kernel's entry."""
    tree = cs.parse(source)
    entries = [(body.start_byte + 1, f" {HOOK}();") for function in cs.function_definitions(tree.root_node)
               if cs.has_keyword(function, "__global__")
               and (body := function.child_by_field_name("body")) is not None]
    return cs.insert_text(source, entries) if entries else source
