"""C++ linkage (issue 25): the student's file compiles as nvcc compiles any .cu file, so templates, overloads
and C++ headers are valid CUDA here too; the kernel is found in the compiled module by its mangled name,
the same one by the GPU child, the parameter-list check and the sanitizer's launch, and the CPU emulator
calls the same overload.

The name reader runs anywhere; the cubin tests need nvcc (CI has it) and read what nvcc really built; the
CPU grading needs g++; the GPU twins run on the lead's GPU machine.
"""
import json
import subprocess
from pathlib import Path

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu, needs_nvcc

from grader.cases import load_cases
from grader.config import load_config
from grader.contract import KernelContract
from grader.diagnose.run import kernel_symbol_of, launch_command
from grader.diagnose.sanitizer_log import describe, parse
from grader.execute.cpu.build import emulator_sources
from grader.execute.gpu.late_warps import SKEW_SYMBOL
from grader.execute.nvcc.compile import TILE_PROBE_SYMBOL, compile_check, prepare_source
from grader.execute.nvcc.kernel_params import find_kernel, parameter_problem, symbols
from grader.execute.nvcc.mangling import demangle
from grader.pipeline import RunPlan, grade
from grader.result import ERROR, GRADED, PASSED, SUBMISSION_ERROR
from grader.source.signature import signature_problem

LAB = "_Z7mysgemmiiiPKfS0_Pf"  # mysgemm(int, int, int, const float *, const float *, float *)
# Valid CUDA a student may write, each graded in full on both backends (tests/submissions/README.md).
CPP_KERNELS = {"template_helper": LAB, "overloaded_helpers": LAB, "overloaded_kernel": LAB,
               "extern_c_kernel": "mysgemm"}
FLOATS = "int m, int n, int k, const float *A, const float *B, float *C"
BODY = "{ if (threadIdx.x == 0) C[0] = A[0] + B[0]; }"


# --- the names nvcc gives kernels, read as the student wrote them ---------------------------------------------


@pytest.mark.parametrize("symbol, readable", [
    (LAB, "mysgemm(int, int, int, const float *, const float *, float *)"),
    ("_Z7mysgemmiiiPfS_S_", "mysgemm(int, int, int, float *, float *, float *)"),
    ("_Z7mysgemmiiiPKdS0_Pd", "mysgemm(int, int, int, const double *, const double *, double *)"),
    ("_Z7mysgemmmmmPKfS0_Pf", "mysgemm(unsigned long, unsigned long, unsigned long, const float *, const float *, "
                              "float *)"),
    ("_ZN2ns7mysgemmEiiiPKfS1_Pf", "ns::mysgemm(int, int, int, const float *, const float *, float *)"),
    ("_Z7mysgemmILi8EEviiiPKfS1_Pf", "mysgemm<8>(int, int, int, const float *, const float *, float *)"),
    ("_Z2k2IdLin3EEvPT_PKS0_i", "k2<double, -3>(double *, const double *, int)"),
    ("_ZN3lab2k8EPNS_5inner5Pair2ES2_S1_", "lab::k8(lab::inner::Pair2 *, lab::inner::Pair2 *, lab::inner::Pair2)"),
    ("_Z2k4PVfPVKiPPfPKPKf", "k4(volatile float *, const volatile int *, float **, const float * const *)"),
    ("_Z2k3P6float4PKS_4PairPKS3_ym6__half", "k3(float4 *, const float4 *, Pair, const Pair *, unsigned long long, "
                                             "unsigned long, __half)"),
    ("_Z2k5v", "k5()"),
])
def test_a_mangled_kernel_name_reads_as_the_student_wrote_it(symbol, readable):
    assert demangle(symbol).readable() == readable


def test_a_plain_name_is_not_mangled_and_a_name_past_the_reader_is_unknown_not_guessed():
    assert demangle("mysgemm") is None  # extern "C"
    assert demangle("_Z7mysgemmiiiPFviE").parameters is None  # a function type: beyond this reader
    assert demangle("_Z7mysgem") is None  # cut short
    assert demangle("_Z7mysgemmILi8EEviiiPKfS1_Pf").template
    assert not demangle(LAB).template


