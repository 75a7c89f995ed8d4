"""Issue 26 on a real GPU: Nsight Compute profiles one launch of the student's kernel and of the reference on
the timing shape, in the sandbox, and what it measures becomes advice (source "ncu") worth no points.
Also the figures the lead compares with the emulator's (profile_cubin: sectors per request of global loads,
shared-memory bank-conflict ways)."""
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from hardware import needs_gpu, needs_ncu, needs_nvcc

from grader.cases import load_cases
from grader.config import load_config
from grader.contract import REFERENCE
from grader.diagnose.profile import profile_cubin
from grader.diagnose.resources import REFERENCE_FILE, build_cubin
from grader.execute.nvcc.compile import prepare_source
from grader.pipeline import GPU, RunPlan, grade, placement_of, sandbox_of
from grader.result import OCCUPANCY, THROUGHPUT, TIMING, UNCOALESCED_LOAD, UNCOALESCED_STORE

pytestmark = [pytest.mark.gpu, needs_gpu, needs_ncu, needs_nvcc]
KERNELS = Path(__file__).resolve().parent / "feedback_kernels"


@pytest.fixture(scope="module")
def setup(config_file):
    config = load_config(config_file)
    return config, [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:1]


def graded(setup, tmp_path, source: Path, profile: bool):
    config, cases = setup
    folder = tmp_path / f"{source.parent.name}-{profile}"
    folder.mkdir()
    (folder / "kernel.cu").write_text(source.read_text())
    return grade(folder, config, cases, RunPlan(GPU, profile=profile))


def device_arch() -> str:
    cap = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()[0]
    return "sm_" + cap.replace(".", "")


def test_the_reference_measures_coalesced_and_conflict_free(setup, tmp_path):
    config, _ = setup
    cubin = build_cubin(prepare_source((ROOT / "reference/kernel.cu").read_text(), REFERENCE_FILE), device_arch(),
                        config.compile.options, 120, sandbox_of(RunPlan(GPU)))
    path = tmp_path / "reference.cubin"
    path.write_bytes(cubin)
    t = config.timing
    profiled = profile_cubin(path, REFERENCE, 16, (t.m, t.n, t.k), placement_of(RunPlan(GPU), config),
                             sandbox_of(RunPlan(GPU)), config.cache_dir)
    assert profiled.profile is not None, profiled.problem
    figures = profiled.profile.figures()
    # a warp of 16 × 16 threads reads two rows of 16 floats: 4 sectors of 32 bytes
    assert 3.5 <= figures["sectors_per_load"] <= 6, figures
    assert figures["shared_load_ways"] <= 1.5 and figures["achieved_occupancy_pct"] > 50, figures
    assert 0 < figures["fp32_pct_of_peak"] < 100 and 0 < figures["dram_pct_of_peak"] < 100, figures


def test_uncoalesced_kernel_is_told_by_ncu_and_keeps_its_points(setup, tmp_path):
    profiled = graded(setup, tmp_path, KERNELS / "uncoalesced/kernel.cu", True)
    plain = graded(setup, tmp_path, KERNELS / "uncoalesced/kernel.cu", False)
    kinds = {f.what for f in profiled.feedback if f.source == "ncu"}
    assert {THROUGHPUT, UNCOALESCED_LOAD, UNCOALESCED_STORE} <= kinds, profiled.feedback
    assert profiled.score == plain.score  # advice only
    timing = next(c for c in profiled.checks if c.kind == TIMING)
    figures = timing.metrics["ncu"]
    assert figures["student"]["sectors_per_load"] > figures["reference"]["sectors_per_load"] + 4, figures
    print("ncu seconds (student + reference, the reference cached after its first run):", figures["seconds"])


def test_register_heavy_kernel_measures_lower_occupancy_than_the_reference(setup, tmp_path):
    result = graded(setup, tmp_path, KERNELS / "register_heavy/kernel.cu", True)
    assert OCCUPANCY in {f.what for f in result.feedback if f.source == "compiler"}
    figures = next(c for c in result.checks if c.kind == TIMING).metrics["ncu"]
    assert figures["student"]["achieved_occupancy_pct"] < figures["reference"]["achieved_occupancy_pct"], figures


