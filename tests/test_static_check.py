"""Static checks of the tiled SGEMM kernel on small inline CUDA sources."""
from __future__ import annotations

from collections import OrderedDict

import pytest

from grader.result import FAILED, PASSED, SKIPPED, STATIC
from grader.source.static_check import find_kernels, static_checks

POINTS = {"shared_tiles": 2.0, "load_barrier": 1.5, "use_barrier": 1.0}
NAMES = ["shared-memory tiles", "barrier after loading tiles", "barrier after using tiles"]

GOOD = """\
#include <stdio.h>
#define TILE_SIZE 16

__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    float sum = 0.0f;
    for (int p = 0; p < (k - 1) / TILE_SIZE + 1; ++p) {
        As[ty][tx] = (row < m && p*TILE_SIZE+tx < k) ? A[row*k + p*TILE_SIZE+tx] : 0.0f;
        if (p*TILE_SIZE+ty < k && col < n) Bs[ty][tx] = B[(p*TILE_SIZE+ty)*n + col]; else Bs[ty][tx] = 0.0f;
        __syncthreads(); // LOAD
        for (int i = 0; i < TILE_SIZE; ++i) sum += As[ty][i] * Bs[i][tx]; // INNER
        __syncthreads(); // USE
    }
    if (row < m && col < n) C[row*n + col] = sum;
}

void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    dim3 block(TILE_SIZE, TILE_SIZE);
    dim3 grid((n - 1) / TILE_SIZE + 1, (m - 1) / TILE_SIZE + 1);
    for (int r = 0; r < 1; r++) { if (r) printf("launch\\n"); }
    mysgemm<<<grid, block>>>(m, n, k, A, B, C);
}
"""


def variant(source: str, *edits: tuple[str, str]) -> str:
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def line_of(source: str, marker: str) -> int:
    lines = [i for i, text in enumerate(source.splitlines(), start=1) if marker in text]
    assert len(lines) == 1, marker
    return lines[0]


def check(source: str, kernel: str = "mysgemm"):
    results = static_checks(source, kernel, POINTS)
    assert [r.name for r in results] == NAMES
    assert all(r.kind == STATIC for r in results)
    return results


def statuses(results) -> list[str]:
    return [r.status for r in results]


NO_LOAD_BARRIER = variant(GOOD, ("__syncthreads(); // LOAD", "// LOAD"))
NO_USE_BARRIER = variant(GOOD, ("__syncthreads(); // USE", "// USE"))


# --- the correct kernel ---------------------------------------------------------------------------


def test_correct_kernel_passes_all_three():
    tiles, load, use = check(GOOD)
    assert statuses([tiles, load, use]) == [PASSED] * 3
    assert (tiles.score, load.score, use.score) == (2.0, 1.5, 1.0)
    assert "As" in tiles.message and "Bs" in tiles.message
    assert load.metrics["line"] == line_of(GOOD, "// LOAD")
    assert use.metrics["line"] == line_of(GOOD, "// USE")
    assert load.metrics["tile_loop_line"] == line_of(GOOD, "for (int p")


def test_host_code_with_launch_is_not_a_kernel():
    assert find_kernels(GOOD) == ["mysgemm"]
    # a barrier-free host loop after the kernel must not be mistaken for the tile loop
    assert check(GOOD)[1].metrics["inner_loop_line"] == line_of(GOOD, "// INNER")


# --- missing barriers -----------------------------------------------------------------------------


def test_missing_load_barrier():
    tiles, load, use = check(NO_LOAD_BARRIER)
    assert statuses([tiles, load, use]) == [PASSED, FAILED, PASSED]
    inner = line_of(NO_LOAD_BARRIER, "// INNER")
    assert load.message.startswith(f"line {inner}: no __syncthreads()")
    assert f"last tile store is at line {line_of(NO_LOAD_BARRIER, 'if (p*TILE_SIZE+ty')}" in load.message
    assert "before the inner loop" in load.message
    assert load.metrics["line"] == inner and load.score == 0.0


def test_missing_use_barrier():
    tiles, load, use = check(NO_USE_BARRIER)
    assert statuses([tiles, load, use]) == [PASSED, PASSED, FAILED]
    inner = line_of(NO_USE_BARRIER, "// INNER")
    assert use.message.startswith(f"line {inner}: no __syncthreads() after the inner loop")
    assert "overwrites a tile" in use.message
    assert use.metrics["line"] == inner


