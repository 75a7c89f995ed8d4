"""The CPU emulator runs what students write: warp shuffles and votes, cooperative groups, templates,
`extern __shared__`, vector types, the math intrinsics, cuda_fp16.h (tests/submissions/README.md lists each kernel).

A correct kernel of each construct is graded as a student grades it (every checkable point); a wrong one fails
its cases with the right verdict; a warp collective reached by part of a warp with a full mask is
diagnosed, naming the line and the threads. Kernels nvcc refuses under SourceModule's `extern "C"` today
(templates, cooperative_groups.h: C++ linkage is another change) are graded as on a machine without nvcc,
a Gradescope container's case: the emulator alone decides.
"""
from pathlib import Path

import pytest
from conftest import SUBMISSIONS, machine_path, make_grader, once_per_run, path_without_nvcc
from hardware import needs_cxx

from grader.execute.cpu.messages import WARP_RULE
from grader.result import ERROR, FAILED, PASSED, SubmissionResult

pytestmark = needs_cxx

# C++ (templates; cooperative_groups.h has them): also graded where nvcc is not on PATH, as in a Gradescope
# container, where the emulator alone decides.
CXX_ONLY = ["coop_groups", "coop_groups_reduce", "template_helper"]
# Graded with the whole pipeline, nvcc's compile check (C++ linkage) included.
WITH_NVCC = ["warp_shfl", "warp_shfl_down", "warp_shfl_up", "warp_shfl_xor", "warp_ballot", "warp_any", "warp_all",
             "warp_activemask", "warp_syncwarp", "extern_shared", "vector_types", "intrinsics", "half_precision_split",
             *CXX_ONLY]
WRONG = ["warp_shfl_wrong", "warp_shfl_down_wrong", "warp_shfl_up_wrong", "warp_shfl_xor_wrong",
         "warp_ballot_wrong", "warp_any_wrong", "warp_all_wrong", "warp_activemask_wrong", "warp_syncwarp_wrong"]
WRONG_VALUES = "are wrong: "  # "N of M elements of C are wrong: …", or of those a sampled case checked


def cg_tile_variant(name: str, replacements: tuple[tuple[str, str], ...]) -> str:
    """A kernel of the corpus with its warp intrinsics spelled as cooperative groups' tile methods."""
    source = (SUBMISSIONS / name / "kernel.cu").read_text()
    source = source.replace("#define TILE_SIZE 16", "#include <cooperative_groups.h>\nnamespace cg = "
                            "cooperative_groups;\n#define TILE_SIZE 16")  # the lines after it move down by two
    tile = "    cg::thread_block_tile<TILE_SIZE> rowTile = cg::tiled_partition<TILE_SIZE>(cg::this_thread_block());\n"
    source = source.replace("    float sum = 0.0f;\n", tile + "    float sum = 0.0f;\n", 1)
    for old, new in replacements:
        assert old in source
        source = source.replace(old, new)
    return source


CG_VARIANTS = {
    "cg_shfl_up": cg_tile_variant("warp_shfl_up", (
        ("__shfl_up_sync(FULL_MASK, dot, d, TILE_SIZE)", "rowTile.shfl_up(dot, d)"),
        ("__shfl_sync(FULL_MASK, dot, TILE_SIZE - 1, TILE_SIZE)", "rowTile.shfl(dot, rowTile.size() - 1)"))),
    "cg_shfl_xor": cg_tile_variant("warp_shfl_xor", (
        ("__shfl_xor_sync(FULL_MASK, dot, lanes)", "rowTile.shfl_xor(dot, lanes)"),)),
}

# warp_shfl shuffling its A elements as doubles: a shuffle moves any type (8 bytes here).
SHFL_DOUBLE = (SUBMISSIONS / "warp_shfl" / "kernel.cu").read_text().replace("float a = ", "double a = ")

# Every thread of a row returns when its element of C does not exist; the rest broadcast A with a
# full-mask shuffle (no shared memory, so no __syncthreads() to trip over first).
EARLY_RETURN = """#define TILE_SIZE 16
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    int row = blockIdx.y * TILE_SIZE + threadIdx.y;
    int col = blockIdx.x * TILE_SIZE + threadIdx.x;
    if (row >= m || col >= n)
        return;
    float sum = 0.0f;
    for (int p = 0; p < k; p += TILE_SIZE) {
        float a = p + threadIdx.x < k ? A[row * k + p + threadIdx.x] : 0.0f;
        for (int i = 0; i < TILE_SIZE && p + i < k; ++i)
            sum += __shfl_sync(0xffffffff, a, i, TILE_SIZE) * B[(p + i) * n + col];
    }
    C[row * n + col] = sum;
}
"""


