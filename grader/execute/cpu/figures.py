"""A kernel's access profile summed up per kind (sectors per request, bank conflicts), to set beside Nsight
Compute's figures for the same shape on a GPU: a tool for benches and tests, not part of a grade.
"""
from __future__ import annotations

from pathlib import Path

from ...config import load_config
from ...source.static_check import find_kernels
from ..confine.sandbox import detect, scratch_folder
from .access_profile import KINDS, profile_size
from .build import build
from .harness_driver import profile_alone


def emulator_figures(kernel: Path, config_path: Path | None = None, size: int | None = None) -> dict:
    """The emulator's per-kernel figures for kernel.cu (built and run as a CPU grade would, sandboxed), to
    set beside Nsight Compute's on the same shape: global loads' sectors per request (ncu's
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / ..._requests_...), global stores' likewise, shared
    loads' mean ways and their bank conflicts (turns beyond the first: l1tex__data_bank_conflicts_pipe_lsu_
    mem_shared_op_ld.sum), and the records per line. Compare per-request figures: the counts are of the two
    sampled blocks, ncu's of the whole grid. Raises RuntimeError when the kernel does not build or its
    launch goes wrong."""
    config = load_config(config_path)
    source = Path(kernel).read_text(encoding="utf-8")
    contract = config.for_kernels(find_kernels(source)).kernel.contract()
    sandbox = detect()
    with scratch_folder("sgemm-profile-") as workdir:
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
        mine = [r for r in records if r["event"] == "access" and r["kind"] == kind]
        requests, total = sum(r["requests"] for r in mine), sum(r["total"] for r in mine)
        unit = "sectors_per_request" if kind.startswith("global") else "ways"
        figures[f"{kind}_requests"] = requests
        figures[f"{kind}_{unit}"] = round(total / requests, 3) if requests else None
        if kind.startswith("shared"):
            figures[f"{kind}_bank_conflicts"] = total - requests
    return figures
