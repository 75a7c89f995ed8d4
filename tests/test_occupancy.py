"""Issue 26: resources read from the compiled kernel, theoretical occupancy, and the advice they give."""
import random
from pathlib import Path

import pytest
from conftest import ROOT
from hardware import needs_cxx, needs_nvcc

from grader.config import load_config
from grader.contract import KernelContract
from grader.diagnose.resources import compiler_feedback, launched, reference_launched
from grader.execute.nvcc.compile import TILE_PROBE_SYMBOL, compile_check
from grader.execute.nvcc.cubin_resources import cubin_arch, device_int, kernel_resources
from grader.judge.occupancy import ARCHES, Launched, Resources, occupancy, occupancy_feedback
from grader.result import OCCUPANCY, SPILLS

KERNELS = Path(__file__).resolve().parent / "feedback_kernels"
SYMBOL = "_Z7mysgemmiiiPKfS0_Pf"
CONTRACT = KernelContract()


# Figures as NVIDIA's occupancy calculator (cuda_occupancy.h) gives them.
@pytest.mark.parametrize("arch, registers, shared, threads, blocks, percent, limiter", [
    ("sm_90", 32, 4096, 256, 8, 100.0, None),  # the reference at tile 16: every warp slot used
    ("sm_90", 96, 4096, 256, 2, 25.0, "registers"),  # 3072 registers a warp: 5 warps per sub-partition
    ("sm_90", 40, 4096, 256, 6, 75.0, "registers"),
    ("sm_80", 64, 0, 1024, 1, 50.0, "registers"),
    ("sm_70", 64, 0, 256, 4, 50.0, "registers"),
    ("sm_86", 32, 0, 256, 6, 100.0, "warps"),  # 48 warps an SM
    ("sm_75", 32, 8192, 1024, 1, 100.0, "warps"),  # 32 warps an SM
    ("sm_90", 16, 48 * 1024, 128, 4, 25.0, "shared memory"),  # 49 KB a block with the driver's 1 KB
    ("sm_80", 16, 48 * 1024, 128, 3, 18.8, "shared memory"),
    ("sm_90", 16, 0, 32, 32, 50.0, "blocks"),  # one-warp blocks run out of block slots first
])
def test_occupancy_matches_the_calculator(arch, registers, shared, threads, blocks, percent, limiter):
    found = occupancy(ARCHES[arch], registers, shared, threads)
    assert (found.blocks, found.percent) == (blocks, percent)
    if limiter:
        assert found.limiter == limiter


def test_a_block_over_the_shared_limit_fits_nowhere():
    assert occupancy(ARCHES["sm_90"], 32, 228 * 1024, 256).blocks == 0


def reference_at_tile_16():
    return Launched(Resources(32, 2048), 256, 2048)


def test_register_heavy_kernel_is_told_what_limits_it_in_words():
    heavy = Launched(Resources(96, 2048), 256, 2048)
    [finding] = occupancy_feedback(ARCHES["sm_90"], heavy, reference_at_tile_16())
    assert finding.what == OCCUPANCY and finding.source == "compiler"
    assert finding.message == ("registers: 96 per thread allow 2 blocks of 256 threads per SM on sm_90 "
                               "(25% occupancy); the reference uses 32 (100%)")
    assert (finding.value, finding.reference_value, finding.unit) == (25.0, 100.0, "%")
    assert "registers" in finding.advice


def test_as_good_as_the_reference_gets_no_finding():
    assert occupancy_feedback(ARCHES["sm_90"], reference_at_tile_16(), reference_at_tile_16()) == []


def test_local_memory_is_a_spill_finding():
    spilled = Launched(Resources(32, 2048, local_bytes=64), 256, 2048)
    [finding] = occupancy_feedback(ARCHES["sm_90"], spilled, reference_at_tile_16())
    assert finding.what == SPILLS and finding.value == 64 and finding.reference_value == 0
    assert "64 bytes of local memory per thread" in finding.message


def build(source: str, sandbox, arch: str = "sm_90") -> bytes:
    outcome = compile_check(source, arch, ["-lineinfo"], 120, sandbox, CONTRACT)
    assert outcome.ok, outcome.message
    return outcome.cubin


