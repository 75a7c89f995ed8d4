"""The verdict does not depend on which CUDA toolkit packages the grading machine has installed.

A file that includes the headers of the toolkit's host libraries (<cublas_v2.h>, <curand.h>,
<cuda_profiler_api.h>, NVTX) for its host code gets full marks on the CPU, and the same case verdicts and score
where nvcc is not on PATH (an LMS container) and where the toolkit lacks every library package (a toolkit
made here from this machine's, without them: the real nvcc, pointed at its include folder). A kernel whose
device code uses a header the emulator lacks is held for a GPU, the header and its line named, on each of
those machines; cuda_fp16.h's basics the emulator provides. Real nvcc, real g++, the real sandbox.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import SUBMISSIONS, machine_path, make_grader, once_per_run, path_without_nvcc
from hardware import needs_cxx, needs_nvcc

from grader.build_failure import classify
from grader.config import load_config
from grader.execute.cpu.build import emulator_sources
from grader.result import ERROR, GRADED, NEEDS_GPU_GRADE, PASSED, SubmissionResult
from grader.source.device_side import HOST_CODE_LEFT_OUT, device_identifiers
from grader.source.include_policy import HeaderPolicy, check_source, drop_host_headers, toolkit_folders
from grader.source.toolkit_headers import is_toolkit_header, library_of, toolkit_headers, unneeded_headers

HOST_LIBRARIES, HALF, CURAND = "include_host_libraries", "half_precision_split", "curand_device_api"
WMMA = "wmma_fragment"  # mma.h: a header every toolkit has, which the emulator does not
HELD = "uses <{}> (line {}), which the CPU grader cannot run: it is graded on a GPU"
CHECKABLE, STATIC = 90, 10  # a kernel held for a GPU: every point but timing (held too); the static checks'
EVERY_POINT = 100  # a correct kernel the emulator builds: timing by the speed model too
KERNEL = "__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {{ {} }}\n"

# good_basic with a __device__ helper that declares a WMMA fragment (mma.h, line 1), never called by the kernel.
WMMA_SOURCE = "#include <mma.h>\n" + (SUBMISSIONS / "good_basic" / "kernel.cu").read_text().replace(
    "#define TILE_SIZE 16\n",
    "#define TILE_SIZE 16\n__device__ void clearTile(float *tile) {\n"
    "    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc;\n"
    "    nvcuda::wmma::fill_fragment(acc, 0.0f);\n"
    "    nvcuda::wmma::store_matrix_sync(tile, acc, 16, nvcuda::wmma::mem_row_major);\n}\n", 1)


# --- which headers, and when they are dropped ---------------------------------------------------------------


@pytest.mark.parametrize("header, library", [
    ("cublas_v2.h", "cuBLAS"), ("cublas.h", "cuBLAS"), ("cublasLt.h", "cuBLAS"), ("cublasXt.h", "cuBLAS"),
    ("curand.h", "cuRAND"), ("curand_kernel.h", "cuRAND"), ("cufft.h", "cuFFT"), ("cufftXt.h", "cuFFT"),
    ("cusparse.h", "cuSPARSE"), ("cusolverDn.h", "cuSOLVER"), ("nvToolsExt.h", "NVTX"),
    ("nvtx3/nvToolsExt.h", "NVTX"), ("nvtx3/nvtx3.hpp", "NVTX"), ("cuda_profiler_api.h", "the profiler API"),
    ("cudaProfiler.h", "the profiler API"), ("npp.h", "NPP"), ("nppi_filtering_functions.h", "NPP"),
    ("nvjpeg.h", "nvJPEG"), ("nvrtc.h", "NVRTC"), ("cuda_gl_interop.h", "graphics interop"),
    ("cuda_runtime.h", None), ("cuda_fp16.h", None), ("mma.h", None), ("cooperative_groups.h", None),
    ("stdio.h", None), ("cub/cub.cuh", None), ("my_cublas_v2.h", None),
])
def test_the_table_knows_the_toolkits_library_headers_by_name(header, library):
    found = library_of(header)
    assert (found.name if found else None) == library


@pytest.mark.parametrize("header, known", [
    ("cublas_v2.h", True), ("nvtx3/nvToolsExt.h", True), ("mma.h", True), ("cuda_bf16.h", True),
    ("sm_61_intrinsics.h", True), ("cub/cub.cuh", True), ("thrust/device_vector.h", True),
    ("cuda/barrier", True), ("cooperative_groups/reduce.h", True),
    ("cuda_utils.h", False), ("helpers.cuh", False), ("stdio.h", False), ("wb.h", False),
])
def test_the_toolkits_own_headers_are_known_too_but_not_a_students_look_alike(header, known):
    assert is_toolkit_header(header) is known


HOST_ONLY = """#include <cublas_v2.h>
#include <curand.h>
#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>
#define CHECK(call) do { if ((call) != CUBLAS_STATUS_SUCCESS) return; } while (0)
#ifdef CUBLAS_API
#endif
""" + KERNEL.format("C[0] = A[0] * B[0];") + """void basicSgemm(cublasHandle_t handle, curandGenerator_t generator) {
    cudaProfilerStart();
    nvtxRangePushA("sgemm");
    CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1));
}
"""


def test_headers_only_host_code_needs_are_dropped_lines_kept():
    assert unneeded_headers([HOST_ONLY]) == {"cublas_v2.h", "curand.h", "cuda_profiler_api.h",
                                             "nvtx3/nvToolsExt.h"}
    dropped = drop_host_headers(HOST_ONLY, [], unneeded_headers([HOST_ONLY]))
    assert dropped.count("\n") == HOST_ONLY.count("\n") and dropped.startswith("\n\n\n\n#define CHECK")
    assert toolkit_headers([dropped]) == set()


@pytest.mark.parametrize("device_code", [
    "cublasSgemm(0, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1);",  # calls it
    "cublasHandle_t handle;",  # a type of it
    "CHECK(0);",  # through a macro whose body names it
])
def test_a_header_whose_library_device_code_references_is_kept(device_code):
    source = HOST_ONLY.replace("C[0] = A[0] * B[0];", device_code)
    assert "cublas_v2.h" not in unneeded_headers([source])
    assert unneeded_headers([source]) == {"curand.h", "cuda_profiler_api.h", "nvtx3/nvToolsExt.h"}


def test_device_code_in_a_header_handed_in_with_the_file_counts_too():
    header = "#include <curand_kernel.h>\n__device__ float draw(curandState *state) { return curand_uniform(state); }\n"
    source = '#include "tiling.cuh"\n#include <cublas_v2.h>\n' + KERNEL.format("C[0] = 0;")
    assert unneeded_headers([source, header], ["tiling.cuh"]) == {"cublas_v2.h"}


def test_names_in_directives_and_host_code_are_no_use():
    identifiers = device_identifiers(HOST_ONLY)
    assert "mysgemm" in identifiers and "A" in identifiers
    assert not [name for name in identifiers if library_of("cublas_v2.h").owns(name)], identifiers
    assert "CHECK" not in identifiers and "CUBLAS_API" not in identifiers


def test_an_include_in_a_comment_or_if_0_is_not_a_problem(tmp_path):
    source = ("// #include <cublas_v2.h>\n/* #include <curand.h>\n*/\n#if 0\n#include <cusparse.h>\n#endif\n"
              + KERNEL.format("C[0] = 0;"))
    assert toolkit_headers([source]) == set() and unneeded_headers([source]) == frozenset()
    lacking = HeaderPolicy((str(tmp_path),))  # a toolkit without any library: accepted by name
    assert check_source(source, policy=lacking) == []


def test_a_toolkit_header_is_accepted_by_name_where_its_package_is_missing(tmp_path):
    lacking = HeaderPolicy((str(tmp_path),))
    assert lacking.problem("curand_kernel.h", quoted=False) is None
    assert lacking.problem("cublas_v2.h", quoted=True) is None
    assert "is not a header of the CUDA toolkit" in lacking.problem("cublas_private.hpp", quoted=False)
    without_toolkit = HeaderPolicy((str(tmp_path),), toolkit=False)  # no nvcc: no toolkit to ask
    assert without_toolkit.problem("nvtx3/nvToolsExt.h", quoted=False) is None
    assert without_toolkit.problem("mma.h", quoted=False) is None
    assert "is not a header of the CUDA toolkit" in without_toolkit.problem("cuda_utils.h", quoted=True)
    narrowed = HeaderPolicy((str(tmp_path),), only=frozenset({"cuda_runtime.h"}))
    assert narrowed.problem("cublas_v2.h", quoted=False) == "<cublas_v2.h> is not one of the headers this lab allows"


def test_a_library_header_found_through_a_link_out_of_the_folders_is_refused(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "elsewhere").write_text("secret\n")
    (tmp_path / "include" / "cublas_v2.h").symlink_to(tmp_path / "elsewhere")
    policy = HeaderPolicy((str(tmp_path / "include"),))
    assert "leads outside" in policy.problem("cublas_v2.h", quoted=False)


def test_the_emulator_is_never_given_a_toolkit_header_it_has_no_copy_of():
    """Whether the machine's g++ would find the toolkit's own copy (Debian installs it in /usr/include) or none,
    its build fails the same way, at the line, where the preprocessor reaches the #include."""
    source = ("#include <cuda_fp16.h>\n#include <mma.h>\n#ifdef USE_BF16\n#include <cuda_bf16.h>\n#endif\n"
              "#include <stdio.h>\n" + KERNEL.format("C[0] = 0;"))
    built = emulator_sources(source, load_config().kernel.contract())["student.cu"].split("\n")
    assert built[1:7] == ["#include <cuda_fp16.h>", "#error the CPU emulator has no copy of <mma.h>", "#ifdef USE_BF16",
                          "#error the CPU emulator has no copy of <cuda_bf16.h>", "#endif", "#include <stdio.h>"]


