"""The kernel contract as real labs write it: the grid's x over C's rows (`kernel.launch.x: rows`), a square
lab's one size (`args: [A, B, C, width]`, the `pmpp` preset), and several accepted kernel names (ECE408's
`matrixMultiplyShared` or `matrixMultiply`). CPU-emulator grading here; the GPU's twins are marked `gpu`."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu, needs_nvcc

from grader.cases import load_cases
from grader.config import load_config, preset_path
from grader.contract import KernelContract
from grader.diagnose.run import launch_command, shape_for
from grader.errors import ConfigError
from grader.execute.cpu.build import emulator_sources
from grader.execute.job import Job
from grader.execute.nvcc.compile import prepare_source
from grader.execute.nvcc.kernel_params import find_kernel, parameter_problem
from grader.pipeline import CPU, GPU, RunPlan, grade
from grader.result import PASSED

TILE = 16


def rows_config(tmp_path, x: str = "rows"):
    """The shipped config with the grid's x over C's rows."""
    text = (ROOT / "config.yaml").read_text().replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    assert "    x: columns " in text
    text = text.replace("    x: columns ", f"    x: {x} ")
    (tmp_path / "config.yaml").write_text(text)
    return load_config(tmp_path / "config.yaml")


def tiles(size: int) -> int:
    return -(-size // TILE)


def geometry_matters(case) -> bool:
    """Where a kernel written for x over rows, launched with x over columns, leaves cells of C unwritten:
    the grid then has ceil(n/T) blocks along the kernel's rows and ceil(m/T) along its columns."""
    return tiles(case.m) != tiles(case.n)


def not_passed(result) -> set[str]:
    return {c.name for c in result.checks if c.kind == "case" and c.status != PASSED}


def cpu_cases(config):
    return [case for case in load_cases(config.testcases_dir, config.kernel.square) if case.on_cpu == "whole"]


# -- the launch's orientation ---------------------------------------------------------------------------

def test_x_over_rows_swaps_the_grid_and_keeps_tile_by_tile_blocks():
    columns, rows = KernelContract(), KernelContract(x="rows")
    assert columns.launch(m=33, n=17, tile=16).grid == (2, 3, 1)
    assert rows.launch(m=33, n=17, tile=16).grid == (3, 2, 1)
    assert rows.launch(m=33, n=17, tile=16).block == (16, 16, 1)


def test_the_orientation_reaches_every_launcher(tmp_path):
    """The child reads it from the job; the sanitizer's launch program gets the same grid on its command line."""
    contract = rows_config(tmp_path).kernel.contract()
    Job("", "", contract, [], "", str(tmp_path)).save(tmp_path / "job.json")
    assert Job.load(tmp_path / "job.json").contract.x == "rows"
    command = launch_command(tmp_path / "launch", tmp_path / "k.cubin", contract, 16, (19, 21, 50))
    assert command[4:9] == ["2,2,1", "16,16,1", "19", "21", "50"]
    command = launch_command(tmp_path / "launch", tmp_path / "k.cubin", contract, 16, (40, 19, 50))
    assert command[4] == "3,2,1"  # x: 3 blocks over 40 rows, y: 2 over 19 columns


def test_an_unknown_orientation_is_refused_with_its_key(tmp_path):
    with pytest.raises(ConfigError, match=r"kernel.launch.x: must be columns or rows, got 'diagonal'"):
        rows_config(tmp_path, "diagonal")


@needs_cxx
def test_a_kernel_launched_x_over_rows_gets_every_point_the_cpu_checks(tmp_path):
    config = rows_config(tmp_path)
    result = grade(SUBMISSIONS / "launch_x_rows", config, cpu_cases(config), RunPlan(CPU))
    assert result.tile_size == TILE
    assert [(c.name, c.message) for c in result.checks if c.kind != "timing" and c.status != PASSED] == []


@needs_cxx
def test_the_same_kernel_under_the_default_orientation_fails_only_where_the_geometry_matters():
    """Square cases (and any whose m and n take as many tiles) pass; the others leave cells of C unwritten."""
    config = load_config()
    cases = cpu_cases(config)
    result = grade(SUBMISSIONS / "launch_x_rows", config, cases, RunPlan(CPU))
    broken = {case.name for case in cases if geometry_matters(case)}
    assert {"square_64", "ragged_k"} & broken == set() and {"ragged_m", "rect_wide"} <= broken
    assert not_passed(result) == broken


# -- square labs: one size, width ----------------------------------------------------------------------

