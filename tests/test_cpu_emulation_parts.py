"""The CPU backend's pure parts: device-side extraction, shared-access instrumentation, student texts."""
import json

from conftest import SUBMISSIONS

from grader.execute.cpu.instrument import instrument
from grader.execute.cpu.messages import (
    describe_collision,
    describe_problem,
    describe_races,
    describe_unwritten_in_c,
    unstored_read_hint,
)
from grader.judge.findings import UNWRITTEN_READ
from grader.source.device_side import device_side

WITH_HOST = """#include <iostream>
#include <stdio.h>
#define TILE_SIZE 16
__device__ int launches;
const int WIDTH = 4;
int host_counter = 0;
std::string label = "x";
void basicSgemm(int m);
__device__ float twice(float x) { return 2 * x; }
__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) { C[0] = twice(A[0]); }
void basicSgemm(int m) { std::cout << m; mysgemm<<<1, 1>>>(m, m, m, 0, 0, 0); }
int main() { return 0; }
"""


def test_device_side_keeps_device_code_and_line_numbers():
    device = device_side(WITH_HOST)
    lines = device.split("\n")
    assert len(lines) == len(WITH_HOST.split("\n"))
    for kept in ("#include <stdio.h>", "#define TILE_SIZE 16", "__device__ int launches;", "const int WIDTH = 4;",
                 "__device__ float twice", "__global__ void mysgemm"):
        assert kept in device
    for dropped in ("<iostream>", "host_counter", "std::string", "void basicSgemm", "std::cout", "int main"):
        assert dropped not in device
    assert lines[9].startswith("__global__ void mysgemm")  # line 10, where the student wrote it


def test_a_file_without_host_code_is_unchanged(submission_source):
    source = submission_source("missing_use_barrier")
    assert device_side(source) == source


def test_shared_accesses_are_instrumented_by_kind():
    source = """__global__ void f(float *x) {
    __shared__ float s[4][4], t[8];
    s[0][1] = x[0];
    s[1][1] += 2;
    t[2]++;
    float y = s[0][0] * t[s[0][0] > 0];
    float *p = &s[0][0];
    float *row = s[1];
}"""
    out = instrument(source)
    assert out.count("\n") == source.count("\n")
    assert "CUDA_EMU_SHARE(s); CUDA_EMU_SHARE(t);" in out
    assert "CUDA_EMU_WRITE(s[0][1]) = CUDA_EMU_LOAD_AT(0, x, (0), (0), x[0])" in out  # a global load: site 0
    assert "CUDA_EMU_UPDATE(s[1][1]) += 2" in out and "CUDA_EMU_UPDATE(t[2])++" in out
    assert "CUDA_EMU_READ(s[0][0]) * CUDA_EMU_READ(t[CUDA_EMU_READ(s[0][0]) > 0])" in out
    assert "&s[0][0]" in out and "= s[1];" in out  # addresses and rows are not accesses


def test_stores_outside_shared_memory_are_marked_so_the_emulator_knows_who_stored_c():
    """Each access through a pointer parameter is a numbered site; an index X * S + Y (S a size parameter) gives
    the emulator X and S too, and a compound store is an update (a read of C before its store)."""
    source = """__global__ void f(int n, const float *A, float *C) {
    __shared__ float s[4];
    float acc[2];
    acc[0] = A[0];
    s[0] = acc[0];
    C[threadIdx.y * n + threadIdx.x] = s[0];
    C[1] += A[1];
    C[2]++;
}"""
    out = instrument(source)
    assert out.count("\n") == source.count("\n")
    assert ("CUDA_EMU_STORE_AT(1, C, (threadIdx.y), (n), C[threadIdx.y * n + threadIdx.x]) = CUDA_EMU_READ(s[0])"
            in out)
    assert "CUDA_EMU_UPDATE_AT(2, C, (0), (0), C[1]) += CUDA_EMU_LOAD_AT(3, A, (0), (0), A[1])" in out
    assert "CUDA_EMU_UPDATE_AT(4, C, (0), (0), C[2])++" in out
    assert "CUDA_EMU_WRITE(s[0]) = acc[0]" in out  # a shared store keeps its own wrapper
    # marked, but only stores into C are recorded; acc is no parameter, so no site
    assert "CUDA_EMU_STORE(acc[0]) = CUDA_EMU_LOAD_AT(0, A, (0), (0), A[0])" in out
    assert "STORE(A" not in out and "LOAD(acc" not in out and "_AT(5" not in out  # reads are not stores