def test_both_barriers_missing():
    source = variant(NO_LOAD_BARRIER, ("__syncthreads(); // USE", "// USE"))
    assert statuses(check(source)) == [PASSED, FAILED, FAILED]


def test_a_barrier_ending_each_inner_loop_iteration_counts_as_the_one_after_using_the_tiles():
    """It runs after every read of the tiles, the last one too, before the next phase's stores: no race, as the
    emulator sees; the check passes and says what it costs."""
    source = variant(
        NO_USE_BARRIER,
        ("sum += As[ty][i] * Bs[i][tx]; // INNER", "{ sum += As[ty][i] * Bs[i][tx]; __syncthreads(); } // INNER"),
    )
    use = check(source)[2]
    assert use.status == PASSED and use.metrics["in_inner_loop"] is True
    assert "runs once per iteration, where one after the inner loop would do" in use.message


def test_a_barrier_before_the_reads_in_the_inner_loop_does_not_count():
    """The last iteration's reads are followed by no barrier before the next phase's stores."""
    source = variant(
        NO_USE_BARRIER,
        ("sum += As[ty][i] * Bs[i][tx]; // INNER", "{ __syncthreads(); sum += As[ty][i] * Bs[i][tx]; } // INNER"),
    )
    use = check(source)[2]
    assert use.status == FAILED
    assert f"line {line_of(source, '// INNER')} is inside the inner loop" in use.message


def test_barrier_between_the_two_stores_is_too_early():
    source = variant(
        NO_LOAD_BARRIER,
        ("        if (p*TILE_SIZE+ty", "        __syncthreads(); // EARLY\n        if (p*TILE_SIZE+ty"),
    )
    load = check(source)[1]
    assert load.status == FAILED
    assert f"line {line_of(source, '// EARLY')} comes before the last store" in load.message


def test_barrier_at_top_of_tile_loop_body_guards_the_next_phase():
    source = variant(
        NO_USE_BARRIER,
        ("++p) {\n", "++p) {\n        __syncthreads(); // TOP\n"),
    )
    tiles, load, use = check(source)
    assert statuses([tiles, load, use]) == [PASSED, PASSED, PASSED]
    assert use.metrics["line"] == line_of(source, "// TOP")


# --- dead code does not count -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dead",
    [
        "// __syncthreads();",
        "/* __syncthreads(); */",
        'printf("__syncthreads();\\n");',
        "if (0) { __syncthreads(); }",
        "if (false) __syncthreads();",
    ],
    ids=["line-comment", "block-comment", "string", "if0", "if-false"],
)
def test_dead_barrier_does_not_count(dead):
    source = variant(GOOD, ("__syncthreads(); // LOAD", f"{dead} // LOAD"))
    load = check(source)[1]
    assert load.status == FAILED
    assert load.message.startswith(f"line {line_of(source, '// INNER')}: no __syncthreads()")


def test_barrier_in_if0_block_does_not_count():
    source = variant(GOOD, ("__syncthreads(); // LOAD", "// LOAD\n#if 0\n        __syncthreads();\n#endif"))
    load = check(source)[1]
    assert load.status == FAILED
    assert load.message.startswith(f"line {line_of(source, '// INNER')}: no __syncthreads()")


def test_else_branch_of_if0_counts():
    source = variant(
        GOOD,
        ("__syncthreads(); // LOAD", "// LOAD\n#if 0\n        { { {\n#else\n        __syncthreads(); // LIVE\n#endif"),
    )
    load = check(source)[1]
    assert load.status == PASSED
    assert load.metrics["line"] == line_of(source, "// LIVE")


# --- barriers through macros and helpers ------------------------------------------------------------


def test_barrier_through_macro_counts():
    source = variant(
        GOOD,
        ("#define TILE_SIZE 16", "#define TILE_SIZE 16\n#define SYNC() __syncthreads()\n#define BARRIER SYNC()"),
        ("__syncthreads(); // LOAD", "SYNC(); // LOAD"),
        ("__syncthreads(); // USE", "BARRIER; // USE"),
    )
    tiles, load, use = check(source)
    assert statuses([tiles, load, use]) == [PASSED] * 3
    assert "SYNC()" in load.message and "BARRIER" in use.message