def test_the_reference_as_a_submission_gets_no_ncu_advice(setup, tmp_path):
    result = graded(setup, tmp_path, ROOT / "reference/kernel.cu", True)
    assert [f for f in result.feedback if f.source in ("ncu", "compiler")] == []


def profiled(setup, tmp_path, name: str, tile: int):
    """ncu's figures for one feedback kernel, compiled for this GPU as the grader compiles it."""
    from grader.execute.nvcc.compile import compile_check

    config, _ = setup
    plan = RunPlan(GPU)
    compiled = compile_check((KERNELS / name / "kernel.cu").read_text(), device_arch(), config.compile.options, 120,
                             sandbox_of(plan), config.kernel.contract())
    assert compiled.ok, compiled.message
    path = tmp_path / f"{name}.cubin"
    path.write_bytes(compiled.cubin)
    result = profile_cubin(path, config.kernel.contract(), tile, (1024, 1024, 1024), placement_of(plan, config),
                           sandbox_of(plan), config.cache_dir)
    assert result.profile is not None, result.problem
    return result.profile


def test_a_transposed_32_wide_tile_measures_32_ways_and_its_padded_twin_none(setup, tmp_path):
    conflicted = profiled(setup, tmp_path, "bank_conflict", 32)
    padded = profiled(setup, tmp_path, "bank_conflict_padded", 32)
    assert conflicted.shared_load_ways >= 16 and conflicted.shared_store_ways >= 16, conflicted.figures()
    assert padded.shared_load_ways <= 1.5 and padded.shared_store_ways <= 1.5, padded.figures()


def test_the_uncoalesced_kernel_measures_many_sectors_per_request(setup, tmp_path):
    figures = profiled(setup, tmp_path, "uncoalesced", 16).figures()
    assert figures["sectors_per_load"] >= 8 and figures["sectors_per_store"] >= 8, figures


@pytest.mark.parametrize("name, told", [("bank_conflict", True), ("bank_conflict_padded", False)])
def test_a_graded_bank_conflict_is_told_and_right_answers_keep_their_points(setup, tmp_path, name, told):
    from grader.result import BANK_CONFLICT, CASE

    result = graded(setup, tmp_path, KERNELS / name / "kernel.cu", True)
    assert all(c.passed for c in result.checks if c.kind == CASE), [c.message for c in result.checks]
    assert (BANK_CONFLICT in {f.what for f in result.feedback if f.source == "ncu"}) == told, result.feedback


@pytest.mark.parametrize("name", ["bank_conflict_tile", "uncoalesced_a_load", "uncoalesced_c_store",
                                  "bank_conflict_padded"])
def test_nsight_compute_measures_each_line_as_the_emulator_found_it(setup, tmp_path, name):
    """`--profile`: ncu's counters by source line (the timing shape, the whole grid) stand beside the emulator's
    findings (64³, two blocks) at the same lines: where the emulator told a bank conflict or an uncoalesced
    access, the GPU measured that line at twice what its bytes need or more, and the finding says so; where the
    emulator told nothing, no line is measured that far from ideal."""
    from conftest import SUBMISSIONS

    from grader.result import BANK_CONFLICT

    result = graded(setup, tmp_path, SUBMISSIONS / name / "kernel.cu", True)
    [figures] = [c.metrics["ncu"] for c in result.checks if "ncu" in c.metrics]
    lines = {int(line): measured for line, measured in figures["lines"].items()}
    assert lines, figures
    told = [f for f in result.feedback if f.source == "emulator"
            and f.what in (BANK_CONFLICT, UNCOALESCED_LOAD, UNCOALESCED_STORE)]
    assert bool(told) == (name != "bank_conflict_padded"), result.feedback
    for finding in told:
        key = "shared_ways" if finding.what == BANK_CONFLICT else "excess_sectors"
        assert (lines.get(finding.line, {}).get(key) or 0) >= 2, (finding, lines, figures.get("lines_problem"))
        assert "Nsight Compute measured this line's" in finding.message, finding
    for line, measured in lines.items():
        if line not in {f.line for f in told}:
            assert all((measured[key] or 1) <= 1.5 for key in ("shared_ways", "excess_sectors")), (line, measured)