@needs_nvcc
def test_the_reference_cubin_reads_as_ptxas_reports_it(sandbox):
    cubin = build((ROOT / "reference/kernel.cu").read_text(), sandbox)
    assert cubin_arch(cubin) == "sm_90"
    resources = kernel_resources(cubin, SYMBOL)
    # two 16 × 16 tiles of floats; sm_90's cubin holds the driver's 1 KB too, which is not the student's
    assert resources.static_shared == 2048 and resources.local_bytes == 0
    assert 16 <= resources.registers <= 40
    assert device_int(cubin, TILE_PROBE_SYMBOL) == 16


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_75", "sm_80"])
def test_older_arches_read_the_same_shared_memory(sandbox, arch):
    cubin = build((ROOT / "reference/kernel.cu").read_text(), sandbox, arch)
    assert cubin_arch(cubin) == arch and kernel_resources(cubin, SYMBOL).static_shared == 2048


@needs_nvcc
def test_register_heavy_kernel_gets_an_occupancy_finding_and_the_reference_none(sandbox, tmp_path):
    config = load_config()
    reference = reference_launched((ROOT / "reference/kernel.cu").read_text(), "sm_90", ["-lineinfo"], 120, sandbox,
                                   tmp_path)
    assert reference is not None and reference.threads == 256
    heavy = build((KERNELS / "register_heavy/kernel.cu").read_text(), sandbox)
    found, figures = compiler_feedback(heavy, config.kernel.contract(), 16, "", reference)
    [finding] = found
    assert finding.what == OCCUPANCY and finding.message.startswith("registers: ")
    assert finding.value <= 50.0 and finding.reference_value == 100.0
    assert figures["registers"] >= 64 and figures["gpu"] == "sm_90"
    plain = build((ROOT / "reference/kernel.cu").read_text(), sandbox)
    assert compiler_feedback(plain, config.kernel.contract(), 16, "", reference)[0] == []
    # cached: the second look-up reads the cache, and agrees
    assert reference_launched((ROOT / "reference/kernel.cu").read_text(), "sm_90", ["-lineinfo"], 120, sandbox,
                              tmp_path) == reference


@needs_nvcc
def test_a_run_time_indexed_array_is_a_local_memory_finding(sandbox):
    cubin = build((KERNELS / "local_array/kernel.cu").read_text(), sandbox)
    student, tile = launched(cubin, CONTRACT, None)
    assert tile == 16 and student.resources.local_bytes > 0
    found, _ = compiler_feedback(cubin, CONTRACT, None, "sm_90", reference_at_tile_16())
    assert SPILLS in {f.what for f in found}


@needs_nvcc
def test_the_configured_gpu_is_the_one_told(sandbox):
    heavy = build((KERNELS / "register_heavy/kernel.cu").read_text(), sandbox)
    [finding] = compiler_feedback(heavy, CONTRACT, 16, "sm_86", Launched(Resources(32, 2048), 256, 2048))[0]
    assert "on sm_86" in finding.message


@needs_nvcc
def test_a_malformed_cubin_reads_as_unknown_never_a_figure(sandbox):
    cubin = build((ROOT / "reference/kernel.cu").read_text(), sandbox)
    assert kernel_resources(b"not an elf", SYMBOL) is None and cubin_arch(b"\x7fELF") is None
    assert kernel_resources(cubin[:200], SYMBOL) is None
    rng = random.Random(26)
    for _ in range(300):  # bytes a hostile build could leave: never an exception
        broken = bytearray(cubin)
        for _ in range(8):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        kernel_resources(bytes(broken), SYMBOL)
        device_int(bytes(broken), TILE_PROBE_SYMBOL)
        cubin_arch(bytes(broken))


@needs_nvcc
def test_a_symbol_table_said_to_lie_past_the_files_end_is_unreadable_not_an_error(sandbox):
    """One flipped byte of a section header can put the symbol table at an offset no file has (2**63 and more):
    every reader of symbols says the cubin does not tell, as for any other damage, rather than raising."""
    import struct

    from grader.execute.nvcc.kernel_params import entry_functions, symbols

    cubin = bytearray(build((ROOT / "reference/kernel.cu").read_text(), sandbox))
    table, entry_size, count = (struct.unpack_from(form, cubin, at)[0] for form, at in
                                (("<Q", 0x28), ("<H", 0x3A), ("<H", 0x3C)))
    symtab = next(table + i * entry_size for i in range(count)
                  if struct.unpack_from("<I", cubin, table + i * entry_size + 4)[0] == 2)  # SHT_SYMTAB
    struct.pack_into("<Q", cubin, symtab + 0x18, 0xD300_0000_0000_0000)  # its sh_offset
    broken = bytes(cubin)
    assert kernel_resources(broken, SYMBOL) is None and device_int(broken, TILE_PROBE_SYMBOL) is None
    assert symbols(broken) is None and entry_functions(broken) is None