def test_macro_barriers_keep_their_line(submission_source):
    """SYNC() expands to __syncthreads() at the line where SYNC() is written."""
    out = instrument(device_side(submission_source("good_tile32_macro_sync")))
    assert out.split("\n")[21].strip().endswith("SYNC();")


RACE = {"array": "As", "two_d": True, "row": 0, "column": 1, "store_line": 16, "store_thread": [1, 0, 0],
        "other_line": 20, "other_thread": [0, 0, 0], "block": [2, 3, 0]}


def test_a_store_before_the_reads_means_the_load_barrier_is_missing():
    [race] = describe_races([{**RACE, "kind": "store_after_read", "store_after_read": False}], 7, 100)
    assert race.fact.startswith("shared-memory race: thread (1, 0) stores As[0][1] at line 16 while thread (0, 0)")
    assert "line 20" in race.fact and "block (2, 3)" in race.fact
    assert "the barrier after loading the tiles is missing" in race.fix
    assert "differ" not in race.fact  # the shadow memory's explanation is better than the count


def test_a_store_after_the_reads_means_the_use_barrier_is_missing():
    race = {**RACE, "kind": "read_after_store", "store_after_read": True}
    [found] = describe_races([race], 0, 100)
    assert "thread (0, 0) reads As[0][1] at line 20 after thread (1, 0) stores As[0][1] at line 16" in found.fact
    assert "the barrier after using the tiles is missing" in found.fix


def test_outputs_that_depend_on_thread_order_are_told_without_a_barrier_the_emulator_never_saw():
    [found] = describe_races([], 12, 100)
    assert "12 of 100 elements of C differ" in found.fact
    assert "saw no two threads touch one shared entry" in found.fact
    assert found.fix == "" and "barrier" not in found.fact.replace("between barriers", "")
    assert describe_races([], 0, 100) == []
    # Two threads storing one element of C explain the difference: that finding says it instead.
    assert describe_races([], 12, 100, collisions=1) == []


def test_two_threads_storing_one_tile_entry_is_an_index_problem_not_a_barrier():
    race = {**RACE, "kind": "store_after_store", "store_after_read": False, "other_line": 16,
            "store_thread": [0, 1, 0], "other_thread": [0, 0, 0]}
    [found] = describe_races([race], 0, 100)
    assert found.fact == "threads (0, 0) and (0, 1) of block (2, 3) both store As[0][1] (line 16) in the same phase"
    assert found.fix.startswith("check the index of your store to As at line 16") and "__syncthreads" not in found.fix


COLLISION = {"event": "c_collision", "row": 0, "column": 3, "line": 17, "thread": [0, 3, 0], "block": [0, 0, 0],
             "other_line": 17, "other_thread": [3, 0, 0], "other_block": [0, 0, 0]}


def test_two_threads_storing_one_element_of_c_are_named():
    found = describe_collision(COLLISION, 1)
    assert found.fact == "threads (3, 0) and (0, 3) of block (0, 0) both store C[0][3] (line 17)"
    assert found.fix.startswith("check the index of your store to C (line 17)") and "barrier" not in found.fix
    across = describe_collision({**COLLISION, "block": [1, 0, 0], "thread": [0, 0, 0]}, 40)
    assert across.fact == ("thread (3, 0) of block (0, 0) and thread (0, 0) of block (1, 0) both store C[0][3] "
                           "(line 17); 40 elements of C are stored by more than one thread")


