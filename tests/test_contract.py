"""The kernel contract: one description of the kernel that every launcher reads, and the compiled kernel's
real parameter list checked against it."""
import subprocess

import pytest
from conftest import SUBMISSIONS
from hardware import needs_nvcc

from grader.cases import load_cases
from grader.config import load_config, preset_path
from grader.contract import REFERENCE, KernelContract
from grader.execute.cpu.build import emulator_sources
from grader.execute.job import Job
from grader.execute.nvcc.compile import prepare_source
from grader.execute.nvcc.kernel_params import compiled_parameter_sizes, parameter_problem
from grader.pipeline import RunPlan, grade
from grader.result import ERROR, SUBMISSION_ERROR

ECE408_ROLES = ("A", "B", "C", "m", "k", "k", "n", "m", "n")


def test_the_ece408_contract_passes_each_size_under_each_of_its_names():
    contract = load_config(preset_path("ece408")).kernel.contract()
    assert contract.name == "matrixMultiplyShared" and contract.roles == ECE408_ROLES
    assert contract.arguments(m=5, n=7, k=9, a="A", b="B", c="C") == ["A", "B", "C", 5, 9, 9, 7, 5, 7]
    assert contract.argument_bytes == (8, 8, 8, 4, 4, 4, 4, 4, 4)
    assert contract.signature.startswith("const float *A, const float *B, float *C, int m, int k, int k")
    # the CPU emulator's launch calls the student's kernel in that order too
    call = emulator_sources("", contract)["launch.inc"]
    assert ("::matrixMultiplyShared(AnyPointer{args.A}, AnyPointer{args.B}, AnyPointer{args.C}, args.m, args.k, "
            "args.k, args.n, args.m, args.n)") in call


def test_one_thread_per_element_of_c_in_tile_by_tile_blocks():
    launch = REFERENCE.launch(m=33, n=17, tile=16)
    assert launch.grid == (2, 3, 1) and launch.block == (16, 16, 1)


def test_the_contract_reaches_the_child_unchanged(tmp_path):
    contract = load_config(preset_path("ece408")).kernel.contract()
    Job("", "", contract, [], "", str(tmp_path)).save(tmp_path / "job.json")
    assert Job.load(tmp_path / "job.json").contract == contract


@pytest.fixture(scope="module")
def cubin_of(tmp_path_factory):
    def compile_(declaration: str, name: str = "mysgemm") -> bytes:
        folder = tmp_path_factory.mktemp("cubin")
        source = f"typedef size_t dim_t;\n__global__ void {name}({declaration}) {{ }}\n"
        (folder / "k.cu").write_text(prepare_source(source))  # as the grader compiles it: C++ linkage
        subprocess.run(["nvcc", "--cubin", "-arch", "sm_90", "k.cu", "-o", "k.cubin"], cwd=folder, check=True)
        return (folder / "k.cubin").read_bytes()
    return compile_


@needs_nvcc
def test_the_compiled_parameter_list_is_read_from_the_cubin(cubin_of):
    cubin = cubin_of("int m, int n, int k, const float *A, const float *B, float *C")
    assert compiled_parameter_sizes(cubin, "_Z7mysgemmiiiPKfS0_Pf") == [4, 4, 4, 8, 8, 8]  # by its mangled name
    assert parameter_problem(cubin, KernelContract()) == ""
    assert compiled_parameter_sizes(cubin, "mysgemm") is None  # no such symbol: unknown, never a verdict
    assert compiled_parameter_sizes(b"\x7fELF garbage" * 10, "mysgemm") is None
    assert compiled_parameter_sizes(cubin[:200], "mysgemm") is None


@needs_nvcc
@pytest.mark.parametrize("declaration, words", [
    ("dim_t m, dim_t n, dim_t k, const float *A, const float *B, float *C",
     "parameter 1 is 8 bytes where the lab passes the size m, a 32-bit int"),
    ("int m, int n, int k, const float *A, const float *B, float *C, int extra",
     "takes 7 parameters of 4, 4, 4, 8, 8, 8, 4 bytes; this lab launches it with 6"),
    ("int m, int n, int k, const float *A, const float *B, int C",
     "parameter 6 is 4 bytes where the lab passes the matrix C, a 64-bit pointer to float"),
])
def test_a_compiled_kernel_that_would_read_the_wrong_bytes_is_named(cubin_of, declaration, words):
    problem = parameter_problem(cubin_of(declaration), KernelContract())
    assert words in problem and "(int m, int n, int k, const float *A, const float *B, float *C)" in problem


@needs_nvcc
def test_a_size_t_behind_a_typedef_is_a_submission_error_not_a_wrong_result():
    """The parser gives the typedef the benefit of the doubt; the compiled kernel says 8 bytes. It compiled, so
    it is no compile error: a declaration the lab does not launch is a submission error (issue 29)."""
    config = load_config()
    result = grade(SUBMISSIONS / "size_t_behind_typedef", config, load_cases(config.testcases_dir),
                   RunPlan(None, "not run: no backend"))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == SUBMISSION_ERROR and compiled.status == ERROR and result.score == 0
    assert result.message.startswith("mysgemm as compiled takes 6 parameters of 8, 8, 8, 8, 8, 8 bytes")
    assert "parameter 1 is 8 bytes where the lab passes the size m" in compiled.message
