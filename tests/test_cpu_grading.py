"""End to end on the CPU emulator: the whole corpus, graded the way a student without a GPU grades it.

Needs only a C++ compiler, so CI runs all of it. Beyond what the GPU shows, the emulator must name
races (which barrier is missing), barrier divergence and out-of-bounds reads.
"""
import shutil

import pytest
from conftest import ROOT, RUN_TIMEOUT_S, SUBMISSIONS, make_grader
from hardware import needs_cxx

from grader.execute.cpu.messages import LOAD_BARRIER
from grader.judge.engines import STOPPED
from grader.on_cpu import MODELLED_NOTE
from grader.result import ERROR, FAILED, PASSED, SKIPPED

pytestmark = needs_cxx
LOAD_MISSING = "the barrier after loading the tiles is missing"
USE_MISSING = "the barrier after using the tiles is missing"
# no_bounds_checks's loads have no guard: each fix names the line, the expression and every bound
A_FIX = ("line 15 reads A[row * k + p * TILE_SIZE + tx] with no bound: read it only where row < m and "
         "p * TILE_SIZE + tx < k (0 elsewhere)")
B_FIX = ("line 16 reads B[(p * TILE_SIZE + ty) * n + col] with no bound: read it only where p * TILE_SIZE + ty < k "
         "and col < n (0 elsewhere)")
TILE = 16


@pytest.fixture(scope="module")
def grade_one(graders):
    grade = graders("cpu")
    grade.prefetch(sorted(p for p in SUBMISSIONS.iterdir() if p.is_dir()))
    return grade


def cases_of(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == "case"}


def emulated(result) -> dict:
    """The cases the CPU ran (every case: the large ones by sampled blocks; one marked cpu: skip would not be)."""
    return {name: c for name, c in cases_of(result).items() if "GPU only" not in c.message}


def submit(tmp_path, source: str):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "kernel.cu").write_text(source)
    return folder


def test_reference_passes_every_emulated_case_and_timing_by_the_speed_model(grade_one, tmp_path):
    folder = tmp_path / "reference_as_submission"
    folder.mkdir()
    shutil.copy(ROOT / "reference" / "kernel.cu", folder / "kernel.cu")
    result = grade_one(folder)
    assert result.backend == "cpu" and MODELLED_NOTE in result.message and result.tile_size == TILE
    assert all(c.status == PASSED for c in emulated(result).values())
    assert len(emulated(result)) == 21 and not any(c.status == SKIPPED for c in cases_of(result).values())
    assert all("every element of them right" in cases_of(result)[name].message
               for name in ("square_512", "large_ragged", "large_hidden"))  # run by sampled blocks
    timing = next(c for c in result.checks if c.kind == "timing")
    assert timing.status == PASSED and timing.metrics["estimated"] and not timing.needs_gpu


@pytest.mark.parametrize("name, tile", [("good_basic", 16), ("good_tile8_renamed", 8),
                                        ("good_tile32_macro_sync", 32), ("slow_uncoalesced", 16),
                                        ("tile_width_named", 16), ("tile_const_int", 16), ("index_macro_pasting", 16),
                                        ("paste_helper_macro", 16),
                                        ("tile_custom_macro", 16)])
def test_good_submissions_pass_every_emulated_case(grade_one, name, tile):
    result = grade_one(SUBMISSIONS / name)
    # what went wrong said in the failure: a grader error's message and log (a clean-clone CI saw one, unexplained)
    assert result.tile_size == tile, (result.outcome, result.message, result.log[-2000:])
    assert [(c.name, c.message) for c in emulated(result).values() if c.status != PASSED] == []


def test_student_template_fails_with_nothing_stored(grade_one):
    cases = emulated(grade_one(ROOT / "student_template"))
    assert all(c.status == FAILED and "the kernel stored nothing to C" in c.message for c in cases.values())


def test_missing_load_barrier_is_a_race_in_every_case(grade_one):
    for case in emulated(grade_one(SUBMISSIONS / "missing_load_barrier")).values():
        assert case.status == FAILED, case.name
        # The race explains the poison the early threads read: it alone is told, with the barrier it needs.
        assert case.message.count("shared-memory race") == 1 and case.fixes == [LOAD_BARRIER]
        assert "before any thread of the block stored it" not in case.message
        assert "line 16" in case.message and "line 20" in case.message  # the store and the read