def test_a_toolkit_header_the_emulator_has_no_copy_of_is_named_as_the_construct():
    log = "kernel.cu:2:2: error: #error the CPU emulator has no copy of <mma.h>\n"
    failure = classify(log, "#define T 16\n#include <mma.h>\n")
    assert failure.students and failure.line == 2 and failure.header == "mma.h"
    assert failure.student_reason == HELD.format("mma.h", 2)


# --- the same verdict on every machine ------------------------------------------------------------------------


def toolkit_without_libraries(folder: Path) -> None:
    """A CUDA toolkit made in `folder` from this machine's, without any library's headers (toolkit_headers.py):
    this nvcc, reached through a link in folder/bin whose nvcc.profile points it at folder/include, a copy of the
    toolkit's own headers (links to its subfolders) less the libraries'."""
    dryrun = subprocess.run(["nvcc", "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True)
    real_nvcc = Path(re.search(r"^#\$ _HERE_=(.*)$", dryrun.stderr, re.M).group(1), "nvcc")  # not a wrapper's
    include = Path(toolkit_folders()[0])  # nvcc's INCLUDES: the toolkit's own headers
    ours = folder / "include"
    ours.mkdir(parents=True)
    for entry in include.iterdir():
        if entry.is_dir() and library_of(f"{entry.name}/x") is None:
            (ours / entry.name).symlink_to(entry.resolve())
        elif entry.is_file() and library_of(entry.name) is None:
            shutil.copyfile(entry, ours / entry.name)
    profile = (real_nvcc.parent / "nvcc.profile").read_text().replace("$(_HERE_)", str(real_nvcc.parent))
    profile = re.sub(r"\$\(TOP\)/\$\(_TARGET_DIR_\)/include", str(ours), profile)
    (folder / "bin").mkdir()
    (folder / "bin" / "nvcc").symlink_to(real_nvcc)
    (folder / "bin" / "nvcc.profile").write_text(profile)
    for path in (folder, *folder.rglob("*")):  # the sandbox's uid compiles with it
        if not path.is_symlink():
            path.chmod(0o755)


MACHINES = ("nvcc not on PATH", "a toolkit without the libraries")
LIBRARY_HEADERS = ("cublas_v2.h", "curand.h", "curand_kernel.h", "cuda_profiler_api.h", "nvtx3/nvToolsExt.h")


def nvcc_finds(folder: Path, header: str) -> bool:
    """Whether the nvcc on PATH preprocesses a file that includes `header` (written in `folder`)."""
    probe = folder / "probe.cu"
    probe.write_text(f"#include <{header}>\n")
    return subprocess.run(["nvcc", "-E", str(probe), "-o", os.devnull], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def graded(graders, config_file, tmp_path_factory):
    """machine -> name -> result: this machine's grades (the session's), and each of MACHINES', once in the run."""
    folder = tmp_path_factory.mktemp("wmma") / WMMA
    folder.mkdir()
    (folder / "kernel.cu").write_text(WMMA_SOURCE)
    paths = {name: SUBMISSIONS / name for name in (HOST_LIBRARIES, HALF, CURAND)} | {WMMA: folder}

    def on(path: str, include: Path | None) -> dict:
        """Graded where PATH is `path`, whose nvcc's own headers are in `include` (None: no nvcc)."""
        with machine_path(path):
            assert toolkit_folders()[:1] == ((str(include),) if include else ())
            if include:  # nvcc itself finds the toolkit's headers there, and none of the libraries'
                assert nvcc_finds(include.parent, "cuda_runtime.h") and nvcc_finds(include.parent, "mma.h")
                assert not any(nvcc_finds(include.parent, header) for header in LIBRARY_HEADERS)
            grade = make_grader(config_file, "cpu")
            grade.prefetch(list(paths.values()))
            return {name: grade(path).to_dict(with_log=True) for name, path in paths.items()}

    def grade_elsewhere() -> dict:
        scratch = Path(tempfile.mkdtemp(prefix="toolkit-"))
        os.chmod(scratch, 0o711)  # the sandbox's uid passes through to the toolkit
        try:
            toolkit_without_libraries(scratch / "cuda")
            return {MACHINES[0]: on(path_without_nvcc(), None),
                    MACHINES[1]: on(f"{scratch / 'cuda' / 'bin'}{os.pathsep}{os.environ['PATH']}",
                                    scratch / "cuda" / "include")}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    elsewhere = once_per_run(tmp_path_factory, "test_toolkit_headers.graded", grade_elsewhere)
    here = graders("cpu")
    here.prefetch(list(paths.values()))
    return {"here": {name: here(path) for name, path in paths.items()}} | {
        machine: {name: SubmissionResult.from_dict(result) for name, result in results.items()}
        for machine, results in elsewhere.items()}


def compiled(result):
    return next(c for c in result.checks if c.kind == "compile")


def emulated(result) -> list:
    return [c for c in result.checks if c.kind == "case" and not c.needs_gpu]


def verdict(result) -> tuple:
    """What a student's grade is: the outcome, the score out of the checkable points, each check's verdict."""
    return (result.outcome, result.score, result.checkable_max,
            [(c.name, c.status, c.score, c.message) for c in result.checks if c.kind != "compile"])


@needs_cxx
@needs_nvcc
def test_host_library_headers_for_host_code_get_full_marks_on_the_cpu(graded):
    result = graded["here"][HOST_LIBRARIES]
    assert result.outcome == GRADED and result.score == result.checkable_max == EVERY_POINT
    assert [(c.name, c.message) for c in result.checks if c.checkable and c.status != PASSED] == []
    assert HOST_CODE_LEFT_OUT in compiled(result).message and "is not" not in compiled(result).message


@needs_cxx
@needs_nvcc
@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("name", [HOST_LIBRARIES, HALF, CURAND, WMMA])
def test_the_verdict_is_the_same_whatever_toolkit_packages_the_machine_has(graded, machine, name):
    assert verdict(graded[machine][name]) == verdict(graded["here"][name])


@needs_cxx
@needs_nvcc
@pytest.mark.parametrize("name, header, line", [(CURAND, "curand_kernel.h", 1), (WMMA, "mma.h", 1)])
def test_a_header_device_code_uses_that_the_emulator_lacks_is_held_for_a_gpu(graded, name, header, line):
    for machine in ("here", *MACHINES):
        result = graded[machine][name]
        assert result.outcome == NEEDS_GPU_GRADE and result.score == STATIC, machine
        assert result.checkable_max == CHECKABLE and len(emulated(result)) == 21
        reason = HELD.format(header, line)
        assert all(c.status == ERROR and c.message == reason and c.metrics["line"] == line
                   for c in emulated(result)), (machine, [c.message for c in emulated(result)])
        assert f"Needs a GPU grade: the kernel {reason}" in result.message


def test_header_names_are_matched_as_fnmatch_matches_every_pattern():
    """toolkit_headers.py compares a pattern without a wildcard as a plain name (fnmatch compiled all 90 patterns on a
    grade's first header): every name answers as fnmatch over every pattern would."""
    import fnmatch

    from grader.source.toolkit_headers import CORE, LIBRARIES

    patterns = [pattern for library in LIBRARIES for pattern in library.headers] + list(CORE)
    names = {name for pattern in patterns for name in (pattern.replace("*", ""), pattern.replace("*", "x/y"),
                                                       pattern.replace("*", "70"), pattern.upper(), pattern + "x",
                                                       "x" + pattern, pattern.replace(".h", ".hpp"))}
    names |= {"stdio.h", "cuda_runtime.h", "CUDA.H", "cuda.h/", "[cuda.h]", "cub", "thrust", "my_cublas.h"}
    for name in sorted(names):
        library = next((lib for lib in LIBRARIES if any(fnmatch.fnmatchcase(name, p) for p in lib.headers)), None)
        assert library_of(name) == library, name
        assert is_toolkit_header(name) == (library is not None or any(fnmatch.fnmatchcase(name, p) for p in CORE)), name
