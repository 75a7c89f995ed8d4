"""Theoretical occupancy of a compiled kernel on a GPU architecture, and the advice it gives (issue 26).

Pure functions, the way NVIDIA's occupancy calculator (cuda_occupancy.h) counts: registers are allocated
per warp in units of 256 and split over the SM's 4 sub-partitions; shared memory per block is the static
plus the dynamic bytes plus the driver's reserved 1 KB (compute capability 8.0 and later), rounded up to
the allocation unit; a block takes whole warps. The fewest blocks any of registers, shared memory, warps
and the per-SM block limit allow is what fits on one SM; occupancy is its warps over the SM's maximum.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..result import OCCUPANCY, SPILLS, Feedback

WARP = 32
SUB_PARTITIONS = 4
REGISTER_UNIT = 256  # registers are allocated per warp in units of this many


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA C++ Programming Guide, technical specifications)."""

    name: str
    registers_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int  # the largest carveout, bytes
    shared_per_block: int  # the most one block may have (opt-in), bytes
    shared_unit: int  # shared memory allocation granularity, bytes
    reserved_shared: int  # the driver's shared memory per block, bytes

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP


KB = 1024
ARCHES = {
    "sm_70": ArchLimits("sm_70", 65536, 2048, 32, 96 * KB, 96 * KB, 256, 0),
    "sm_75": ArchLimits("sm_75", 65536, 1024, 16, 64 * KB, 64 * KB, 256, 0),
    "sm_80": ArchLimits("sm_80", 65536, 2048, 32, 164 * KB, 163 * KB, 128, KB),
    "sm_86": ArchLimits("sm_86", 65536, 1536, 16, 100 * KB, 99 * KB, 128, KB),
    "sm_89": ArchLimits("sm_89", 65536, 1536, 24, 100 * KB, 99 * KB, 128, KB),
    "sm_90": ArchLimits("sm_90", 65536, 2048, 32, 228 * KB, 227 * KB, 128, KB),
    "sm_100": ArchLimits("sm_100", 65536, 2048, 32, 228 * KB, 227 * KB, 128, KB),
}