def test_threads_that_differ_only_in_y_point_at_the_block_shape():
    found = describe_collision({**COLLISION, "thread": [3, 1, 0]}, 16)
    assert found.fact.endswith("the two threads differ only in threadIdx.y")
    assert "blocks of tile × tile threads, in threadIdx.x and threadIdx.y" in found.fix
    assert describe_collision({**COLLISION, "thread": [5, 0, 0]}, 16).fact.endswith("differ only in threadIdx.x")
    elsewhere = describe_collision({**COLLISION, "thread": [3, 1, 0], "block": [1, 0, 0]}, 16)
    assert "differ only" not in elsewhere.fact  # threads of two blocks: an index, not a block shape


READ_INTO_C = {"event": "unwritten_in_c", "elements": 12, "row": 2, "column": 5, "line": 24, "thread": [5, 2, 0],
               "block": [0, 1, 0], "array": "Bs", "two_d": True, "entry_row": 3, "entry_column": 5, "read_line": 21,
               "read_thread": [5, 3, 0], "read_block": [0, 1, 0]}


def test_a_tile_entry_read_before_any_thread_stored_it_is_unsafe_where_its_value_reaches_c():
    found = describe_unwritten_in_c(READ_INTO_C)
    assert found.fact.startswith("Bs[3][5] is read at line 21 (thread (5, 3) of block (0, 1)) before any thread of "
                                 "the block stored it")
    assert found.fact.endswith("that value reaches C: C[2][5] (stored at line 24 by thread (5, 2) of block (0, 1)) is "
                               "computed from it; 12 elements of C are")
    assert found.unsafe == UNWRITTEN_READ
    assert found.fix.startswith("check the loads into Bs") and "add" not in found.fix


def test_a_value_whose_read_the_harness_could_not_name_is_told_by_its_store_and_the_first_read():
    unnamed = {key: READ_INTO_C[key] for key in ("event", "elements", "row", "column")}
    first = {"event": "unstored_read", "array": "As", "two_d": True, "row": 0, "column": 1, "line": 20,
             "thread": [0, 0, 0], "block": [0, 0, 0]}
    found = describe_unwritten_in_c(unnamed, first)
    assert found.fact.startswith("C[2][5] is computed from a shared entry no thread of its block stored; 12 elements")
    assert found.fix.startswith("check the loads into As") and found.unsafe == UNWRITTEN_READ


def test_a_read_whose_value_reaches_no_element_of_c_is_a_hint_in_words_for_every_case():
    read = {"event": "unstored_read", "array": "subB", "two_d": True, "row": 0, "column": 3, "line": 21,
            "thread": [3, 0, 0], "block": [4, 0, 0]}
    hint = unstored_read_hint(read)
    assert hint.startswith("line 21 reads entries of subB that no thread of the block stored")
    assert "no point depends on them" in hint and "store 0 into subB" in hint
    assert "thread" not in hint.replace("no thread of the block", "")  # the same words in every case it shows in
    assert unstored_read_hint({**read, "thread": [0, 9, 0], "block": [1, 1, 0]}) == hint


def test_fault_texts_name_the_buffer_the_side_and_the_thread():
    text = describe_problem({"event": "fault", "what": "out_of_bounds", "buffer": "B", "access": "read",
                             "side": "after", "elements": 0, "thread": [3, 15, 0], "block": [4, 0, 0]}).fact
    assert text.startswith("out-of-bounds read of B: thread (3, 15) of block (4, 0) touched B just past the end")
    past_b = describe_problem({"event": "fault", "what": "out_of_bounds", "buffer": "B", "access": "read",
                               "side": "after", "elements": 101, "thread": [0, 7, 0], "block": [0, 0, 0],
                               "line": 15}, shape=(300, 48, 64))
    assert past_b.fact == ("out-of-bounds read of B at line 15: thread (0, 7) of block (0, 0) reads B[k=66][col=5] "
                           "(element 3173) past B's end: B is k×n = 64×48, row stride n = 48")
    assert past_b.fix == ("check the index of the read of B at line 15: B is k×n, so its element [r][c] is "
                          "B[r * n + c], with r < k and c < n")
    text = describe_problem({"event": "divergence", "kind": "exited", "line": 14, "thread": [0, 0, 0],
                             "other_line": 0, "other_thread": [5, 3, 0], "block": [0, 4, 0]}).fact
    assert "thread (0, 0) waits at the __syncthreads() on line 14, but thread (5, 3) has already returned" in text


