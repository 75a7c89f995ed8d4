"""Explanations a TA would write: one root cause per failing pattern, at the student's line, true to what they
wrote, and never a fix for something the code already does. Each kernel here makes one classic mistake (or is
its corrected twin); each test names the cause, the line and the expression the words must give, and the
advice they must not.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu
from rich.console import Console

from grader.report.student_view import student_message, what_to_fix
from grader.report.terminal import render
from grader.result import CASE, PASSED, STATIC

pytestmark = needs_cxx


def cpu(graders, name: str):
    return graders("cpu")(SUBMISSIONS / name)


def failing(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == CASE and c.status not in (PASSED, "skipped")}


def terminal_lines(result, width: int = 80) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    render(result, console)
    return console.export_text().splitlines()


def test_a_barrier_ending_each_inner_loop_iteration_is_the_barrier_after_using_the_tiles(graders):
    """It runs after every read of the tiles and before the next phase's stores: nothing races, the static check
    counts it, and the advice says what it costs, at its line."""
    result = cpu(graders, "barrier_in_inner_loop")
    assert failing(result) == {}
    statics = {c.name: c for c in result.checks if c.kind == STATIC}
    assert all(c.status == PASSED for c in statics.values()), statics
    assert statics["barrier after using tiles"].metrics["line"] == 31
    cost = [f for f in result.feedback if f.source == "static check"]
    assert [f.line for f in cost] == [31] and "move it after the inner loop" in cost[0].advice


@pytest.mark.parametrize("name", ["missing_use_barrier", "missing_load_barrier", "b_column_unbounded"])
def test_a_one_bug_report_fits_on_a_screen(graders, name):
    """One cause: one bullet with the checks it explains and one case told in full, ≤ 60 lines at 80 columns."""
    lines = terminal_lines(cpu(graders, name))
    assert len(lines) <= 60, "\n".join(lines)
    assert sum(1 for line in lines if line.startswith("  - ") or line.startswith("   1.")) == 1, "\n".join(lines)


def test_a_hip_file_is_told_what_it_uses_at_its_lines():
    from grader.source.signature import hip_problem

    told = hip_problem((SUBMISSIONS / "hip_port" / "kernel.cu").read_text())
    assert "line 1 includes <hip/hip_runtime.h> (CUDA: <cuda_runtime.h>)" in told
    assert "line 31 calls hipLaunchKernelGGL (CUDA: kernel<<<grid, block>>>(…))" in told
    assert "hipMalloc" not in told  # it does not call it
    only_malloc = hip_problem("#include <cstdio>\n/* a comment\n over two lines */\nvoid f() { hipMalloc(0, 0); }\n")
    assert "line 4 calls hipMalloc (CUDA: cudaMalloc)" in only_malloc and "hipLaunchKernelGGL" not in only_malloc


def test_a_compile_that_passed_tells_only_warnings_about_the_students_lines():
    """nvcc's remark on silencing warnings and ptxas's notes about nothing the student wrote are left out."""
    from grader.execute.nvcc.compile import warnings_of

    log = ('kernel.cu(5): warning #177-D: variable "x" was declared but never referenced\n      int x;\n'
           '          ^\n\nRemark: The warnings can be suppressed with "-diag-suppress <warning-number>"\n\n'
           "ptxas warning : Registers are spilled to local memory\n")
    assert warnings_of(log, "a\nb\nc\nd\n  int x;\n") == (
        'compiled with warnings:\nline 5: warning #177-D: variable "x" was declared but never referenced\n'
        "    int x;\n        ^")
    assert warnings_of('Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"\n') == "compiled"


def test_junit_tells_each_cause_once_in_full_and_points_the_other_cases_to_it(graders, tmp_path):
    from junitparser import JUnitXml

    from grader.report.junit_report import to_junit_xml

    result = cpu(graders, "missing_use_barrier")
    path = tmp_path / "r.junit.xml"
    path.write_text(to_junit_xml([result]))
    texts = {case.name: case.result[0].message for case in next(iter(JUnitXml.fromfile(str(path))))
             if case.result and case.result[0].message}
    full = [name for name, text in texts.items() if "elements of C are wrong" in text]
    assert full == ["case square_64"], full
    assert "(the same cause as square_64: the barrier after using the tiles is missing" in texts["case ragged_m"]


def test_gradescope_and_prairielearn_tell_each_cause_once_in_full(graders):
    from grader.report.gradescope import to_gradescope
    from grader.report.prairielearn import to_prairielearn

    result = cpu(graders, "missing_use_barrier")
    gradescope = {t["name"]: t["output"] for t in to_gradescope(result)["tests"]}
    prairielearn = {t["name"]: t["output"] for t in to_prairielearn(result)["tests"]}
    for outputs, example, other in ((gradescope, "case: square_64", "case: ragged_m"),
                                    (prairielearn, "square_64", "ragged_m")):
        assert "elements of C are wrong" in outputs[example]
        assert sum("elements of C are wrong" in text for text in outputs.values()) == 1
        assert outputs[other].endswith("(the same cause as square_64)")


# --- one root cause per failing pattern, from what the emulator observed (issue 42, classes 1-6, 8, 9) -------------

ACCUMULATE = ("line 23 adds to C (`+=`) before C was ever written: the grader's C starts as NaN, as a real C holds "
              "whatever was there; add up the sum in a variable and store it with `=`")


def phase_count(line: int, condition: str) -> str:
    return (f"the tile loop at line {line} (`{condition}`) must run ceil(k / 16) times, (k + 15) / 16 in integer "
            "arithmetic: one trip per tile of the k terms of each dot product")


ROW_FROM_X = ("line {} takes the row from threadIdx.x: this lab launches x over C's columns, so the row is "
              "blockIdx.y * 16 + threadIdx.y and the column blockIdx.x * 16 + threadIdx.x")
GUARD_TX = ("line 15 reads A[row * k + p * TILE_SIZE + tx] where `row < m && tx < k`, which does not keep "
            "p * TILE_SIZE + tx < k: read it only where row < m and p * TILE_SIZE + tx < k (0 elsewhere)")
B_COLUMN = ("line 19 reads B[(p * TILE_SIZE + ty) * n + col] where `p * TILE_SIZE + ty < k`, which does not keep "
            "col < n: read it only where p * TILE_SIZE + ty < k and col < n (0 elsewhere)")
B_STRIDE = ("line 19 reads B[(p * TILE_SIZE + ty) * k + col]: B's rows are n long, so its element "
            "[p * TILE_SIZE + ty][col] is B[(p * TILE_SIZE + ty) * n + col]")
C_STRIDE = "line 23 stores C[row * k + col]: C's rows are n long, so its element [row][col] is C[row * n + col]"
USE_BARRIER = ("the barrier after using the tiles is missing: add __syncthreads() after the loop that reads the tiles, "
               "so no thread loads the next phase's tiles while others still read these")
LOAD_BARRIER = ("the barrier after loading the tiles is missing: add __syncthreads() after the loads, before any "
                "thread reads the tiles")
UNGUARDED = "line 22 stores C[row * n + col] with no bound: store it only where row < m and col < n"
SWAPPED = ("line 22 stores C[row * n + col] where `row < n && col < m`, which does not keep row < m and col < n: "
           "store it only where row < m and col < n")
BARRIER_ADVICE = ("__syncthreads", "barrier")
NOT_A_GUESS = ("check the strides", "check the index of your store", "check the bound on", "round the phase count",
               "the kernel stored nothing", "must write its sum", "depends on the order")

# kernel: (its one cause, a case, the facts the case must tell, advice no failing case may give)
CAUSES = {
    # 1. C += sum with C not zeroed: a read of C before any thread stored it, not "stored nothing"
    "accumulate_into_c": (ACCUMULATE, "square_16", ["thread (0, 0) of block (0, 0) adds to C[0][0] (C[row * n + col] "
                                                    "at line 23) before any thread stored it"],
                          NOT_A_GUESS + BARRIER_ADVICE),
    # 2. the phase count: the trips the tile loop made, against ceil(k / 16), named by the count they match
    "truncated_phases": (phase_count(14, "p < numPhases"), "ragged_k",
                         ["the tile loop at line 14 runs floor(k / 16) = 4 times here (m = 64, n = 64, k = 67); the "
                          "dot product needs ceil(k / 16) = 5"], NOT_A_GUESS + BARRIER_ADVICE),
    "phases_from_n": (phase_count(14, "p < (n + TILE_SIZE - 1) / TILE_SIZE"), "rect_tall",
                      ["the tile loop at line 14 runs ceil(n / 16) = 3 times here (m = 300, n = 40, k = 170); the dot "
                       "product needs ceil(k / 16) = 11"], NOT_A_GUESS + BARRIER_ADVICE),
    "phases_store_in_loop": (phase_count(14, "p < phases"), "k_one",
                             ["the tile loop at line 14 runs floor(k / 16) = 0 times here (m = 64, n = 48, k = 1); the "
                              "dot product needs ceil(k / 16) = 1: the store to C at line 22, inside it, never runs"],
                             NOT_A_GUESS + BARRIER_ADVICE),
    # 3. threadIdx.x picks C's row where the lab launches x over C's columns
    "row_from_thread_x": (ROW_FROM_X.format(10), "ragged_m",
                          ["every thread stores the element of C whose row its blockIdx.x and threadIdx.x pick: thread "
                           "(1, 0) of block (0, 0) stores C[1][0] (line 23), where this lab's launch gives it C[0][1]"],
                          NOT_A_GUESS + BARRIER_ADVICE + ("row < m", "col < n")),
    "launch_x_rows": (ROW_FROM_X.format(13), "rect_tall", ["stores C[1][0] (line 26), where this lab's launch gives it "
                                                           "C[0][1]"], NOT_A_GUESS + BARRIER_ADVICE),
    # 4. the k bound of A's load tests tx, not the column it loads
    "guard_wrong_variable": (GUARD_TX, "ragged_k",
                             ["out-of-bounds read of A at line 15: thread (3, 15) of block (0, 3) reads A[63][67] "
                              "(A[row * k + p * TILE_SIZE + tx] at line 15): column 67 is past A's last column "
                              "(k = 67); that is past A's end"], NOT_A_GUESS + BARRIER_ADVICE),
    # 5. a read past B's end told by the element the thread meant: its column is past n, its row is right
    "b_column_unbounded": (B_COLUMN, "ragged_n",
                           ["thread (3, 15) of block (4, 0) reads B[63][67] (B[(p * TILE_SIZE + ty) * n + col] at line "
                            "19): column 67 is past B's last column (n = 67); that is past B's end"],
                           NOT_A_GUESS + BARRIER_ADVICE + ("B[k=", "r < k")),
    # 9. a wrong stride: one cause, at the line, with the expression it should be
    "b_wrong_stride": (B_STRIDE, "rect_wide", ["reads B[1][0] (B[(p * TILE_SIZE + ty) * k + col] at line 19) in rows "
                                               "k = 170 long, where B's rows are n = 300 long: it reaches B[0][170]"],
                       NOT_A_GUESS + BARRIER_ADVICE + ("k bounds",)),
    "c_index_collision": (C_STRIDE, "ragged_n", ["stores C[1][0] (C[row * k + col] at line 23) in rows k = 64 long, "
                                                 "where C's rows are n = 67 long: it reaches C[0][64]"],
                          NOT_A_GUESS + BARRIER_ADVICE),
    # 6. a race told by the tile loop's trips: the store for the next tile overtook this one's reads
    "missing_use_barrier": (USE_BARRIER, "square_64",
                            ["thread (0, 0) already stores As[0][0] for the next tile (line 16, trip 2 of the tile "
                             "loop at line 13) while thread (1, 0) still reads this tile's (line 21, trip 1): the "
                             "__syncthreads() at line 18 precedes the reads, and none follows the reads before the "
                             "loop body ends (line 22)"],
                            NOT_A_GUESS + ("between them", "in the same phase")),
    "missing_load_barrier": (LOAD_BARRIER, "square_16",
                             ["thread (0, 0) reads As[0][1] at line 20 before thread (1, 0) stores it at line 16 for "
                              "the same tile (trip 1 of the tile loop at line 13), and no __syncthreads() runs between "
                              "the tile's stores and its reads"], NOT_A_GUESS),
    # 8. missing store bounds: the stores the emulator saw outside C's rows and columns, not the threads' order
    "store_unguarded": (UNGUARDED, "ragged_n", ["stores C[0][67] (C[row * n + col] at line 22): column 67 is past C's "
                                                "last column (n = 67)"], NOT_A_GUESS + BARRIER_ADVICE),
    "store_bounds_swapped": (SWAPPED, "ragged_m", ["stored nothing into C, where the launch gives it C[64][0], which "
                                                   "no thread stored: the store at line 22 runs only where `row < n "
                                                   "&& col < m`"], NOT_A_GUESS + BARRIER_ADVICE),
}
ONE_BUG = ["accumulate_into_c", "phases_from_n", "phases_store_in_loop", "row_from_thread_x", "guard_wrong_variable",
           "store_unguarded", "b_column_unbounded", "b_wrong_stride", "c_index_collision", "truncated_phases",
           "missing_use_barrier", "missing_load_barrier", "store_bounds_swapped"]


def assert_one_cause(result, name: str, every_case: bool = True) -> None:
    """Every failing case (or, with every_case False, each one both engines failed) has the kernel's one cause as its
    first fix, the example case tells the facts, and no failing check gives advice the cause rules out."""
    cause, example, facts, never = CAUSES[name]
    cases = failing(result)
    assert example in cases, (name, sorted(cases))
    cases = {case.name: case for case in cases.values()
             if every_case or case.metrics.get("emulator") in ("failed", "error")}
    told = {case.name: case.fixes[:1] for case in cases.values()}
    assert told and all(fix == [cause] for fix in told.values()), (name, told)
    for fact in facts:
        assert fact in cases[example].message, (name, cases[example].message)
    for case in cases.values():
        assert not any(word in case.explained for word in never), (name, case.name, case.explained)


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_each_failing_pattern_is_told_by_its_one_root_cause(graders, name):
    result = cpu(graders, name)
    assert_one_cause(result, name)
    assert what_to_fix(result) == [next(line for line in what_to_fix(result) if line.startswith(CAUSES[name][0]))]


@pytest.mark.parametrize("name", ONE_BUG)
def test_a_one_bug_kernel_gets_one_bullet_on_one_screen(graders, name):
    lines = terminal_lines(cpu(graders, name))
    assert len(lines) <= 60, "\n".join(lines)
    fixes = lines[lines.index("What to fix:") + 1:]
    fixes = fixes[:next((i for i, line in enumerate(fixes) if not line.startswith(" ")), len(fixes))]
    assert sum(1 for line in fixes if line.startswith("  - ") or line.startswith("   1.")) == 1, "\n".join(lines)


def test_c_read_after_it_was_stored_is_no_accumulation(graders):
    """The twin that zeroes its element before adding to it passes: adding to what the thread stored is fine."""
    assert failing(cpu(graders, "accumulate_after_zeroing")) == {}


def test_the_instructor_is_told_the_launch_that_matches_a_transposed_kernel(graders):
    """The student reads the line and the lab's launch; the instructor (the check's metrics, the JSON) reads that
    `kernel.launch: {x: rows}` is the config under which this kernel is right, and it is (test_launch_contract)."""
    from grader.report.json_report import to_json

    result = cpu(graders, "row_from_thread_x")
    case = failing(result)["ragged_m"]
    assert case.metrics["notes"] == {"launch_matches": "kernel.launch: {x: rows}"}
    assert "kernel.launch" not in student_message(case) and "kernel.launch" not in case.explained
    assert '"launch_matches": "kernel.launch: {x: rows}"' in to_json(result)


def test_under_the_launch_it_was_written_for_the_transposed_kernel_is_right(config_file):
    from grader.cases import load_cases
    from grader.config import load_config
    from grader.pipeline import RunPlan, grade

    config = load_config(config_file)
    config.kernel.launch.x = "rows"
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"]
    result = grade(SUBMISSIONS / "row_from_thread_x", config, cases, RunPlan("cpu"))
    assert failing(result) == {}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", sorted(CAUSES))
def test_a_gpu_grade_tells_the_same_root_cause(graders, name):
    """The emulator beside the GPU explains each case both engines found wrong: the same cause, the same facts."""
    assert_one_cause(graders("gpu")(SUBMISSIONS / name), name, every_case=False)