def test_no_part_of_a_name_and_no_corrupt_cubin_makes_the_reader_raise(submission_source):
    """Compiler output is read as untrusted bytes: a cut or damaged name or module is unknown, never a crash."""
    for symbol in ("_Z7mysgemmILi8EEviiiPKfS1_Pf", "_ZN3lab2k8EPNS_5inner5Pair2ES2_S1_", "_Z2k2IdLin3EEvPT_PKS0_i"):
        for end in range(len(symbol) + 1):
            demangle(symbol[:end])
            demangle(symbol[:end] + "TxS9_Iq")
    assert find_kernel(b"\x7fELF\x02" + bytes(200), KernelContract()).symbol == ""
    assert find_kernel(b"not a module", KernelContract()).symbol == ""


# --- the declaration, before anything compiles ----------------------------------------------------------------


def test_a_kernel_that_is_only_a_template_is_refused_before_compiling(submission_source):
    problem = signature_problem(submission_source("template_kernel"), KernelContract())
    assert problem.startswith("mysgemm is a template: the lab launches mysgemm by its name")
    assert "Make mysgemm a plain __global__ function" in problem


def test_of_overloads_one_the_lab_can_launch_is_enough(submission_source):
    assert signature_problem(submission_source("overloaded_kernel"), KernelContract()) == ""
    only_double = f"__global__ void mysgemm({FLOATS.replace('float', 'double')}) {{ }}\n"
    assert "mysgemm takes double *A; this lab uses float" in signature_problem(only_double, KernelContract())


def test_a_kernel_only_inside_a_namespace_is_refused_before_compiling():
    source = f"namespace lab {{ __global__ void mysgemm({FLOATS}) {BODY} }}\nnamespace {{ __global__ void " \
             f"mysgemm(int m) {{ }} }}\n"
    assert signature_problem(source, KernelContract()) == (
        "mysgemm is defined only inside a namespace (lab::mysgemm, (anonymous namespace)::mysgemm); the lab launches "
        "mysgemm at file scope: move the kernel out of the namespace")
    assert signature_problem(source + f"__global__ void mysgemm({FLOATS}) {BODY}\n", KernelContract()) == ""


def test_the_cpu_emulator_calls_the_float_overload_through_the_global_scope():
    launch = emulator_sources("", KernelContract())["launch.inc"]
    assert "::mysgemm(args.m, args.n, args.k, (Float *)args.A, (Float *)args.B, (Float *)args.C)" in launch
    assert "kernel_call<float, cuda_emu_harness::AnyPointer>(0)" in launch


# --- real cubins: which entry function is the lab's kernel ---------------------------------------------------


@pytest.fixture(scope="module")
def cubin_of(tmp_path_factory):
    """What compile_check compiles (the student's text as the grader prepares it, C++ linkage), as a cubin."""
    def compile_(source: str) -> bytes:
        folder = tmp_path_factory.mktemp("cubin")
        (folder / "kernel.cu").write_text(prepare_source(source))
        subprocess.run(["nvcc", "--cubin", "-arch", "sm_90", "kernel.cu", "-o", "kernel.cubin"], cwd=folder,
                       check=True, capture_output=True)
        return (folder / "kernel.cubin").read_bytes()
    return compile_


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CPP_KERNELS))
def test_each_kernel_is_found_by_its_symbol_in_the_cubin_nvcc_builds(cubin_of, submission_source, name):
    cubin = cubin_of(submission_source(name))
    assert find_kernel(cubin, KernelContract()).symbol == CPP_KERNELS[name]
    assert parameter_problem(cubin, KernelContract()) == ""


@needs_nvcc
def test_of_overloads_the_one_the_lab_launches_is_found(cubin_of):
    """Same sizes (double * and float * are both 8 bytes): the mangled types decide; a long m, a namespace's
    mysgemm and a template's instantiation are not the lab's kernel either."""
    source = (f"__global__ void mysgemm({FLOATS.replace('float', 'double')}) {BODY}\n"
              f"__global__ void mysgemm(long m, int n, int k, const float *A, const float *B, float *C) {BODY}\n"
              f"__global__ void mysgemm(int m, int n, int k, float *A, float *B, float *C) {BODY}\n"
              f"namespace ns {{ __global__ void mysgemm({FLOATS}) {BODY} }}\n"
              f"template <int T> __global__ void mysgemm({FLOATS}) {BODY}\n"
              f"template __global__ void mysgemm<8>({FLOATS});\n")
    assert find_kernel(cubin_of(source), KernelContract()).symbol == "_Z7mysgemmiiiPfS_S_"