def test_every_corpus_file_instruments_without_losing_lines():
    for folder in (p for p in SUBMISSIONS.iterdir() if p.is_dir()):
        source = (folder / "kernel.cu").read_text(errors="replace")
        assert instrument(device_side(source)).count("\n") == source.count("\n"), folder.name


def test_an_unbraced_body_is_marked_with_its_own_line():
    """A fault in the load under `if (...)` is told at the load's line, not the if's (b_wrong_stride: line 19)."""
    source = "__global__ void f(float *C, const float *B, int k) {\n    if (k > 0)\n        C[0] = B[k];\n" \
             "    else\n        C[0] = 0;\n    for (int i = 0; i < k; ++i)\n        C[i] = 1;\n}"
    out = instrument(source)
    assert out.count("\n") == source.count("\n")
    assert ("        { CUDA_EMU_AT(__LINE__); CUDA_EMU_STORE_AT(0, C, (0), (0), C[0]) = "
            "CUDA_EMU_LOAD_AT(1, B, (0), (0), B[k]); }") in out
    assert "        { CUDA_EMU_AT(__LINE__); CUDA_EMU_STORE_AT(2, C, (0), (0), C[0]) = 0; }" in out
    assert ("for (int i = 0; i < k; ++i)\n        { CUDA_EMU_AT(__LINE__); "
            "CUDA_EMU_STORE_AT(3, C, (0), (0), C[i]) = 1; }") in out


def test_extern_shared_arrays_become_pointers_to_the_one_dynamic_buffer():
    source = """extern __shared__ float tiles[];
__global__ void f(float *x) {
    extern __shared__ __align__(16) float more[];
    tiles[3] = more[1];
}"""
    out = instrument(source)
    assert out.count("\n") == source.count("\n")
    assert "__shared__ float *const tiles   = CUDA_EMU_DYNAMIC_SHARED(tiles);" in out
    assert "float *const more   = CUDA_EMU_DYNAMIC_SHARED(more);" in out and "extern" not in out
    assert "CUDA_EMU_WRITE(tiles[3]) = CUDA_EMU_READ(more[1])" in out  # still watched for races
    assert "CUDA_EMU_SHARE" not in out


def test_a_warp_divergence_names_the_primitive_the_threads_and_what_the_missing_one_does():
    problem = {"event": "warp_divergence", "primitive": "__ballot_sync", "line": 30, "mask": 0xFFFFFFFF,
               "arrived": 12, "thread": [0, 2, 0], "other_thread": [12, 2, 0], "other_state": "collective",
               "other_line": 34, "other_primitive": "__any_sync", "block": [1, 0, 0]}
    found = describe_problem(problem)
    assert found.fact == ("warp divergence in block (1, 0): thread (0, 2) (with 11 other threads of its warp) calls "
                          "__ballot_sync at line 30 with mask 0xffffffff, naming all 32 threads of its warp, but "
                          "thread (12, 2) of that warp waits at __any_sync on line 34")
    assert "do not return early" in found.fix
    half = describe_problem({**problem, "mask": 0xFFFF, "arrived": 1, "other_state": "exited"}).fact
    assert "thread (0, 2) calls" in half and "naming the threads of mask 0x0000ffff" in half
    assert half.endswith("has already returned")


# --- sites: what the emulator's reports refer to, found in the source (issue 42) -----------------------------------

SITES = """__global__ void f(int m, int n, int k, const float *A, const float *B, float *C) {
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    int tx = threadIdx.x;
    float a = (row < m && tx < k) ? A[row * k + p * 16 + tx] : 0.0f;
    if (col >= n || row >= k) a = 0; else a = B[col + row * n];
    float b = B[i++ * n + col];
    C[(row) * n + col] += a;
}"""