def test_missing_use_barrier_is_a_race_wherever_there_is_a_next_phase(grade_one):
    for case in emulated(grade_one(SUBMISSIONS / "missing_use_barrier")).values():
        k = case.metrics["k"]
        if k > TILE:
            assert case.status == FAILED and USE_MISSING in case.explained, case.name
            assert LOAD_MISSING not in case.explained
        else:  # one phase: nothing is overwritten, and the kernel is right
            assert case.status == PASSED, case.name


def test_barriers_in_comments_are_both_reported_missing(grade_one):
    cases = emulated(grade_one(SUBMISSIONS / "barrier_in_comment"))
    assert all(c.status == FAILED and LOAD_MISSING in c.explained for c in cases.values())
    assert all(USE_MISSING in c.explained for c in cases.values() if c.metrics["k"] > TILE)


def test_races_are_reported_identically_on_every_run(graders, config_file, tmp_path):
    """The schedule is the emulator's choice, not the OS's: a second run says exactly the same."""
    fresh = make_grader(config_file, "cpu")  # not the cached results of the other tests
    first = fresh(SUBMISSIONS / "missing_use_barrier")
    again = graders("cpu")(SUBMISSIONS / "missing_use_barrier")
    def verdicts(result):
        return [(c.name, c.status, c.message) for c in result.checks]

    assert verdicts(first) == verdicts(again)


def test_conditional_barrier_is_divergence_on_ragged_shapes(grade_one):
    for case in emulated(grade_one(SUBMISSIONS / "conditional_barrier")).values():
        m, n = case.metrics.get("m"), case.metrics.get("n")
        if case.status == ERROR:
            assert "barrier divergence" in case.message and "line 21" in case.message
            assert "line 25" in case.message
        else:
            assert case.status == PASSED and m % TILE == 0 and n % TILE == 0, case.name


def test_missing_bounds_checks_read_outside_the_inputs(grade_one):
    cases = emulated(grade_one(SUBMISSIONS / "no_bounds_checks"))
    assert cases["square_64"].status == PASSED
    for ragged in ("ragged_m", "ragged_n", "ragged_all", "primes_small"):
        assert cases[ragged].status == ERROR and "out-of-bounds read of" in cases[ragged].message
    # Told with the line of the load, as compute-sanitizer tells it on a GPU (kernel.cu: A line 15, B line 16).
    assert cases["ragged_m"].message.startswith("out-of-bounds read of A at line 15: thread")
    assert cases["ragged_n"].message.startswith("out-of-bounds read of B at line 16: thread")


B_STRIDE_FIX = ("line 19 reads B[(p * TILE_SIZE + ty) * k + col]: B's rows are n long, so its element "
                "[p * TILE_SIZE + ty][col] is B[(p * TILE_SIZE + ty) * n + col]")


def test_wrong_stride_of_b(grade_one):
    """The emulator sees the stride the read used against B's row length: one cause, at the line, with the
    expression (the strides of A are right, so no advice about them)."""
    cases = emulated(grade_one(SUBMISSIONS / "b_wrong_stride"))
    assert cases["square_256"].status == PASSED
    wide = cases["rect_wide"]
    assert wide.status == FAILED and wide.fixes == [B_STRIDE_FIX]
    assert ("thread (0, 1) of block (0, 0) reads B[1][0] (B[(p * TILE_SIZE + ty) * k + col] at line 19) in rows "
            "k = 170 long, where B's rows are n = 300 long: it reaches B[0][170]") in wide.message
    # k > n: the wrong stride runs off the end of B, told by the element the thread meant
    tall = cases["rect_tall"]
    assert tall.status == ERROR and tall.message.startswith(
        "out-of-bounds read of B at line 19: thread (0, 8) of block (0, 0) reads B[40][0] (B[(p * TILE_SIZE + ty) * k "
        "+ col] at line 19) in rows k = 170 long, where B's rows are n = 40 long; that is past B's end")
    assert tall.fixes == [B_STRIDE_FIX]


# --- advice only from evidence (issue 29): each names what the emulator saw ---------------------------------

C_STRIDE_FIX = "line 23 stores C[row * k + col]: C's rows are n long, so its element [row][col] is C[row * n + col]"