def copied(tmp_path, path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "kernel.cu").write_text(path.read_text())
    return folder


@needs_nvcc
def test_a_compile_only_grade_carries_the_finding_and_the_reference_gets_none(config_file, tmp_path):
    from grader.cases import load_cases
    from grader.pipeline import RunPlan, grade
    from grader.result import SubmissionResult

    config = load_config(config_file)
    cases = load_cases(config.testcases_dir)
    heavy = grade(copied(tmp_path, KERNELS / "register_heavy/kernel.cu", "heavy"), config, cases, RunPlan(None))
    assert [f.what for f in heavy.feedback] == [OCCUPANCY]
    compiled = next(c for c in heavy.checks if c.kind == "compile")
    assert compiled.passed and compiled.metrics["resources"]["registers"] >= 64
    assert SubmissionResult.from_dict(heavy.to_dict()).feedback == heavy.feedback
    reference = grade(copied(tmp_path, ROOT / "reference/kernel.cu", "ref"), config, cases, RunPlan(None))
    assert reference.feedback == [] and reference.score == heavy.score


@needs_nvcc
@needs_cxx
def test_a_cpu_grade_keeps_every_point_and_adds_the_advice(graders, tmp_path):
    heavy = graders("cpu")(copied(tmp_path, KERNELS / "register_heavy/kernel.cu", "heavy"))
    assert heavy.outcome == "graded" and heavy.score == heavy.checkable_max  # advice costs no point
    [finding] = heavy.feedback
    assert finding.what == OCCUPANCY and "256 threads" in finding.message


def test_the_lab_gpu_is_checked_in_config():
    from grader.config import Config
    from grader.errors import ConfigError
    from grader.schema import build

    assert build(Config, {"feedback": {"gpu": "sm_86"}}, "config.yaml").feedback.gpu == "sm_86"
    with pytest.raises(ConfigError, match="feedback.gpu"):
        build(Config, {"feedback": {"gpu": "sm_42"}}, "config.yaml")


@needs_nvcc
@pytest.mark.parametrize("name, tile, shared", [("bank_conflict", 32, 8192), ("bank_conflict_padded", 32, 8320),
                                                ("uncoalesced", 16, 2048)])
def test_the_other_feedback_kernels_compile_and_read(sandbox, name, tile, shared):
    cubin = build((KERNELS / name / "kernel.cu").read_text(), sandbox)
    student, found_tile = launched(cubin, CONTRACT, None)
    assert found_tile == tile and student.threads == tile * tile
    assert student.resources.static_shared == shared  # the A tile and the B tile (padded: 32 × 33 floats)


@needs_nvcc
def test_the_reference_built_ahead_on_a_thread_is_built_once_and_read_by_the_feedback(sandbox, tmp_path, monkeypatch):
    """A GPU grade builds the reference's cubin on a thread while its cases run (warm_reference); the feedback
    asking for it meanwhile waits for that build instead of starting a second nvcc."""
    import threading

    from grader.diagnose import resources

    builds, real_build = [], resources.build_cubin

    def counted(*args, **kwargs):
        builds.append(threading.current_thread().name)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(resources, "build_cubin", counted)
    source = (ROOT / "reference/kernel.cu").read_text()
    resources.warm_reference(source, "sm_90", ["-lineinfo"], 120, sandbox, tmp_path)
    asked = reference_launched(source, "sm_90", ["-lineinfo"], 120, sandbox, tmp_path)
    assert asked is not None and asked.threads == 256
    assert len(builds) == 1  # by whichever of the two asked first
    assert reference_launched(source, "sm_90", ["-lineinfo"], 120, sandbox, tmp_path) == asked  # from the cache
    assert len(builds) == 1