def test_an_index_row_times_size_plus_column_is_a_site_with_its_guard():
    from grader.execute.cpu.instrument import instrumented

    out, found = instrumented(SITES)
    load_a, load_b, load_side_effect, update = found.sites
    assert (load_a.line, load_a.matrix, load_a.access, load_a.row, load_a.stride, load_a.column) == \
        (4, "A", "load", "row", "k", "p * 16 + tx")
    assert load_a.guard == "row < m && tx < k" and load_a.keeps("row", "m") and not load_a.keeps("p * 16 + tx", "k")
    assert load_a.row_line == 2  # where row is declared
    # `Y + X * S` on an else branch: the negated `col >= n || row >= k` keeps both
    assert (load_b.row, load_b.stride, load_b.column) == ("row", "n", "col") and load_b.keeps("col", "n")
    assert load_b.guard == "!(col >= n || row >= k)"
    assert not load_side_effect.indexed  # i++ must not run twice: the plain site wrapper, no X and S
    assert "CUDA_EMU_LOAD_AT(2, B, (0), (0), B[i++ * n + col])" in out
    assert update.access == "update" and update.operator == "+=" and update.row == "(row)"
    assert "CUDA_EMU_UPDATE_AT(3, C, ((row)), (n), C[(row) * n + col]) += a" in out


def test_the_tile_loop_is_marked_and_knows_the_sizes_its_condition_reads(submission_source):
    from grader.execute.cpu.instrument import instrumented

    out, found = instrumented(device_side(submission_source("truncated_phases")))
    loop = found.tile_loop
    assert (loop.line, loop.end_line, loop.condition) == (14, 24, "p < numPhases") and "k" in loop.names
    assert "CUDA_EMU_TILE_LOOP(); CUDA_EMU_AT(__LINE__); for (int p = 0; p < numPhases; ++p) { CUDA_EMU_TRIP();" in out


def test_a_report_naming_a_site_the_grader_never_numbered_is_refused():
    from grader.execute.protocol import harness_report

    index = {"event": "index", "site": 3, "matrix": "B", "row": 63, "column": 67, "stride": 67,
             "thread": [3, 15, 0], "block": [4, 0, 0]}
    assert harness_report(json.dumps(index)) == index
    for forged in ({**index, "site": 256}, {**index, "site": -1}, {**index, "matrix": "D"},
                   {**index, "expression": "B[0]"}, {"event": "tile_loop", "fewest": -1, "most": 3, "threads": 1},
                   {"event": "c_read", "site": 0, "row": 0, "column": 0, "thread": [0, 0, 0], "block": [0, 0]}):
        assert harness_report(json.dumps(forged)) is None, forged


# --- evidence: the words, from reports and sites ------------------------------------------------------------------


def program_of(source: str, tile: int = 16, x: str = "columns"):
    from grader.execute.cpu.evidence import Program
    from grader.execute.cpu.instrument import sites_of

    return Program(sites_of(source), tile, (("A", "A"), ("B", "B"), ("C", "C"), ("m", "m"), ("n", "n"), ("k", "k")), x)


def test_an_index_off_its_matrix_is_told_as_the_element_meant_with_the_bound_its_guard_lacks(submission_source):
    from grader.execute.cpu.evidence import off_matrix

    program = program_of(submission_source("b_column_unbounded"))
    report = {"site": 1, "matrix": "B", "row": 2, "column": 70, "stride": 67, "thread": [6, 2, 0], "block": [4, 0, 0]}
    [found] = off_matrix([report, {**report, "site": 200}], program, (64, 67, 64))  # no site 200: not told
    assert found.fact == ("thread (6, 2) of block (4, 0) reads B[2][70] (B[(p * TILE_SIZE + ty) * n + col] at line "
                          "19): column 70 is past B's last column (n = 67)")
    assert found.fix.startswith("line 19 reads B[(p * TILE_SIZE + ty) * n + col] where `p * TILE_SIZE + ty < k`, which "
                                "does not keep col < n")
    assert off_matrix([{**report, "column": 3}], program, (64, 67, 64)) == []  # nothing off: no such report
    [stride] = off_matrix([{**report, "column": 3, "stride": 64}], program, (64, 67, 64))
    assert "in rows n = 64 long, where B's rows are n = 67 long: it reaches B[1][64]" in stride.fact
    # a fault at that access is told by it; one at no site, by where it landed
    fault = {"event": "fault", "what": "out_of_bounds", "buffer": "B", "access": "read", "side": "after", "elements": 0,
             "line": 19, **report, "row": 63, "column": 67}
    assert describe_problem(fault, (64, 67, 64), program).fact.startswith(
        "out-of-bounds read of B at line 19: thread (6, 2) of block (4, 0) reads B[63][67]")
    del fault["site"]
    assert "reads B[k=64][col=0] (element 4288) past B's end" in describe_problem(fault, (64, 67, 64), program).fact