def no_barrier_advice(case) -> bool:
    """Nothing the emulator saw was a store and a read of shared memory racing: no barrier is advised."""
    return "__syncthreads" not in " ".join(case.fixes) and "add the barrier" not in case.explained


def test_threads_storing_one_element_of_c_are_named_not_told_to_add_a_barrier(grade_one):
    """c_index_collision stores C[row * k + col]: where k < n, two threads store one element."""
    cases = emulated(grade_one(SUBMISSIONS / "c_index_collision"))
    assert cases["square_64"].status == PASSED and cases["ragged_m"].status == PASSED  # n == k
    assert ("threads (1, 0) and (0, 1) of block (0, 0) both store C[0][1] (line 23); 109 elements of C are stored "
            "by more than one thread") in cases["k_one"].message
    assert ("thread (0, 1) of block (0, 0) and thread (0, 0) of block (4, 0) both store C[0][64] (line 23)"
            in cases["ragged_n"].message)
    # the collisions are facts; the cause the emulator saw is the stride of the store, in every case
    for name in ("ragged_n", "ragged_all", "rect_wide", "k_one", "sub_tile"):  # k < n
        assert cases[name].status == FAILED and cases[name].fixes == [C_STRIDE_FIX], name
    assert ("thread (0, 1) of block (0, 0) stores C[1][0] (C[row * k + col] at line 23) in rows k = 1 long, where C's "
            "rows are n = 48 long: it reaches C[0][1]") in cases["k_one"].message
    # k > n: the index runs past C, told by the element the thread meant
    assert cases["rect_tall"].status == ERROR and cases["rect_tall"].fixes == [C_STRIDE_FIX]
    assert cases["rect_tall"].message.startswith(
        "out-of-bounds write of C at line 23: thread (0, 7) of block (0, 6) stores C[103][0] (C[row * k + col] at line "
        "23) in rows k = 170 long, where C's rows are n = 40 long; that is past C's end")
    assert all(no_barrier_advice(c) for c in cases.values())


def test_a_block_shape_that_does_not_match_the_tile_is_told_as_seen(grade_one):
    """block_shape_1d was written for 1-D blocks (ty = threadIdx.x / TILE_WIDTH): launched tile × tile, the
    threads of a column of the block share a tile entry and an element of C, and sB's rows 1-15 are never
    loaded. It has both barriers, so no barrier is advised."""
    result = grade_one(SUBMISSIONS / "block_shape_1d")
    cases = emulated(result)
    assert len(cases) == 21
    for case in cases.values():
        assert case.status == FAILED, case.name
        same_entry = "threads (0, 0) and (0, 1) of block (0, 0) both store sA[0][0] (line 18) in the same phase"
        assert same_entry in case.message
        assert "threads (0, 0) and (0, 1) of block (0, 0) both store C[0][0] (line 26)" in case.message
        assert "the two threads differ only in threadIdx.y" in case.message
        assert ("sB[1][0] is read at line 22 (thread (0, 0) of block (0, 0)) before any thread of the block stored "
                "it") in case.message
        assert no_barrier_advice(case)
    assert any("blocks of tile × tile threads" in fix for fix in cases["square_16"].fixes)


def test_a_read_past_b_names_the_line_the_shape_and_the_stride(grade_one):
    """b_stride_m reads B with row stride m: past B's end where m > n."""
    cases = emulated(grade_one(SUBMISSIONS / "b_stride_m"))
    assert cases["square_256"].status == PASSED
    tall = cases["rect_tall"]  # told by the element the thread meant, and the stride it used
    assert tall.status == ERROR
    assert tall.message.startswith("out-of-bounds read of B at line 16: thread (0, 7) of block (0, 0) reads B[23][0] "
                                   "(B[(ph * TILE_WIDTH + ty) * m + Col] at line 16) in rows m = 300 long, where B's "
                                   "rows are n = 40 long; that is past B's end")
    fix = ("line 16 reads B[(ph * TILE_WIDTH + ty) * m + Col]: B's rows are n long, so its element "
           "[ph * TILE_WIDTH + ty][Col] is B[(ph * TILE_WIDTH + ty) * n + Col]")
    assert tall.fixes == [fix] and cases["rect_wide"].status == FAILED and cases["rect_wide"].fixes == [fix]


