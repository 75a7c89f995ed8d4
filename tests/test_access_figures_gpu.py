"""Issue 26's cross-check: what the CPU emulator counts (access_profile.py) against what Nsight Compute measures
on a GPU, for the same kernels on the same 64³ shape: sectors per request of global loads and stores, and the
ways of shared-memory loads. The emulator counts two sampled blocks, ncu the whole grid, so per-request figures
are compared. Tolerance: within 25% of ncu's figure, or within 0.5 of it (a ratio near 1).

Prints the table (run with -s to see it), and appends it to the file $ACCESS_TABLE when that is set."""
import os
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu, needs_ncu, needs_nvcc
from test_ncu_profile_gpu import device_arch

from grader.config import load_config
from grader.diagnose.profile import profile_cubin
from grader.execute.cpu.figures import emulator_figures
from grader.execute.nvcc.compile import compile_check
from grader.pipeline import GPU, RunPlan, placement_of, sandbox_of
from grader.source.static_check import find_kernels

pytestmark = [pytest.mark.gpu, needs_gpu, needs_ncu, needs_nvcc, needs_cxx]

KERNELS = {"reference": ROOT / "reference" / "kernel.cu",
           **{name: SUBMISSIONS / name / "kernel.cu" for name in (
               "good_basic", "uncoalesced_a_load", "uncoalesced_b_load", "uncoalesced_c_store", "bank_conflict_tile",
               "bank_conflict_padded", "slow_uncoalesced")}}
# (emulator's figure, ncu's property)
COMPARED = {"global load sectors/request": ("global_load_sectors_per_request", "sectors_per_load"),
            "global store sectors/request": ("global_store_sectors_per_request", "sectors_per_store"),
            "shared load ways": ("shared_load_ways", "shared_load_ways")}
RELATIVE, ABSOLUTE = 0.25, 0.5
TABLE: list[str] = []


def agree(emulated: float | None, measured: float | None) -> bool:
    if emulated is None or measured is None:
        return emulated == measured or not (emulated or measured)  # neither saw such an access
    return abs(emulated - measured) <= max(ABSOLUTE, RELATIVE * measured)


def ncu_figures(kernel: Path, config, size: int, tile: int) -> dict:
    source = kernel.read_text()
    contract = config.for_kernels(find_kernels(source)).kernel.contract()
    plan = RunPlan(GPU)
    compiled = compile_check(source, device_arch(), config.compile.options, 120, sandbox_of(plan), contract)
    assert compiled.ok, compiled.message
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(compiled.cubin)
        handle.flush()
        profiled = profile_cubin(handle.name, contract, tile, (size, size, size), placement_of(plan, config),
                                 sandbox_of(plan), config.cache_dir)
    assert profiled.profile is not None, profiled.problem
    return {name: getattr(profiled.profile, prop) for name, (_, prop) in COMPARED.items()}


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_emulator_counts_accesses_as_ncu_measures_them(name, config_file):
    config = load_config(config_file)
    emulated = emulator_figures(KERNELS[name], config_file)
    measured = ncu_figures(KERNELS[name], config, emulated["size"], emulated["tile"])
    row = [name]
    for label, (key, _) in COMPARED.items():
        row.append(f"{label}: emulator {emulated[key]}, ncu {measured[label] and round(measured[label], 2)}")
    TABLE.append(" | ".join(row))
    print("\n" + TABLE[-1])
    if os.environ.get("ACCESS_TABLE"):
        with open(os.environ["ACCESS_TABLE"], "a") as table:
            table.write(TABLE[-1] + "\n")
    wrong = {label: (emulated[key], measured[label]) for label, (key, _) in COMPARED.items()
             if not agree(emulated[key], measured[label])}
    assert not wrong, wrong
