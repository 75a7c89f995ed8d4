"""The timing check where there is no GPU (issue 49, `timing.without_gpu: model`): the speed model's
estimate (judge/speed_model.py) of the student's time and the reference's on the configured GPU, from the
CPU emulator's access profile of both kernels, and the verdict it allows: passed, failed, or held for a GPU
when the estimate lies too near the limit.

Occupancy comes from the compiled kernels' registers and shared memory where nvcc built them (the cubins'
figures, diagnose/resources.py), else from the emulator's own estimate: the shared arrays the profile saw
and ESTIMATED_REGISTERS per thread, for both kernels alike.
"""
from __future__ import annotations

from ..config import Config
from ..contract import REFERENCE, KernelContract
from ..execute.confine.sandbox import Sandbox
from ..execute.cpu.access_profile import profiled_blocks
from ..execute.nvcc.cubin_resources import cubin_arch
from ..execute.nvcc.kernel_params import calls_printf
from ..judge.occupancy import Launched, Resources, limits_for, of
from ..judge.speed_model import (
    FAIL,
    HELD,
    PASS,
    Estimate,
    GpuFigures,
    decisive_bounds,
    estimate,
    excess_by_line,
    verdict,
    work_on_shape,
)
from ..judge.timing import NAME
from ..result import (
    BANK_CONFLICT,
    OCCUPANCY,
    SPILLS,
    TIMING,
    UNCOALESCED_LOAD,
    UNCOALESCED_STORE,
    CheckResult,
    Feedback,
    failed,
    passed,
    skipped,
)
from .resources import launched, reference_launched

# printf's argument buffer in a kernel that calls it: 8 bytes an argument, a debug line's handful of them
PRINTF_LOCAL_BYTES = 64
ESTIMATED_REGISTERS = 32  # per thread, where no cubin says: a plain tiled kernel's (few enough for full occupancy)
WHY_SLOW = (UNCOALESCED_LOAD, UNCOALESCED_STORE, BANK_CONFLICT, OCCUPANCY, SPILLS)
SHOWN_FINDINGS = 3
BOUND_IN_WORDS = {
    "multiply-adds": "the multiply-adds themselves",
    "shared memory and L1": "shared-memory and L1 accesses (bank conflicts and uncoalesced global accesses add to "
                            "them)",
    "L2": "traffic to the L2 cache (smaller tiles read A and B from it more often)",
    "DRAM": "reading A and B from the GPU's memory",
    "barriers": "waiting at __syncthreads barriers",
}


def gpu_figures(config: Config) -> GpuFigures:
    model = config.timing.model
    return GpuFigures(model.gpu, model.arch, model.sms, model.clock_ghz, model.fp32_tflops, model.shared_tbs,
                      model.l2_tbs, model.dram_tbs, model.barrier_cycles)


def kernel_estimate(records: list[dict], size: int, contract: KernelContract, tile: int, compiled: Launched | None,
                    config: Config) -> Estimate | None:
    """One kernel's estimated time on the timing shape, from its profile on size³ and, where nvcc built it,
    its compiled resources."""
    t, gpu = config.timing, gpu_figures(config)
    profiled, timed = contract.launch(size, size, tile), contract.launch(t.m, t.n, tile)
    threads = timed.block[0] * timed.block[1] * timed.block[2]
    blocks = timed.grid[0] * timed.grid[1] * timed.grid[2]
    work = work_on_shape(records, size, profiled_blocks(profiled.grid), threads, blocks, t.m, t.n, t.k)
    launched = compiled or Launched(Resources(ESTIMATED_REGISTERS, shared_arrays_bytes(records)), threads,
                                    timed.shared_bytes)
    return estimate(work, gpu, of(limits_for(gpu.arch), launched).blocks)


def shared_arrays_bytes(records: list[dict]) -> int:
    """The shared memory the profile saw declared: each 2-D shared array's rows × columns × element bytes."""
    shapes = {(r["array"], r["rows"], r["columns"], r["bytes"]) for r in records
              if r["event"] == "access" and r["kind"].startswith("shared")}
    return sum(rows * columns * element for _, rows, columns, element in shapes)


def modelled_timing(profile: dict, tile: int, contract: KernelContract, student: Launched | None,
                    reference: Launched | None, findings: list[Feedback], config: Config, points: float,
                    needs_gpu: str, prints: bool = False) -> CheckResult | None:
    """The timing check decided by the speed model; None when the profile cannot give an estimate (the
    reference's tile unknown, or a kernel that fits no block on an SM)."""
    reference_tile = profile.get("reference_tile")
    if not reference_tile:
        return None
    size = profile["size"]
    mine = kernel_estimate(profile["student"], size, contract, tile, student, config)
    theirs = kernel_estimate(profile["reference"], size, REFERENCE, reference_tile, reference, config)
    if mine is None or theirs is None:
        return None
    t = config.timing
    ratio = mine.ms / theirs.ms
    decided = verdict(ratio, t.max_ratio, t.model.margin)
    unsure = _unsure_of_a_pass(mine, student, reference, prints) if decided == PASS else ""
    decided = HELD if unsure else decided
    metrics = {"estimated": True, "gpu": t.model.gpu, "modelled_ratio": round(ratio, 3), "max_ratio": t.max_ratio,
               "margin": t.model.margin, "student_ms_estimate": round(mine.ms, 4),
               "reference_ms_estimate": round(theirs.ms, 4), "bound": mine.bound, "reference_bound": theirs.bound,
               "occupancy_from": "compiler" if student is not None else "emulator"}
    message = _message(decided, ratio, mine, config, costliest_first(findings, profile, contract, tile, config),
                       unsure)
    if decided == PASS:
        return passed(NAME, TIMING, points, message, metrics=metrics)
    if decided == FAIL:
        return failed(NAME, TIMING, points, message, metrics=metrics)
    return skipped(NAME, TIMING, points, message, metrics=metrics, needs_gpu=needs_gpu)