def test_macro_without_barrier_does_not_count():
    source = variant(
        GOOD,
        ("#define TILE_SIZE 16", "#define TILE_SIZE 16\n#define SYNC() /* __syncthreads() */"),
        ("__syncthreads(); // LOAD", "SYNC(); // LOAD"),
    )
    assert check(source)[1].status == FAILED


def test_barrier_in_device_helper_counts():
    source = variant(
        GOOD,
        ("#define TILE_SIZE 16\n", "#define TILE_SIZE 16\n__device__ void barrier() { __syncthreads(); }\n"),
        ("__syncthreads(); // USE", "barrier(); // USE"),
    )
    use = check(source)[2]
    assert use.status == PASSED
    assert use.metrics["line"] == line_of(source, "// USE") and "barrier()" in use.message


HELPER_LOADS = """\
#define TILE 16
__device__ void loadTiles(float As[][TILE], float (*Bs)[TILE], const float *A, const float *B,
                          int m, int n, int k, int p, int row, int col) {
    int tx = threadIdx.x, ty = threadIdx.y;
    As[ty][tx] = (row < m && p * TILE + tx < k) ? A[row * k + p * TILE + tx] : 0.0f;
    Bs[ty][tx] = (col < n && p * TILE + ty < k) ? B[(p * TILE + ty) * n + col] : 0.0f;
    __syncthreads();
}
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0;
    for (int p = 0; p < (k + TILE - 1) / TILE; ++p) {
        loadTiles(As, Bs, A, B, m, n, k, p, row, col); // LOAD
        for (int i = 0; i < TILE; ++i) sum += As[threadIdx.y][i] * Bs[i][threadIdx.x];
        __syncthreads(); // USE
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
"""


def test_helper_that_loads_and_syncs_counts():
    tiles, load, use = check(HELPER_LOADS)
    assert statuses([tiles, load, use]) == [PASSED] * 3
    assert load.metrics["line"] == line_of(HELPER_LOADS, "// LOAD")
    assert "loadTiles()" in load.message


def test_helper_with_thread_dependent_barrier_is_conditional():
    source = variant(HELPER_LOADS, ("    __syncthreads();\n}", "    if (tx < 8) __syncthreads();\n}"))
    load = check(source)[1]
    assert load.status == FAILED
    assert f"(line {line_of(source, 'if (tx < 8)')})" in load.message and "threadIdx" in load.message


# --- barriers under thread-dependent conditions ----------------------------------------------------


def test_barrier_under_threadidx_condition():
    source = variant(GOOD, ("__syncthreads(); // LOAD", "if (threadIdx.x < 8) __syncthreads(); // LOAD"))
    load = check(source)[1]
    bar = line_of(source, "// LOAD")
    assert load.status == FAILED
    assert load.message.startswith(
        f"line {bar}: __syncthreads() is under a condition that depends on threadIdx (line {bar})"
    )
    assert "move the bounds check to the loads and stores" in load.message
    assert load.metrics == {**load.metrics, "line": bar, "condition_line": bar}


def test_barrier_under_condition_on_variable_derived_from_threadidx():
    guarded = "if (row < m) { // COND\n            __syncthreads(); // USE\n        }"
    source = variant(GOOD, ("__syncthreads(); // USE", guarded))
    tiles, load, use = check(source)
    assert (load.status, use.status) == (PASSED, FAILED)
    assert use.message.startswith(
        f"line {line_of(source, '// USE')}: __syncthreads() is under a condition that depends on threadIdx "
        f"(line {line_of(source, '// COND')})"
    )


def test_taint_goes_through_chains_of_assignments():
    source = variant(
        GOOD,
        ("    float sum = 0.0f;", "    float sum = 0.0f;\n    int lim; lim = col * 2; int z = lim;"),
        ("__syncthreads(); // LOAD", "if (z > 3) __syncthreads(); // LOAD"),
    )
    assert check(source)[1].status == FAILED