@needs_nvcc
def test_two_overloads_the_lab_could_both_launch_are_a_clear_message(cubin_of):
    source = f"__global__ void mysgemm({FLOATS}) {BODY}\n__global__ void mysgemm(int m, int n, int k, float *A, " \
             f"float *B, float *C) {BODY}\n"
    problem = parameter_problem(cubin_of(source), KernelContract())
    assert problem.startswith("mysgemm is defined 2 times with parameters that fit this lab's launch")
    assert "mysgemm(int, int, int, float *, float *, float *)" in problem and problem.endswith("Keep one of them")


@needs_nvcc
def test_overloads_none_of_which_the_lab_can_launch_are_named(cubin_of):
    source = (f"__global__ void mysgemm(long m, int n, int k, const float *A, const float *B, float *C) {BODY}\n"
              f"__global__ void mysgemm(int m, int n, int k, const float *A, float *C) {{ }}\n")
    problem = parameter_problem(cubin_of(source), KernelContract())
    assert problem.startswith("mysgemm is defined 2 times and none of them takes what this lab launches it with")
    assert "mysgemm(long, int, int, const float *, const float *, float *)" in problem


@needs_nvcc
def test_a_cut_or_damaged_cubin_is_unknown_never_a_crash(cubin_of, submission_source):
    cubin = cubin_of(submission_source("overloaded_kernel"))
    for end in range(0, len(cubin), 97):
        find_kernel(cubin[:end], KernelContract())
    for at in range(0, len(cubin), 13):
        find_kernel(cubin[:at] + bytes([cubin[at] ^ 0xFF]) + cubin[at + 1:], KernelContract())


@needs_nvcc
def test_a_kernel_only_inside_a_namespace_is_not_the_labs(cubin_of):
    problem = parameter_problem(cubin_of(f"namespace {{ __global__ void mysgemm({FLOATS}) {BODY} }}\n"),
                                KernelContract())
    assert problem.startswith("mysgemm is defined only inside a namespace ((anonymous namespace)::mysgemm)")


@needs_nvcc
def test_a_template_kernel_in_the_cubin_is_said_to_be_one(cubin_of, submission_source):
    problem = parameter_problem(cubin_of(submission_source("template_kernel")), KernelContract())
    assert problem.startswith("mysgemm is a template (compiled: mysgemm<16>): the lab launches mysgemm by its name")


@needs_nvcc
def test_the_tile_probe_and_the_late_warps_switch_keep_their_plain_names(cubin_of, submission_source):
    """The GPU child reads both by name (module.get_global): variables at file scope are never mangled."""
    names = {symbol.name for symbol in symbols(cubin_of(submission_source("template_helper")))}
    assert {TILE_PROBE_SYMBOL, SKEW_SYMBOL} <= names


@needs_nvcc
def test_the_sanitizer_launches_the_kernel_by_its_mangled_name(cubin_of, submission_source, tmp_path):
    (tmp_path / "kernel.cubin").write_bytes(cubin_of(submission_source("overloaded_kernel")))
    symbol = kernel_symbol_of(tmp_path / "kernel.cubin", KernelContract())
    command = launch_command(tmp_path / "launch_kernel", tmp_path / "kernel.cubin", KernelContract(), 16,
                             (19, 21, 50), symbol)
    assert command[2] == LAB
    assert kernel_symbol_of(tmp_path / "missing.cubin", KernelContract()) == "mysgemm"


CAPTURED = Path(__file__).parent / "sanitizer_logs" / "captured"


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURED.glob("*.log")))
def test_the_sanitizers_demangled_frames_read_as_the_plain_ones_did(name):
    """compute-sanitizer names a C++-linkage kernel by its demangled signature, spaces and all: the logs
    captured on an H100 (extern "C" kernels) say the same with it."""
    text = (CAPTURED / name).read_text()
    demangled = text.replace("mysgemm+0x", "mysgemm(int, int, int, const float *, const float *, float *)+0x")
    tool = name.split(".")[1]
    buffers = next(({k: tuple(v) for k, v in json.loads(line.split(" ", 1)[1]).items()} for line in text.splitlines()
                    if line.startswith("SGEMM_GRADER_BUFFERS ")), None)
    said = [describe(parse(tool, log), buffers, barrier_lines=[16, 21]) for log in (text, demangled)]
    assert said[0] == said[1] and bool(said[1]) == ("mysgemm" in text)  # the racy and the out-of-bounds ones say it
    assert parse(tool, demangled).complete and parse(tool, demangled).error_count == parse(tool, text).error_count