def test_the_trip_count_is_named_by_the_count_it_matches(submission_source):
    from grader.execute.cpu.evidence import trip_count

    program = program_of(device_side(submission_source("truncated_phases")))
    found = trip_count({"fewest": 10, "most": 10, "threads": 4096}, program, (300, 40, 170))
    assert found.fact.startswith("the tile loop at line 14 runs floor(k / 16) = 10 times here")
    assert trip_count({"fewest": 11, "most": 11, "threads": 1}, program, (300, 40, 170)) is None  # ceil(170 / 16)
    assert trip_count({"fewest": 0, "most": 10, "threads": 9}, program, (300, 40, 170)) is None  # not one count


def test_a_store_at_the_transposed_element_names_the_line_of_the_row_and_the_matching_launch(submission_source):
    from grader.execute.cpu.evidence import transposed

    program = program_of(submission_source("row_from_thread_x"))
    report = {"stores": 4096, "as_launched": 64, "transposed": 4096, "thread": [1, 0, 0], "block": [0, 0, 0], "row": 1,
              "column": 0, "line": 23}
    found = transposed(report, program)
    assert found.fix.startswith("line 10 takes the row from threadIdx.x: this lab launches x over C's columns")
    assert found.notes == (("launch_matches", "kernel.launch: {x: rows}"),)
    assert transposed({**report, "transposed": 4000}, program) is None  # not every store: another mistake


def test_a_race_across_trips_is_the_barrier_ending_the_loop_body_not_one_between_the_lines(submission_source):
    from grader.execute.cpu.instrument import sites_of

    loop = sites_of(submission_source("missing_use_barrier")).tile_loop
    race = {**RACE, "kind": "read_after_store", "store_after_read": True, "store_line": 16, "other_line": 21,
            "store_thread": [0, 0, 0], "other_thread": [1, 0, 0], "store_trip": 2, "other_trip": 1, "barrier_line": 18}
    [found] = describe_races([race], 0, 100, loop=loop)
    assert ("thread (0, 0) already stores As[0][1] for the next tile (line 16, trip 2 of the tile loop at line 13)"
            in found.fact)
    assert "the __syncthreads() at line 18 precedes the reads" in found.fact and "between them" not in found.fact
    assert "the barrier after using the tiles is missing" in found.fix
    [same] = describe_races([{**race, "store_trip": 1}], 0, 100, loop=loop)
    assert "for the same tile (trip 1" in same.fact and "the barrier after loading the tiles is missing" in same.fix


def test_the_sites_a_build_numbered_are_those_the_judge_reads_without_numbering_them_again(submission_source,
                                                                                           monkeypatch):
    """A grade's build of the emulation (on a thread of the parent's) instruments the device side, sites numbered,
    placing its objects in sections; the judge's reading of the emulator's reports asks for the sites of that same
    text: it gets the build's (the same as its own numbering would give, sections or not), not a second pass."""
    from grader.execute.cpu import instrument as instrumenting

    device = device_side(submission_source("truncated_phases")) + "\n// a text of this test's own"
    text, built = instrumenting.instrumented(device, "cuda_emu_statics_test")
    assert "cuda_emu_statics_test" in text and built.sites and built.tile_loop is not None
    passes = []
    monkeypatch.setattr(instrumenting, "instrumented", lambda *args: passes.append(args) or ("", None))
    assert instrumenting.sites_of(device) == built and not passes
    monkeypatch.undo()
    instrumenting._sites.clear()  # numbered afresh, without sections: the same sites
    assert instrumenting.sites_of(device) == built