def test_a_tile_never_loaded_reads_poison_and_is_named(grade_one):
    """tile_never_loaded stores B's tile into As (a copy-paste slip): Bs is never stored. Shared memory is
    poisoned at each block's start, as on the GPU, so every case is wrong (NaN), and the read is named."""
    cases = emulated(grade_one(SUBMISSIONS / "tile_never_loaded"))
    for case in cases.values():
        assert case.status == FAILED, case.name
        assert "NaN or infinite, stored by the kernel" in case.message
        assert ("Bs[0][0] is read at line 20 (thread (0, 0) of block (0, 0)) before any thread of the block stored it"
                in case.message)
        assert case.fixes[0].startswith("check the loads into Bs") and no_barrier_advice(case)


def test_headline_says_the_wrong_cells_are_unwritten_not_a_tiny_max_error(grade_one):
    """store_bounds_swapped stores under `row < n && col < m`: where m < n, the wrong cells are never written."""
    cases = emulated(grade_one(SUBMISSIONS / "store_bounds_swapped"))
    assert cases["square_64"].status == PASSED
    wide = cases["rect_wide"]
    assert wide.message.startswith("C = A×B with m=40, n=300, k=170: 10400 of 12000 elements of C are wrong: all "
                                   "never written (they still hold the NaN the grader fills C with)")
    assert "max abs error" not in wide.message and "off by" not in wide.message
    tall = cases["rect_tall"]  # m > n: threads with col >= n store 0 into the next row's elements
    assert "10392 never written" in tall.message and "304 off by up to" in tall.message
    stored_over = "thread (0, 1) of block (0, 0) and thread (8, 0) of block (2, 0) both store C[1][0] (line 22)"
    assert stored_over in tall.message
    assert all(no_barrier_advice(c) for c in cases.values())


def test_truncated_phase_count_is_diagnosed(grade_one):
    """The emulator counted the tile loop's trips: k / 16 rounded down, where the dot product needs it rounded up."""
    cases = emulated(grade_one(SUBMISSIONS / "truncated_phases"))
    assert cases["square_256"].status == PASSED
    ragged = cases["ragged_k"]
    assert ragged.status == FAILED and ("the tile loop at line 14 runs floor(k / 16) = 4 times here (m = 64, n = 64, "
                                        "k = 67); the dot product needs ceil(k / 16) = 5") in ragged.message
    assert ragged.fixes[0].startswith("the tile loop at line 14 (`p < numPhases`) must run ceil(k / 16) times")


def test_store_outside_c_is_an_out_of_bounds_write(grade_one):
    cases = emulated(grade_one(SUBMISSIONS / "store_outside_c"))
    failing = [c for c in cases.values() if c.status == FAILED]
    assert failing and all("out-of-bounds write" in c.message for c in failing)
    assert cases["square_64"].status == PASSED


def test_hang_times_out_like_on_the_gpu(grade_one):
    result = grade_one(SUBMISSIONS / "hang")
    cases = list(emulated(result).values())
    assert all(c.status == ERROR and f"timed out after {RUN_TIMEOUT_S} s" in c.message for c in cases[:3])
    assert all(c.status == SKIPPED and "crashed or hung in 3 cases" in c.message for c in cases[3:])
    # three limits and the build: no access profile of a kernel that hangs (its launch would hang too). Each limit
    # counts the worker's own time: on a machine the suite's other worker shares, its waits for a CPU are forgiven,
    # up to one more limit (deadline.py)
    assert result.duration_s < 3 * 2 * RUN_TIMEOUT_S + 10, result.phases


@pytest.mark.parametrize("name, words, cause", [("trap", "kernel aborted: __trap() at line 10", "trap"),
                                                # 4 TiB past C: no page could hold it, so read or write is not known
                                                ("illegal_address", "invalid memory access at line 28",
                                                 "invalid_address")])
def test_faults_end_the_case_with_a_clear_verdict(grade_one, name, words, cause):
    cases = emulated(grade_one(SUBMISSIONS / name))
    assert all(c.status == ERROR and c.message.startswith(words) for c in cases.values())
    # what stopped it, which beside a GPU fault in the same case spares the kernel the sanitizer's tools
    assert all(c.metrics.get(STOPPED) == cause for c in cases.values()), [c.metrics for c in cases.values()]