# --- compiled without a GPU (grade --no-run, and the CPU backend's nvcc check) -------------------------------


@pytest.fixture(scope="module")
def compiled_only():
    config = load_config()
    cases = load_cases(config.testcases_dir)
    return lambda name: grade(SUBMISSIONS / name, config, cases, RunPlan(None, "not run: no backend"))


@needs_nvcc
@pytest.mark.parametrize("name", sorted(CPP_KERNELS))
def test_valid_cpp_kernels_pass_nvccs_compile_check(compiled_only, name):
    result = compiled_only(name)
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == GRADED and compiled.status == PASSED, compiled.message
    assert "host code left out" not in compiled.message  # the whole file compiled, host code and all


@needs_nvcc
def test_a_template_kernel_is_a_submission_error_that_says_why(compiled_only):
    result = compiled_only("template_kernel")
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == SUBMISSION_ERROR and compiled.status == ERROR
    assert compiled.message.startswith("mysgemm is a template")


@needs_nvcc
def test_an_error_in_a_template_helper_is_at_the_students_line(sandbox):
    source = ("#define TILE_SIZE 16\n"
              "template <int T>\n"
              "__device__ float dot(const float (*a)[T], int i)\n"
              "{\n"
              "    return a[i][0] + undefined_thing;\n"
              "}\n"
              f"__global__ void mysgemm({FLOATS})\n"
              "{\n"
              "    __shared__ float As[TILE_SIZE][TILE_SIZE];\n"
              "    C[0] = dot<TILE_SIZE>(As, 0);\n"
              "}\n")
    outcome = compile_check(source, "sm_90", ["-lineinfo"], 120, sandbox, KernelContract())
    assert not outcome.ok
    assert 'line 5: error: identifier "undefined_thing" is undefined' in outcome.message
    assert "extern" not in outcome.message and "/tmp/" not in outcome.message


@needs_nvcc
def test_what_extern_c_refused_now_compiles(sandbox):
    """The errors SourceModule's extern "C" gave: a template, an overload, a C++ header."""
    source = ("#include <cooperative_groups.h>\n"
              "template <typename T> __device__ T twice(T x) { return 2 * x; }\n"
              "__device__ float load(const float *p) { return p[0]; }\n"
              "__device__ float load(const float *p, int i) { return p[i]; }\n"
              f"__global__ void mysgemm({FLOATS})\n"
              "{ cooperative_groups::this_thread_block().sync(); C[0] = twice(load(A) + load(B, 1)); }\n")
    outcome = compile_check(source, "sm_90", ["-lineinfo"], 120, sandbox, KernelContract())
    assert outcome.ok, outcome.message


# --- graded: every checkable point on the CPU emulator, 100/100 on a GPU ---------------------------------------


@needs_cxx
@pytest.mark.parametrize("name", sorted(CPP_KERNELS))
def test_valid_cpp_kernels_get_every_point_the_cpu_can_check(graders, name):
    grade_cpu = graders("cpu")
    grade_cpu.prefetch([SUBMISSIONS / n for n in sorted(CPP_KERNELS)])
    result = grade_cpu(SUBMISSIONS / name)
    assert result.backend == "cpu" and result.tile_size == 16
    assert [(c.name, c.message) for c in result.checks if c.checkable and c.status != PASSED] == []
    assert result.score == result.checkable_max
    assert result.checkable_max in (90, 100)  # timing passed by the speed model (100), or held for a GPU (90)


@needs_cxx
def test_a_template_kernel_is_refused_on_the_cpu_too(graders):
    result = graders("cpu")(SUBMISSIONS / "template_kernel")
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == SUBMISSION_ERROR and compiled.message.startswith("mysgemm is a template")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", sorted(CPP_KERNELS))
def test_valid_cpp_kernels_get_full_marks_on_the_gpu(graders, name):
    result = graders("gpu")(SUBMISSIONS / name)
    assert [(c.name, c.message) for c in result.checks if c.status != PASSED] == []
    assert result.score == result.max_score == 100 and result.tile_size == 16


@pytest.mark.gpu
@needs_gpu
def test_a_template_kernel_is_refused_on_the_gpu_too(graders):
    result = graders("gpu")(SUBMISSIONS / "template_kernel")
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert result.outcome == SUBMISSION_ERROR and compiled.message.startswith("mysgemm is a template")