def costliest_first(findings: list[Feedback], profile: dict, contract: KernelContract, tile: int,
                    config: Config) -> list[Feedback]:
    """The findings that explain a slow kernel, the line that costs the most time beyond its ideal first (an
    8-way conflict in the inner loop before one in the tile's load); the kernel's own (occupancy) after."""
    size, t = profile["size"], config.timing
    profiled, timed = contract.launch(size, size, tile), contract.launch(t.m, t.n, tile)
    excess = excess_by_line(profile["student"], size, profiled_blocks(profiled.grid),
                            timed.block[0] * timed.block[1] * timed.block[2], t.k)
    slow = [item for item in findings if item.what in WHY_SLOW]
    return sorted(slow, key=lambda item: -excess.get(item.line, 0.0) if item.line is not None else 0.0)


def _unsure_of_a_pass(mine: Estimate, student: Launched | None, reference: Launched | None,
                      prints: bool = False) -> str:
    """Why an estimate that passes must be held for a GPU, or '': the compiled kernel uses local memory the
    reference does not (a per-thread array, spilled registers: accesses the emulator does not count, which
    only make it slower, so a fail stands), or its profile counts fewer requests than any kernel that computes
    C makes (a report the kernel forged: the process student code runs in writes it). A kernel that calls printf
    has local memory for printf's arguments, which the GPU's timing never touches (late_warps.py switches
    printf off): up to PRINTF_LOCAL_BYTES of it are printf's."""
    allowed = (reference.resources.local_bytes if reference else 0) + (PRINTF_LOCAL_BYTES if prints else 0)
    if student is not None and student.resources.local_bytes > allowed:
        return (f"your compiled kernel uses {student.resources.local_bytes} bytes of local memory per thread, whose "
                "accesses the estimate does not count")
    if not mine.work.plausible():
        return ("the emulator counted fewer memory accesses than computing C needs (it does not see every access, "
                "such as those through a helper's copy of a pointer)")
    return ""


def _message(decided: str, ratio: float, mine: Estimate, config: Config, findings: list[Feedback],
             unsure: str = "") -> str:
    t = config.timing
    low, high = decisive_bounds(t.max_ratio, t.model.margin)
    estimated = (f"on an {t.model.gpu} your kernel would take about {ratio:.2f}× the reference's time on "
                 f"{t.m}×{t.n}×{t.k} (limit {t.max_ratio:g}×)")
    said = f"estimated without a GPU: {estimated}"
    if decided == HELD:
        why = f"but {unsure}" if unsure else "too near the limit to decide"
        said = f"not decided without a GPU: {estimated} by an estimate, {why}; it is timed on a GPU"
    elif decided == FAIL:
        said += f": too slow; most of its time goes to {BOUND_IN_WORDS[mine.bound]}"
    slow = [item.message for item in findings][:SHOWN_FINDINGS]
    if slow and decided != PASS:
        said += ". Why it is slower: " + "; ".join(slow)
    return (f"{said}\n(an estimate from what the CPU emulator counted, for your kernel and the reference: global-"
            f"memory sectors, shared-memory turns with bank conflicts, multiply-adds, barriers and blocks per SM; "
            f"it decides only at or below {low:.2f}× or at or above {high:.2f}×)")


def timing_without_gpu(held: CheckResult, cases: list[CheckResult], profile: dict | None, tile: int | None,
                       cubin: bytes, findings: list[Feedback], config: Config, sandbox: Sandbox) -> CheckResult:
    """The timing check of a grade without a GPU: `held` (points held for a GPU) under `timing.without_gpu:
    hold` or with no profile to estimate from; not timed when an emulated case did not pass (as on a GPU);
    else the model's verdict."""
    if config.timing.without_gpu != "model" or not cases:
        return held
    wrong = [case for case in cases if not case.passed]
    if wrong:
        # as short as the table's column: a one-bug report fits on a screen
        return skipped(NAME, TIMING, held.max_score, f"not timed: {len(wrong)} of {len(cases)} cases failed")
    if profile is None or not tile:
        return held
    contract = config.kernel.contract()
    student, _ = launched(cubin, contract, tile) if cubin else (None, None)
    reference = None
    if student is not None:  # both from the compiler, or both estimated: like against like
        reference = reference_launched(config.reference_path.read_text(encoding="utf-8"),
                                       cubin_arch(cubin) or config.compile.arch_without_gpu, config.compile.options,
                                       config.timeouts.compile_s, sandbox, config.cache_dir)
        student = student if reference is not None else None
    return modelled_timing(profile, tile, contract, student, reference, findings, config, held.max_score,
                           held.needs_gpu, prints=bool(cubin) and calls_printf(cubin)) or held