def limits_for(arch: str) -> ArchLimits | None:
    """The table's row for `arch` ("sm_90", "sm_90a", "compute_90"); None for an architecture it lacks."""
    digits = "".join(ch for ch in arch if ch.isdigit())
    return ARCHES.get(f"sm_{digits}")


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel needs per thread and per block (read from its cubin)."""

    registers: int  # per thread
    static_shared: int  # bytes per block, as the student declared them (the driver's reserve left out)
    local_bytes: int = 0  # per thread: the stack frame (register spills, or an array not kept in registers)


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks per SM
    warps: int  # resident warps per SM
    percent: float  # of the SM's maximum warps
    limiter: str  # "registers", "shared memory", "warps" or "blocks": what allows the fewest blocks
    by_limit: dict  # blocks each limit allows


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(arch: ArchLimits, registers: int, shared_bytes: int, threads: int) -> Occupancy:
    """Theoretical occupancy of blocks of `threads` threads, each thread with `registers` registers, each block
    with `shared_bytes` of shared memory (static + dynamic; the driver's reserve is added here)."""
    warps_per_block = -(-threads // WARP)
    by_limit = {"warps": arch.max_warps_per_sm // warps_per_block, "blocks": arch.max_blocks_per_sm}
    if registers > 0:
        per_warp = _round_up(registers * WARP, REGISTER_UNIT)
        warps = (arch.registers_per_sm // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS
        by_limit["registers"] = warps // warps_per_block
    block_shared = _round_up(shared_bytes + arch.reserved_shared, arch.shared_unit)
    if shared_bytes > 0:
        by_limit["shared memory"] = 0 if shared_bytes > arch.shared_per_block else arch.shared_per_sm // block_shared
    # Ties name the resource a student can change (registers, shared memory) before the SM's fixed limits.
    order = ["registers", "shared memory", "warps", "blocks"]
    limiter = min((name for name in order if name in by_limit), key=lambda name: by_limit[name])
    blocks = by_limit[limiter]
    warps = blocks * warps_per_block
    return Occupancy(blocks, warps, round(100.0 * warps / arch.max_warps_per_sm, 1), limiter, by_limit)


@dataclass(frozen=True)
class Launched:
    """One kernel as launched: its resources and its block."""

    resources: Resources
    threads: int  # per block
    dynamic_shared: int  # bytes per block given at launch


def of(arch: ArchLimits, kernel: Launched) -> Occupancy:
    return occupancy(arch, kernel.resources.registers, kernel.resources.static_shared + kernel.dynamic_shared,
                     kernel.threads)


def occupancy_feedback(arch: ArchLimits, student: Launched, reference: Launched | None,
                       prints: bool = False) -> list[Feedback]:
    """An OCCUPANCY finding when the student's kernel fits fewer warps per SM than the reference's (or, with no
    reference, under half the SM), and a SPILLS finding when it uses local memory the reference does not
    (`prints`: the kernel calls printf)."""
    found = []
    mine = of(arch, student)
    theirs = of(arch, reference) if reference else None
    if (mine.percent < theirs.percent) if theirs else mine.percent < 50:
        found.append(_occupancy_finding(arch, student, mine, reference, theirs))
    spilled = student.resources.local_bytes
    if spilled > (reference.resources.local_bytes if reference else 0):
        found.append(_spills_finding(spilled, reference, prints))
    return found


def _spills_finding(spilled: int, reference: Launched | None, prints: bool) -> Feedback:
    """Local memory: where the kernel calls printf, that is where printf's arguments go (a debug line left in),
    and advice about per-thread arrays would send the student looking for arrays they do not have."""
    if prints:
        said = (f"the kernel uses {spilled} bytes of local memory per thread: printf passes its arguments through "
                "local memory, and each call costs time (the grader switches it off to time the kernel)")
        advice = "remove the debug printf once the kernel works"
    else:
        said = (f"the kernel uses {spilled} bytes of local memory per thread (register spills, or a per-thread "
                "array the compiler could not keep in registers): each access goes to memory as slow as global")
        advice = ("keep per-thread arrays small and index them only with constants (fully unrolled loops), or use "
                  "fewer live values per thread")
    return Feedback(SPILLS, said, advice, value=float(spilled),
                    reference_value=float(reference.resources.local_bytes) if reference else None, unit="bytes",
                    source="compiler")


def _occupancy_finding(arch: ArchLimits, student: Launched, mine: Occupancy, reference: Launched | None,
                       theirs: Occupancy | None) -> Feedback:
    res = student.resources
    figure = {"registers": f"{res.registers} per thread",
              "shared memory": f"{res.static_shared + student.dynamic_shared} bytes per block",
              "warps": f"blocks of {student.threads} threads", "blocks": f"blocks of {student.threads} threads"}
    said = (f"{mine.limiter}: {figure[mine.limiter]} allow {mine.blocks} block{'s' if mine.blocks != 1 else ''} of "
            f"{student.threads} threads per SM on {arch.name} ({mine.percent:g}% occupancy)")
    if reference is not None and theirs is not None:
        said += (f"; the reference uses {_reference_figure(mine.limiter, reference)} "
                 f"({theirs.percent:g}%)")
    return Feedback(OCCUPANCY, said, ADVICE[mine.limiter], value=mine.percent,
                    reference_value=theirs.percent if theirs else None, unit="%", source="compiler")


def _reference_figure(limiter: str, reference: Launched) -> str:
    if limiter == "registers":
        return f"{reference.resources.registers}"
    if limiter == "shared memory":
        return f"{reference.resources.static_shared + reference.dynamic_shared} bytes"
    return f"blocks of {reference.threads} threads"


ADVICE = {
    "registers": "use fewer registers per thread: fewer live values and per-thread arrays, less unrolling "
                 "(or __launch_bounds__ to cap them)",
    "shared memory": "use less shared memory per block: two TILE_SIZE × TILE_SIZE tiles of floats are enough",
    "warps": "use a block size that divides the SM's threads evenly",
    "blocks": "use larger blocks: with small ones the SM runs out of block slots before it runs out of warps",
}