@pytest.mark.parametrize("name, words", [("compile_error", "line 12: error"),
                                         ("wrong_kernel_name", "kernel mysgemm not found; found: MySgemm")])
def test_compile_problems_as_on_the_gpu(grade_one, name, words):
    compiled = next(c for c in grade_one(SUBMISSIONS / name).checks if c.kind == "compile")
    assert compiled.status == ERROR and words in compiled.message


def test_call_counter_passes_every_case(grade_one):
    assert all(c.status == PASSED for c in emulated(grade_one(SUBMISSIONS / "call_counter")).values())


def test_empty_file_is_not_graded(grade_one):
    result = grade_one(SUBMISSIONS / "empty")
    assert result.status == "error" and "empty" in result.message and result.score == 0


# --- what only the emulator shows, on files written here -------------------------------------------------

KERNEL = """#define TILE_SIZE 16
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_SIZE + ty, col = blockIdx.x * TILE_SIZE + tx;
    EARLY_EXIT
    float sum = 0.0f;
    for (int p = 0; p < (k + TILE_SIZE - 1) / TILE_SIZE; ++p) {
        int a = p * TILE_SIZE + tx, b = p * TILE_SIZE + ty;
        As[ty][tx] = (row < m && a < k) ? A[row * k + a OFFSET] : 0.0f;
        Bs[ty][tx] = (b < k && col < n) ? B[b * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE_SIZE; ++i)
            sum += As[ty][i] * Bs[i][tx];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
"""


def kernel(early_exit: str = "", offset: str = "") -> str:
    return KERNEL.replace("EARLY_EXIT", early_exit).replace("OFFSET", offset)


def test_threads_that_return_before_a_barrier_are_divergence(grade_one, tmp_path):
    result = grade_one(submit(tmp_path, kernel(early_exit="if (row >= m || col >= n) return;")))
    cases = emulated(result)
    assert cases["square_64"].status == PASSED  # no thread returns when the tiles fit
    assert cases["ragged_m"].status == ERROR
    assert "waits at the __syncthreads() on line 14" in cases["ragged_m"].message
    assert "has already returned" in cases["ragged_m"].message


def test_a_read_before_the_start_of_a_is_caught(grade_one, tmp_path):
    cases = emulated(grade_one(submit(tmp_path, kernel(offset="- 1"))))
    assert cases["square_16"].status == ERROR
    assert cases["square_16"].message.startswith(  # the element the thread meant: column -1 of A's row 0
        "out-of-bounds read of A at line 12: thread (0, 0) of block (0, 0) reads A[0][-1] (A[row * k + a - 1] at line "
        "12): column -1 is before A's first column (k = 16); that is before A's start")


def test_a_launch_that_exits_is_a_crash_with_its_exit_code_and_its_printf_is_shown_once(grade_one, tmp_path):
    """A case's two thread orders run as two processes one harness forks: each one's end reaches the grade (here
    exit(7), which only the emulator sees), and the kernel's printf output is the first order's alone."""
    exits = ('\n#ifndef __NVCC__\n'
             '    if (blockIdx.x + blockIdx.y + tx + ty == 0) { printf("thread zero was here\\n"); exit(7); }\n'
             '#endif\n')
    result = grade_one(submit(tmp_path, kernel(early_exit=exits)))
    cases = emulated(result)
    assert cases and all(c.status == ERROR and "crashed (exit code 7)" in c.message for c in cases.values())
    assert result.log.count("thread zero was here") == len(cases)


def test_host_code_that_does_not_compile_in_extern_c_is_left_out(grade_one, tmp_path):
    host = """
#include <iostream>
#include <vector>
void basicSgemm(int m, int n, int k, const float *A, const float *B, float *C) {
    std::vector<float> check(m * n);
    dim3 grid((n + TILE_SIZE - 1) / TILE_SIZE, (m + TILE_SIZE - 1) / TILE_SIZE), block(TILE_SIZE, TILE_SIZE);
    mysgemm<<<grid, block>>>(m, n, k, A, B, C);
    std::cout << "launched" << std::endl;
}
int main() { return 0; }
"""
    result = grade_one(submit(tmp_path, kernel() + host))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert compiled.status == PASSED
    assert all(c.status == PASSED for c in emulated(result).values())