def submit(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text(source)
    return folder


@pytest.fixture(scope="module")
def grade_one(graders):
    grade_cpu = graders("cpu")
    grade_cpu.prefetch([SUBMISSIONS / name for name in WITH_NVCC])
    return grade_cpu


@pytest.fixture(scope="module")
def without_nvcc(config_file, tmp_path_factory):
    """name -> result, each graded where nvcc is not on PATH (as in a Gradescope container); once in the run."""
    def grade_all() -> dict:
        folder = tmp_path_factory.mktemp("cxx")
        paths = {name: SUBMISSIONS / name for name in CXX_ONLY}
        paths |= {name: submit(folder / name, source) for name, source in CG_VARIANTS.items()}
        paths["early_return"] = submit(folder / "early_return", EARLY_RETURN)
        paths["shfl_double"] = submit(folder / "shfl_double", SHFL_DOUBLE)
        with machine_path(path_without_nvcc()):
            grade_cpu = make_grader(config_file, "cpu")
            grade_cpu.prefetch(list(paths.values()))
        return {name: grade_cpu(path) for name, path in paths.items()}

    return once_per_run(tmp_path_factory, "test_cpu_warp_emulation.without_nvcc", grade_all,
                        lambda results: {name: r.to_dict(with_log=True) for name, r in results.items()},
                        lambda stored: {name: SubmissionResult.from_dict(r) for name, r in stored.items()})


@pytest.fixture(scope="module")
def wrong_kernels(grade_one):
    """name -> result of each wrong kernel (the session's CPU grades: test_cpu_grading grades the corpus too)."""
    names = [*WRONG, "warp_shfl_divergent"]
    grade_one.prefetch([SUBMISSIONS / name for name in names])
    return {name: grade_one(SUBMISSIONS / name) for name in names}


def emulated_cases(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == "case" and "GPU only" not in c.message}


def assert_full_marks(result):
    assert [(c.name, c.message) for c in result.checks if c.checkable and c.status != PASSED] == []
    assert result.score == result.checkable_max
    assert result.checkable_max in (90, 100)  # timing passed by the speed model (100), or held for a GPU (90)
    assert len(emulated_cases(result)) == 21


@pytest.mark.parametrize("name", WITH_NVCC)
def test_each_construct_kernel_gets_full_marks_on_the_cpu(grade_one, name):
    result = grade_one(SUBMISSIONS / name)
    assert_full_marks(result)
    assert "emulated on the CPU with tile size 16" in next(c for c in result.checks if c.kind == "compile").message


@pytest.mark.parametrize("name", [*CXX_ONLY, *CG_VARIANTS, "shfl_double"])
def test_templates_and_cooperative_groups_get_full_marks_from_the_emulator(without_nvcc, name):
    assert_full_marks(without_nvcc[name])


@pytest.mark.parametrize("name", WRONG)
def test_each_wrong_warp_kernel_fails_its_cases(wrong_kernels, name):
    cases = emulated_cases(wrong_kernels[name])
    assert cases["primes_small"].status == FAILED
    expected = "shared-memory race" if name == "warp_syncwarp_wrong" else WRONG_VALUES
    failing = [c for c in cases.values() if c.status != PASSED]
    assert failing and all(c.status == FAILED and expected in c.message for c in failing), \
        [(c.name, c.message) for c in failing]


def test_a_missing_syncwarp_is_a_race_between_the_two_rows_of_a_warp(wrong_kernels):
    message = emulated_cases(wrong_kernels["warp_syncwarp_wrong"])["square_16"].message
    # line 28 stores the staged sum; line 31 reads the other row's, in the same warp
    assert "staged[" in message and "line 28" in message and "line 31" in message


def test_a_full_mask_shuffle_some_threads_skip_is_diagnosed(wrong_kernels):
    cases = emulated_cases(wrong_kernels["warp_shfl_divergent"])
    assert cases["square_16"].status == PASSED  # every thread of every warp reaches the shuffle
    for name in ("ragged_n", "sub_tile", "primes_small"):
        case = cases[name]
        assert case.status == ERROR, name
        assert case.message.startswith("warp divergence in block")
        assert "calls __shfl_sync at line 26 with mask 0xffffffff, naming all 32 threads of its warp" in case.message
        assert "waits at the __syncthreads() on line 28" in case.message
        assert case.fixes == [WARP_RULE]
    assert "thread (0, 0) (with 5 other threads of its warp)" in cases["ragged_n"].message  # columns 64-66, 2 rows


def test_a_full_mask_shuffle_after_an_early_return_is_diagnosed(without_nvcc):
    cases = emulated_cases(without_nvcc["early_return"])
    assert cases["square_64"].status == PASSED
    message = cases["ragged_n"].message
    assert cases["ragged_n"].status == ERROR and message.startswith("warp divergence in block (4, 0)")
    assert "calls __shfl_sync at line 12 with mask 0xffffffff" in message and "has already returned" in message