def test_a_square_lab_passes_width_as_every_size():
    contract = load_config(preset_path("pmpp")).kernel.contract()
    assert contract.name == "MatrixMulKernel" and contract.square
    assert contract.arguments(7, 7, 7, "M", "N", "P") == ["M", "N", "P", 7]
    assert contract.signature == "const float *A, const float *B, float *C, int width"
    call = emulator_sources("", contract)["launch.inc"]
    assert "::MatrixMulKernel(AnyPointer{args.A}, AnyPointer{args.B}, AnyPointer{args.C}, args.m)" in call
    # the sanitizer's launch program reads one letter a size, on a square shape
    assert shape_for("memcheck", 16, contract) == shape_for("racecheck", 16, contract) == (19, 19, 19)
    assert launch_command(ROOT, ROOT, contract, 16, (19, 19, 19))[3] == "A,B,C,m"


def test_a_square_lab_refuses_a_case_file_with_a_case_that_is_not_square(tmp_path):
    """The file and the case are named; the CLI says so as misuse (exit 2) before grading anything."""
    text = preset_path("pmpp").read_text().replace("testcases: pmpp_testcases", f"testcases: {ROOT / 'testcases'}")
    (tmp_path / "pmpp.yaml").write_text(text.replace("../reference", str(ROOT / "reference")))
    with pytest.raises(ConfigError) as refused:
        load_cases(ROOT / "testcases", square=True)
    assert str(refused.value) == (f"{ROOT / 'testcases' / '20-ragged.yaml'}: cases[0]: case 'ragged_m' is m = 67, "
                                  "n = 64, k = 64; this lab's kernel takes one size (width), so every case must be "
                                  "square: m = n = k")
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "pmpp_square"), "--config",
                               str(tmp_path / "pmpp.yaml"), "--no-run"], cwd=ROOT, capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 2 and "20-ragged.yaml: cases[0]: case 'ragged_m'" in finished.stderr


@pytest.mark.parametrize("old, new, words", [
    ("  m: 2048\n  n: 2048\n  k: 2048\n", "  m: 2048\n  n: 1024\n  k: 2048\n",
     "timing: this lab's kernel takes one size (width: m = n = k), so its timing shape must be square"),
    ("args: [A, B, C, width]", "args: [A, B, C, width, m]", "kernel.args: must list"),
])
def test_a_square_lab_config_is_square(tmp_path, old, new, words):
    text = preset_path("pmpp").read_text()
    assert old in text
    text = text.replace(old, new).replace("testcases: pmpp_testcases", f"testcases: {ROOT / 'presets/pmpp_testcases'}")
    (tmp_path / "pmpp.yaml").write_text(text.replace("../reference", str(ROOT / "reference")))
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_config(tmp_path / "pmpp.yaml")


@needs_cxx
def test_the_pmpp_preset_grades_the_textbook_kernel_full_marks_on_the_cpu():
    config = load_config(preset_path("pmpp"))
    result = grade(SUBMISSIONS / "pmpp_square", config, cpu_cases(config), RunPlan(CPU))
    assert result.tile_size == TILE
    assert [(c.name, c.message) for c in result.checks if c.kind != "timing" and c.status != PASSED] == []


# The textbook's first tiled kernel assumes Width is a multiple of TILE_WIDTH: no bounds, Width / TILE_WIDTH phases.
WITHOUT_BOUNDS = [("(Width + TILE_WIDTH - 1) / TILE_WIDTH", "Width / TILE_WIDTH"),
                  ("if ((Row < Width) && (ph * TILE_WIDTH + tx) < Width)\n", "if (1)\n"),
                  ("if ((ph * TILE_WIDTH + ty) < Width && Col < Width)\n", "if (1)\n"),
                  ("if ((Row < Width) && (Col < Width))\n", "")]


def without_bounds(tmp_path):
    source = (SUBMISSIONS / "pmpp_square" / "kernel.cu").read_text()
    for old, new in WITHOUT_BOUNDS:
        assert old in source
        source = source.replace(old, new)
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "kernel.cu").write_text(source)
    return tmp_path / "student"


@needs_cxx
def test_the_textbook_kernel_without_bounds_fails_exactly_the_widths_that_are_no_multiple_of_its_tile(tmp_path):
    config = load_config(preset_path("pmpp"))
    cases = cpu_cases(config)
    result = grade(without_bounds(tmp_path), config, cases, RunPlan(CPU))
    assert not_passed(result) == {case.name for case in cases if case.m % TILE}
    assert {"width_16", "width_64", "width_256"}.isdisjoint(not_passed(result))


@needs_cxx
def test_the_cli_grades_with_the_pmpp_preset(tmp_path):
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "pmpp_square"), "--preset", "pmpp",
                               "--backend", "cpu", "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 0, finished.stderr
    result = json.loads((tmp_path / "pmpp_square.json").read_text())
    # every point without a GPU: the large cases by sampled blocks, timing by the speed model
    assert result["outcome"] == "graded" and result["score"] == 100