def test_the_tile_size_macro_is_the_first_the_config_names(config_file):
    """A course whose labs say `#define BLOCK 16` lists BLOCK in kernel.tile_macros, and the file grades."""
    from grader.cases import load_cases
    from grader.config import load_config
    from grader.pipeline import RunPlan, grade

    config = load_config(config_file)
    config.kernel.tile_macros = ["BLOCK"]
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:2]
    result = grade(SUBMISSIONS / "no_tile_size", config, cases, RunPlan("cpu"))
    assert result.tile_size == 16
    assert [c.status for c in result.checks if c.kind == "case"] == [PASSED, PASSED]


def test_one_cause_is_said_once_with_the_cases_it_broke(grade_one):
    """no_bounds_checks reads past A (line 15) or B (line 16) in most cases: the student reads each read's
    fix once, with the visible cases it explains and a count of hidden ones, not once per case; each case
    keeps its own facts."""
    from grader.report.student_view import student_message, student_summary, what_to_fix

    result = grade_one(SUBMISSIONS / "no_bounds_checks")
    broken = [c for c in emulated(result).values() if c.fixes]
    assert len(broken) > 5 and {tuple(c.fixes) for c in broken} == {(A_FIX,), (B_FIX,)}
    summary = student_summary(result)
    lines = what_to_fix(result)
    assert len(lines) == 2
    for fix, line in zip((A_FIX, B_FIX), sorted(lines)):
        assert summary.count(fix) == 1
        explained = [c for c in broken if c.fixes == [fix]]
        visible = [c.name for c in explained if c.visibility != "hidden"]
        hidden = len(explained) - len(visible)
        assert line == f"{fix} ({', '.join(visible)}{f' and {hidden} hidden' if hidden else ''})"
    assert all(c.fixes[0] not in student_message(c) and "out-of-bounds read" in student_message(c)
               for c in broken if c.visibility != "hidden")


GOOD_BASIC = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
# A thread's stack on the CPU is 256 KiB (a fiber's), each below a guard page: past it is another thread's.
DEEPER = """__device__ float deeper(int depth, const float *A) {
    float frame[256];
    for (int i = 0; i < 256; ++i)
        frame[i] = A[i % 4] + depth;
    return depth < 0 ? frame[depth & 255] : deeper(depth + 1, A) + frame[depth & 255];
}

"""
ENDLESS_RECURSION = GOOD_BASIC.replace("__global__ void mysgemm", DEEPER + "__global__ void mysgemm").replace(
    "        C[row * n + col] = sum;", "        C[row * n + col] = sum + (row + col == 0 ? deeper(0, A) : 0.0f);")
LOCAL_ARRAY_PAST_THE_STACK = GOOD_BASIC.replace("    float sum = 0.0f;\n", """    float sum = 0.0f;
    volatile float scratch[80000];  // 320 KB
    scratch[ty * TILE_SIZE + tx] = 0.0f;
    sum += scratch[ty * TILE_SIZE + tx];
""")


@pytest.mark.parametrize("source", [ENDLESS_RECURSION, LOCAL_ARRAY_PAST_THE_STACK], ids=["recursion", "local_array"])
def test_a_thread_that_overflows_its_stack_gets_a_stack_overflow_verdict(tmp_path, quick_config_file, source):
    assert "deeper(0, A)" in source or "scratch[" in source  # the replacements took
    result = make_grader(quick_config_file, "cpu")(submit(tmp_path, source))
    cases = emulated(result)
    assert cases and all(c.status == ERROR and c.message.startswith("stack overflow in ") for c in cases.values()), \
        [c.message for c in cases.values()]


def test_volatile_tiles_grade_like_plain_ones(tmp_path, quick_config_file):
    """`volatile` shared memory (as in the classic warp-synchronous reductions) builds and is checked."""
    source = GOOD_BASIC.replace("__shared__ float", "__shared__ volatile float")
    assert source.count("__shared__ volatile float") == 2
    cases = emulated(make_grader(quick_config_file, "cpu")(submit(tmp_path, source)))
    assert cases and all(c.status == PASSED for c in cases.values()), [c.message for c in cases.values()]
