"""The CPU emulator's access profile (issue 26): how a kernel's warps touch memory, per source line.

One launch on a fixed shape, size = m = n = k = 64 (the least multiple of the tile from 64 on, at least two
tiles: for the lab's 8, 16 and 32 always 64), so no block is partial and no load is masked (each lane's n-th
execution of a line then pairs with the n-th of every other lane of its warp, as the GPU issues them). Of
its grid, a fixed sample runs: the first block and the last (harness.cpp, profile_blocks). The harness
(cuda_emu.h, "access profile") counts, per (line, kind, array): warp-level requests, the 32-byte sectors a
global one touches or the turns (n-way bank conflict) a shared one takes, and what the same bytes would take
at best. Its report lines are student-controlled: `access_records` keeps them only from a launch that ended
cleanly.

`emulator_figures` is the per-kernel summary for comparing with Nsight Compute on a GPU.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..protocol import MAX_ACCESS_LINES, access_ok
from .build import build

PROFILE_SEED = 26
KINDS = ("global_load", "global_store", "shared_load", "shared_store")
PROBLEMS = ("fault", "divergence", "warp_divergence", "race", "unstored_read", "c_collision")


def profile_size(tile: int) -> int:
    return tile * max(2, -(-64 // tile))


def access_records(events: list[dict | None]) -> list[dict] | None:
    """The `access` reports of a launch that finished with no fault, race or divergence; else None."""
    if any(event is None or event["event"] in PROBLEMS for event in events):
        return None
    if not any(event["event"] == "done" for event in events):
        return None
    records = [event for event in events if event["event"] == "access"]
    return records if len(records) <= MAX_ACCESS_LINES and all(map(access_ok, records)) else None


def emulator_figures(kernel: Path, config_path: Path | None = None, size: int | None = None) -> dict:
    """The emulator's per-kernel figures for kernel.cu (built and run as a CPU grade would, sandboxed), to
    set beside Nsight Compute's on the same shape: global loads' sectors per request (ncu's
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / ..._requests_...), global stores' likewise, shared
    loads' mean ways and their bank conflicts (turns beyond the first: l1tex__data_bank_conflicts_pipe_lsu_
    mem_shared_op_ld.sum), and the records per line. Compare per-request figures: the counts are of the two
    sampled blocks, ncu's of the whole grid. Raises RuntimeError when the kernel does not build or its
    launch goes wrong."""
    # Here, not atop: the CPU driver, which imports this module, needs none of them (each child's start-up).
    from ...config import load_config
    from ...source.static_check import find_kernels
    from ..sandbox import detect
    from .harness_driver import profile_alone  # which imports this module

    config = load_config(config_path)
    source = Path(kernel).read_text(encoding="utf-8")
    contract = config.for_kernels(find_kernels(source)).kernel.contract()
    sandbox = detect()
    with tempfile.TemporaryDirectory(prefix="sgemm-profile-") as workdir:
        Path(workdir).chmod(0o711)
        built = build(source, contract, contract.tile_source(), config.cache_dir, Path(workdir), sandbox, 120)
        if built.binary is None:
            raise RuntimeError(built.message)
        tile, records = profile_alone(built.binary, Path(workdir), sandbox, contract, size)
    if records is None:
        raise RuntimeError(f"{kernel}: the profile launch did not finish cleanly")
    return {**summarize(records), "size": size or profile_size(tile), "tile": tile, "lines": records}


def summarize(records: list[dict]) -> dict:
    """Per kind over every line: requests, and the mean sectors (global) or ways (shared) per request."""
    figures = {}
    for kind in KINDS:
        mine = [r for r in records if r["kind"] == kind]
        requests, total = sum(r["requests"] for r in mine), sum(r["total"] for r in mine)
        unit = "sectors_per_request" if kind.startswith("global") else "ways"
        figures[f"{kind}_requests"] = requests
        figures[f"{kind}_{unit}"] = round(total / requests, 3) if requests else None
        if kind.startswith("shared"):
            figures[f"{kind}_bank_conflicts"] = total - requests
    return figures