@needs_nvcc
def test_the_square_kernel_is_found_by_its_mangled_name_and_takes_what_the_lab_passes(tmp_path):
    contract = load_config(preset_path("pmpp")).kernel.contract()
    source = (SUBMISSIONS / "pmpp_square" / "kernel.cu").read_text()
    (tmp_path / "k.cu").write_text(prepare_source(source))
    subprocess.run(["nvcc", "--cubin", "-arch", "sm_90", "k.cu", "-o", "k.cubin"], cwd=tmp_path, check=True)
    cubin = (tmp_path / "k.cubin").read_bytes()
    assert find_kernel(cubin, contract).symbol == "_Z15MatrixMulKernelPfS_S_i"
    assert parameter_problem(cubin, contract) == ""
    # a Width behind a typedef of size_t is told as the size it is, from the compiled parameter list
    wide = "typedef size_t dim_t;\n" + source.replace("int Width)\n{", "dim_t Width)\n{", 1)
    (tmp_path / "k.cu").write_text(prepare_source(wide))
    subprocess.run(["nvcc", "--cubin", "-arch", "sm_90", "k.cu", "-o", "k.cubin"], cwd=tmp_path, check=True)
    assert ("parameter 4 is 8 bytes where the lab passes the size width, a 32-bit int"
            in parameter_problem((tmp_path / "k.cubin").read_bytes(), contract))


# -- several accepted kernel names ------------------------------------------------------------------------

ECE408 = load_config(preset_path("ece408"))


def test_the_graded_name_is_the_first_accepted_one_the_file_defines():
    assert ECE408.kernel.names == ("matrixMultiplyShared", "matrixMultiply")
    assert ECE408.for_kernels(["matrixMultiply"]).kernel.contract().name == "matrixMultiply"
    both = ECE408.for_kernels(["matrixMultiply", "matrixMultiplyShared"])
    assert both.kernel.contract().name == "matrixMultiplyShared"  # the lab's order, not the file's
    assert ECE408.kernel.names == ("matrixMultiplyShared", "matrixMultiply")  # the preset itself is unchanged


def test_a_file_with_none_of_the_names_is_told_all_of_them(tmp_path):
    result = grade(SUBMISSIONS / "good_basic", ECE408, load_cases(ECE408.testcases_dir)[:1], RunPlan(None, "x"))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert compiled.message.startswith("kernel matrixMultiplyShared or matrixMultiply not found; found: mysgemm. "
                                       "Rename mysgemm to matrixMultiplyShared")


@needs_nvcc
def test_the_compile_check_says_which_name_was_graded():
    result = grade(SUBMISSIONS / "ece408_matrix_multiply", ECE408, load_cases(ECE408.testcases_dir)[:1],
                   RunPlan(None, "no backend"))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert compiled.passed, compiled.message
    assert ("graded matrixMultiply, the first of the names this lab accepts (matrixMultiplyShared, "
            "matrixMultiply) that the file defines") in compiled.message
    assert [c.status for c in result.checks if c.kind == "static"] == [PASSED] * 3


@needs_cxx
def test_an_ece408_file_naming_its_tiled_kernel_matrix_multiply_gets_every_point_the_cpu_checks():
    result = grade(SUBMISSIONS / "ece408_matrix_multiply", ECE408, cpu_cases(ECE408), RunPlan(CPU))
    assert result.tile_size == TILE
    assert [(c.name, c.message) for c in result.checks if c.kind != "timing" and c.status != PASSED] == []


# -- the GPU's twins (the lead runs these on a GPU machine) ---------------------------------------------

@pytest.mark.gpu
@needs_gpu
def test_on_the_gpu_x_over_rows_gets_full_marks_and_fails_the_default_only_where_the_geometry_matters(tmp_path):
    config = rows_config(tmp_path)
    cases = load_cases(config.testcases_dir)
    result = grade(SUBMISSIONS / "launch_x_rows", config, cases, RunPlan(GPU))
    assert [(c.name, c.message) for c in result.checks if c.status != PASSED and c.kind != "timing"] == []
    default = load_config()
    result = grade(SUBMISSIONS / "launch_x_rows", default, cases, RunPlan(GPU))
    assert not_passed(result) == {case.name for case in cases if geometry_matters(case)}


@pytest.mark.gpu
@needs_gpu
def test_on_the_gpu_the_textbook_kernel_without_bounds_fails_exactly_the_widths_that_are_no_multiple_of_its_tile(
        tmp_path):
    config = load_config(preset_path("pmpp"))
    cases = load_cases(config.testcases_dir, square=True)
    result = grade(without_bounds(tmp_path), config, cases, RunPlan(GPU))
    assert not_passed(result) == {case.name for case in cases if case.m % TILE}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("preset, folder", [("pmpp", "pmpp_square"), ("ece408", "ece408_matrix_multiply")])
def test_on_the_gpu_the_presets_grade_their_correct_files_full_marks(preset, folder):
    config = load_config(preset_path(preset))
    result = grade(SUBMISSIONS / folder, config, load_cases(config.testcases_dir, config.kernel.square),
                   RunPlan(GPU))
    assert [(c.name, c.message) for c in result.checks if c.status != PASSED] == []
    assert result.score == result.max_score == 100