def test_early_return_before_tile_loop_makes_barriers_conditional():
    early_return = "    if (row >= m || col >= n) return; // RET\n    float sum = 0.0f;"
    source = variant(GOOD, ("    float sum = 0.0f;", early_return))
    tiles, load, use = check(source)
    ret = line_of(source, "// RET")
    assert statuses([tiles, load, use]) == [PASSED, FAILED, FAILED]
    assert load.message.startswith(
        f"line {line_of(source, '// LOAD')}: __syncthreads() is skipped by threads that leave early at line {ret}"
    )
    assert f"depends on threadIdx (line {ret})" in load.message
    assert use.metrics["exit_line"] == ret


def test_thread_dependent_break_in_tile_loop_makes_barriers_conditional():
    source = variant(GOOD, ("++p) {\n", "++p) {\n        if (p * TILE_SIZE > col) break; // BRK\n"))
    load = check(source)[1]
    assert load.status == FAILED and load.metrics["exit_line"] == line_of(source, "// BRK")


def test_blockidx_only_condition_is_uniform():
    source = variant(
        GOOD,
        ("    float sum = 0.0f;", "    if (blockIdx.x * TILE_SIZE >= n) return;\n    float sum = 0.0f;"),
        ("__syncthreads(); // LOAD", "if (blockIdx.y < gridDim.y) __syncthreads(); // LOAD"),
    )
    assert statuses(check(source)) == [PASSED] * 3


def test_thread_dependent_tile_loop_condition():
    source = variant(GOOD, ("p < (k - 1) / TILE_SIZE + 1;", "p * TILE_SIZE + tx < k;"))
    load = check(source)[1]
    assert load.status == FAILED
    assert f"(line {line_of(source, 'for (int p')})" in load.message


# --- shapes of real submissions --------------------------------------------------------------------


WHILE_LOOP = """\
#define TILE_SIZE 8
#define SYNC() __syncthreads()
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float sA[TILE_SIZE * TILE_SIZE];   // 1-D tiles
    __shared__ float sB[TILE_SIZE * TILE_SIZE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int r = blockIdx.y * blockDim.y + ty;
    const int c = blockIdx.x * blockDim.x + tx;
    float acc = 0.0f;
    int ph = 0;
    while (ph * TILE_SIZE < k) {
        sA[ty * TILE_SIZE + tx] = (r < m && ph * TILE_SIZE + tx < k) ? A[r * k + ph * TILE_SIZE + tx] : 0.0f;
        sB[ty * TILE_SIZE + tx] = (c < n && ph * TILE_SIZE + ty < k) ? B[(ph * TILE_SIZE + ty) * n + c] : 0.0f;
        SYNC(); // LOAD
        int i = 0;
        while (i < TILE_SIZE) { acc += sA[ty * TILE_SIZE + i] * sB[i * TILE_SIZE + tx]; ++i; } // INNER
        SYNC(); // USE
        ph++;
    }
    if (r < m && c < n) C[r * n + c] = acc;
}
"""


def test_while_loops_and_1d_shared_arrays_pass():
    tiles, load, use = check(WHILE_LOOP)
    assert statuses([tiles, load, use]) == [PASSED] * 3
    assert load.metrics["tile_loop_line"] == line_of(WHILE_LOOP, "while (ph")
    assert load.metrics["inner_loop_line"] == line_of(WHILE_LOOP, "// INNER")


def test_while_loop_missing_use_barrier():
    source = variant(WHILE_LOOP, ("SYNC(); // USE", "// USE"))
    use = check(source)[2]
    assert use.status == FAILED and use.metrics["line"] == line_of(source, "// INNER")


FILE_SCOPE = """\
#define TILE_SIZE 32
__shared__ float tileA[TILE_SIZE][TILE_SIZE];
__shared__ float tileB[TILE_SIZE][TILE_SIZE];

__global__ void MySgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    int row = blockIdx.y * TILE_SIZE + threadIdx.y;
    int col = blockIdx.x * TILE_SIZE + threadIdx.x;
    float *a = &tileA[0][0];   // pointer alias
    float v = 0;
    for (int t = 0; t < (k + TILE_SIZE - 1) / TILE_SIZE; t++) {
        int ac = t * TILE_SIZE + threadIdx.x, br = t * TILE_SIZE + threadIdx.y;
        a[threadIdx.y * TILE_SIZE + threadIdx.x] = (row < m && ac < k) ? A[row * k + ac] : 0;
        tileB[threadIdx.y][threadIdx.x] = (col < n && br < k) ? B[br * n + col] : 0;
        __syncthreads();
        #pragma unroll
        for (int e = 0; e < TILE_SIZE; ++e)
            v += tileA[threadIdx.y][e] * tileB[e][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = v;
}
"""


