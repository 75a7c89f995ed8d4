"""The speed check without a GPU (issue 49): the student's time and the reference's on one named GPU,
estimated from what the CPU emulator counted, and the verdict the estimate allows.

Pure: numbers in, numbers out, no process of its own. The counts come from the emulator's access profile
(execute/cpu/access_profile.py): a few blocks of one launch on the profile shape (64³), per source line the
warp-level requests of each kind, the 32-byte sectors a global one touched, the turns (wavefronts: an n-way
bank conflict takes n) a shared one took, and the block-wide barriers per line of __syncthreads. Every
block of a lab kernel on a shape that is a multiple of its tile makes the same accesses, so the timing
shape's counts are a block's × its number of blocks, each line's count scaled with k when it runs inside
the loop over k (more than once per warp in a block) and kept when it runs once (the store of C).

The time on the GPU is the longest of what the SMs must get through (a roofline):
- multiply-adds: one thread per element of C, k each, at the GPU's FP32 peak;
- the load/store pipe: every shared-memory wavefront, and every 128-byte line a global request touches
  (an uncoalesced warp touches up to 32 of them where a coalesced one touches 1; the profile's `lines`),
  one per clock per SM;
- L2: each block's footprint of A and B (its rows of A and columns of B over all of k, as any kernel that
  computes a tile of C reads them, what L1 does not keep aside) and every sector stored;
- DRAM: A, B and C once;
- barriers: each block's barriers, one after another, in as many rounds ("waves") as the grid takes.
Throughputs are shared by the warps an SM keeps resident (occupancy): fewer than SATURATING_WARPS hide
less of each access's wait, and the throughput terms grow by that factor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

WARP = 32
LINE_SECTORS = 4  # sectors of one 128-byte L1 line
SECTOR_BYTES = 32
WAVEFRONT_BYTES = 128  # one shared-memory wavefront: 32 banks × 4 bytes
SATURATING_WARPS = 16  # resident warps per SM (4 per scheduler) from which an SM's pipes stay busy
PASS, FAIL, HELD = "pass", "fail", "held"


@dataclass(frozen=True)
class GpuFigures:
    """The GPU the times are estimated on (config: timing.model)."""

    name: str
    arch: str  # for occupancy (judge/occupancy.py): "sm_90"
    sms: int
    clock_ghz: float
    fp32_tflops: float  # FP32 peak (a multiply-add is 2 flops)
    shared_tbs: float  # shared-memory (L1) bandwidth over all SMs, TB/s: 128 bytes per clock per SM
    l2_tbs: float
    dram_tbs: float
    barrier_cycles: float  # a block's wait at one barrier (the slowest warp's last access, then the release)


@dataclass(frozen=True)
class Work:
    """One kernel's launch on the timing shape: per block unless said."""

    blocks: int  # in the grid
    threads: int  # per block
    multiply_adds: float
    shared_wavefronts: float  # turns taken on shared memory's banks (bank conflicts included)
    global_lines: float  # 128-byte lines touched by global requests (what the L1 pipe handles)
    global_sectors: float  # 32-byte sectors touched by global requests
    stored_sectors: float  # of those, the stores' (written through to L2)
    footprint_bytes: float  # of A and B a block needs at least: its rows of A and columns of B
    barriers: float
    dram_bytes: float  # whole launch: A, B and C once
    requests: float  # warp-level requests of every kind
    k: int

    def plausible(self) -> bool:
        """Whether the counts are possible for a kernel that computes C: each thread needs 2k operands, read
        by its warp at most four a request (a float4), from shared or global memory. Fewer requests than that
        are a report the kernel forged (its process writes the profile)."""
        return self.requests >= -(-self.threads // WARP) * self.k / 2


@dataclass(frozen=True)
class Estimate:
    ms: float
    bound: str  # the term that decided (a key of terms)
    terms: dict  # milliseconds by what limits them
    work: Work


def work_on_shape(records: list[dict], size: int, profiled_blocks: int, threads: int, blocks: int,
                  m: int, n: int, k: int) -> Work:
    """A kernel's work on m×n×k (`blocks` of `threads` threads) from its profile on size³ (`records`, the
    profile's access and barriers reports over its `profiled_blocks` blocks)."""
    warps = -(-threads // WARP)
    deeper = k / size  # how much longer a block's loop over k runs on the timing shape
    counts = dict.fromkeys(("shared", "lines", "sectors", "stored", "barriers", "requests"), 0.0)
    for record in records:
        if record["event"] == "barriers":
            per_block = record["count"] / profiled_blocks
            counts["barriers"] += per_block * (deeper if per_block > 1 else 1)
            continue
        scale = _scale(record, warps, deeper, profiled_blocks)
        counts["requests"] += record["requests"] * scale
        if record["kind"].startswith("shared"):
            counts["shared"] += record["total"] * scale
            continue
        counts["lines"] += global_lines(record) * scale
        counts["sectors"] += record["total"] * scale
        if record["kind"] == "global_store":
            counts["stored"] += record["total"] * scale
    side = math.isqrt(threads) if math.isqrt(threads) ** 2 == threads else threads
    return Work(blocks, threads, float(threads * k), counts["shared"], counts["lines"], counts["sectors"],
                counts["stored"], 2.0 * side * k * 4, counts["barriers"], 4.0 * (m * k + k * n + m * n),
                counts["requests"], k)


def _scale(record: dict, warps: int, deeper: float, profiled_blocks: int) -> float:
    """What turns an access record's counts over the profiled blocks into one block's on the timing shape:
    a site that runs more than once per warp runs in the loop over k, which is `deeper` times longer there."""
    in_loop = record["requests"] / profiled_blocks > warps
    return (deeper if in_loop else 1) / profiled_blocks


def excess_by_line(records: list[dict], size: int, profiled_blocks: int, threads: int, k: int) -> dict[int, float]:
    """Per source line, the wavefronts (shared turns, global lines) a block spends on the timing shape beyond
    what the same bytes need: where the time over the ideal goes, line by line."""
    warps, excess = -(-threads // WARP), {}
    for record in records:
        if record["event"] != "access":
            continue
        if record["kind"].startswith("shared"):
            spent, needed = record["total"], record["ideal"]
        else:
            spent, needed = global_lines(record), max(record["requests"], record["ideal"] / LINE_SECTORS)
        over = (spent - needed) * _scale(record, warps, k / size, profiled_blocks)
        excess[record["line"]] = excess.get(record["line"], 0.0) + max(0.0, over)
    return excess


def global_lines(record: dict) -> float:
    """The 128-byte lines a global site's requests touch, as the emulator counted them; from a record without
    that count, estimated: a coalesced request's sectors share lines (4 to a line, at least one line each),
    each sector beyond the ideal on a line of its own (a warp walking down a column touches one in each of
    32 rows)."""
    if "lines" in record:
        return record["lines"]
    excess = max(0, record["total"] - record["ideal"])
    return max(record["requests"], record["ideal"] / LINE_SECTORS) + excess


def estimate(work: Work, gpu: GpuFigures, resident_blocks: int) -> Estimate | None:
    """The launch's time on `gpu` with `resident_blocks` blocks per SM (its occupancy); None when none fits."""
    if resident_blocks < 1 or work.blocks < 1:
        return None
    clock = gpu.clock_ghz * 1e9
    hiding = min(1.0, resident_blocks * -(-work.threads // WARP) / SATURATING_WARPS)
    blocks_per_sm = -(-work.blocks // gpu.sms)  # the busiest SM's
    waves = -(-work.blocks // (gpu.sms * resident_blocks))
    fma_per_clock = gpu.fp32_tflops * 1e12 / 2 / (gpu.sms * clock)
    wavefronts_per_clock = gpu.shared_tbs * 1e12 / WAVEFRONT_BYTES / (gpu.sms * clock)
    l2_bytes = work.blocks * (work.footprint_bytes + work.stored_sectors * SECTOR_BYTES)
    seconds = {
        "multiply-adds": blocks_per_sm * work.multiply_adds / fma_per_clock / clock / hiding,
        "shared memory and L1": (blocks_per_sm * (work.shared_wavefronts + work.global_lines)
                                 / wavefronts_per_clock / clock / hiding),
        "L2": l2_bytes / (gpu.l2_tbs * 1e12) / hiding,
        "DRAM": work.dram_bytes / (gpu.dram_tbs * 1e12),
        "barriers": waves * work.barriers * gpu.barrier_cycles / clock,
    }
    terms = {name: value * 1e3 for name, value in seconds.items()}
    bound = max(terms, key=terms.get)
    return Estimate(terms[bound], bound, terms, work)


def verdict(ratio: float, max_ratio: float, margin: float) -> str:
    """PASS when the estimated ratio is clearly within the limit (times `margin`, at or below it), FAIL when
    clearly beyond it (at or above max_ratio × margin), HELD between: too near for an estimate to decide."""
    if ratio * margin <= max_ratio:
        return PASS
    if ratio >= max_ratio * margin:
        return FAIL
    return HELD


def decisive_bounds(max_ratio: float, margin: float) -> tuple[float, float]:
    """The estimated ratios at and below which the model passes, and at and above which it fails."""
    return max_ratio / margin, max_ratio * margin