def test_file_scope_shared_arrays_pass():
    tiles, load, use = check(FILE_SCOPE, "MySgemm")
    assert statuses([tiles, load, use]) == [PASSED] * 3
    assert tiles.metrics["arrays"] == ["tileA", "tileB"]


NAIVE = """\
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < n) {
        float sum = 0;
        for (int i = 0; i < k; ++i) sum += A[row * k + i] * B[i * n + col];
        C[row * n + col] = sum;
    }
}
"""


def test_no_shared_memory_at_all():
    tiles, load, use = check(NAIVE)
    assert statuses([tiles, load, use]) == [FAILED] * 3
    assert tiles.message.startswith("line 1: no __shared__ tile is declared")
    assert "__shared__ arrays" in tiles.message
    for result in (load, use):
        assert result.message.startswith("line 1: no tile loop found in mysgemm")
        assert "inner loop that reads them" in result.message


def test_shared_array_never_read():
    # tiles are stored but the inner loop still reads global memory
    global_reads = "sum += A[row*k + p*TILE_SIZE+i] * B[(p*TILE_SIZE+i)*n + col];"
    source = variant(GOOD, ("sum += As[ty][i] * Bs[i][tx];", global_reads))
    tiles, load, use = check(source)
    assert tiles.status == FAILED
    declared = line_of(source, "__shared__ float As")
    assert tiles.message.startswith(f"line {declared}: __shared__ array As is declared but never read")
    assert (load.status, use.status) == (FAILED, FAILED)
    assert "no tile loop found" in load.message


def test_one_shared_tile_used_is_enough():
    source = variant(GOOD, ("sum += As[ty][i] * Bs[i][tx];", "sum += As[ty][i] * B[(p*TILE_SIZE+i)*n + col];"))
    assert statuses(check(source)) == [PASSED] * 3


def test_shared_array_never_written():
    source = GOOD.replace("As[ty][tx] =", "float unused =").replace("Bs[ty][tx] =", "unused =")
    tiles = check(source)[0]
    assert tiles.status == FAILED
    declared = line_of(source, "__shared__ float As")
    assert tiles.message.startswith(f"line {declared}: __shared__ array As is read but never written")


# --- finding kernels -------------------------------------------------------------------------------


def test_kernel_not_found_is_skipped():
    results = check(GOOD, "MySgemm")
    assert statuses(results) == [SKIPPED] * 3
    assert all(r.message == "kernel MySgemm not found" and r.max_score > 0 and r.score == 0 for r in results)


def test_find_kernels_ignores_prototypes_comments_strings_and_dead_code():
    source = (
        "__global__ void proto(int n);\n"
        "// __global__ void inComment() {}\n"
        'const char *s = "__global__ void inString() {}";\n'
        "#if 0\n__global__ void dead() {}\n#endif\n"
        "template <int T> __global__ void __launch_bounds__(256) MySgemm(float *a) { a[0] = T; }\n"
        'extern "C" __global__ void second() {}\n'
        "__device__ float helper(float x) { return x; }\n"
    )
    assert find_kernels(source) == ["MySgemm", "second"]
    assert find_kernels(FILE_SCOPE) == ["MySgemm"]


@pytest.mark.parametrize(
    "source",
    ["", "\x00\xff\xfe garbage \x01{{{", "}}}}", "__global__ void mysgemm( {", "#if 0\n", "#endif\n#else\n",
     "#define X " + "Y " * 20000, "(" * 5000, GOOD[: len(GOOD) // 2]],
    ids=["empty", "binary", "braces", "half-signature", "open-if0", "stray-endif", "huge-macro", "deep", "truncated"],
)
def test_weird_input_does_not_raise(source):
    kernels = find_kernels(source)
    assert isinstance(kernels, list)
    results = check(source)
    assert all(r.status in (PASSED, FAILED, SKIPPED) for r in results)
    if "mysgemm" not in kernels:
        assert statuses(results) == [SKIPPED] * 3


def test_unbalanced_braces_still_get_an_answer():
    source = variant(GOOD, ("C[row*n + col] = sum;\n}", "C[row*n + col] = sum;\n"))
    assert find_kernels(source)[0] == "mysgemm"
    assert statuses(check(source))[0] == PASSED


def test_internal_error_is_reported_not_raised(monkeypatch):
    import grader.source.static_check as static_check

    def broken(scope):
        raise RuntimeError("boom")

    monkeypatch.setattr(static_check, "_find_tile_loop", broken)
    results = check(GOOD)
    assert [r.status for r in results] == ["error"] * 3
    assert "RuntimeError" in results[0].message and results[0].metrics["error"] == "RuntimeError('boom')"


def test_a_submission_is_parsed_once_and_the_tree_shared_by_every_stage(monkeypatch):
    """Static check, declaration, tile size, host code and the late-warps hooks all read the file's tree:
    grading it (and preparing its GPU job) parses each distinct text once."""
    from conftest import SUBMISSIONS

    import grader.source.cuda_syntax as cs
    from grader.cases import load_cases
    from grader.config import load_config
    from grader.execute.child_run import job_of
    from grader.execute.confine.sandbox import detect
    from grader.intake.submission import read_submission
    from grader.pipeline import RunPlan, grade
    from grader.source.device_side import device_side

    parsed = []
    real = cs.parse_text
    monkeypatch.setattr(cs, "parse_text", lambda text: parsed.append(text) or real(text))
    # an earlier test on this worker may have left the file's tree in the thread's cache
    monkeypatch.setattr(cs._LOCAL, "trees", OrderedDict(), raising=False)
    config = load_config()
    cases = load_cases(config.testcases_dir)
    grade(SUBMISSIONS / "ece408_mp3", config, cases, RunPlan(None, "no backend"))
    submission = read_submission(SUBMISSIONS / "ece408_mp3")
    job_of(submission, device_side(submission.source, submission.headers), config, cases, "/tmp", detect(), timed=True)
    source = (SUBMISSIONS / "ece408_mp3" / "kernel.cu").read_text()
    assert parsed.count(source) == 1
    assert len(parsed) == len(set(parsed))


# --- cooperative groups ------------------------------------------------------------------------------


@pytest.mark.parametrize("load, use", [
    ("block.sync(); // LOAD", "cg::sync(block); // USE"),
    ("cooperative_groups::this_thread_block().sync(); // LOAD", "sync(block); // USE"),
])
def test_a_thread_block_sync_is_a_barrier(load, use):
    source = variant(GOOD, ("__syncthreads(); // LOAD", load), ("__syncthreads(); // USE", use),
                     ("    int tx", "    cg::thread_block block = cg::this_thread_block();\n    int tx"))
    assert statuses(check(source)) == [PASSED] * 3


def test_a_warp_tile_sync_is_no_barrier_of_the_block():
    source = variant(GOOD, ("__syncthreads(); // LOAD", "warp.sync(); // LOAD"),
                     ("__syncthreads(); // USE", "cg::sync(tile); // USE"),
                     ("    int tx", "    auto warp = cg::tiled_partition<32>(cg::this_thread_block());\n"
                                  "    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(warp);\n    int tx"))
    assert statuses(check(source)) == [PASSED, FAILED, FAILED]


def test_a_files_macros_are_found_once_for_every_stage_that_asks(monkeypatch):
    """The kernels, the static checks, the tile size and the launch each read the file's macros: one walk of its
    tree finds them for all (a batch worker walked it seven times a student), and what one caller does with its
    copy is not what the next one gets."""
    from grader.source import cuda_syntax as cs
    from grader.source.tile_size import launched_without_tile_size, tile_constant

    walks = []
    walk = cs.macro_definitions
    monkeypatch.setattr(cs, "macro_definitions", lambda root: walks.append(root) or walk(root))
    marker = test_a_files_macros_are_found_once_for_every_stage_that_asks.__name__
    source = f"#define TILE_WIDTH 16\n{GOOD}\n// {marker}"
    assert find_kernels(source) == ["mysgemm"]
    assert [check.status for check in static_checks(source, "mysgemm", POINTS)] == [PASSED] * 3
    tile_constant(source, "mysgemm")
    launched_without_tile_size(source, "mysgemm", ("TILE_WIDTH",))
    assert len(walks) == 1
    cs.source_macros(source).clear()
    assert "TILE_WIDTH" in cs.source_macros(source) and len(walks) == 1
