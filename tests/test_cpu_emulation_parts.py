"""The CPU backend's pure parts: device-side extraction, shared-access instrumentation, student texts."""
from conftest import SUBMISSIONS

from grader.execute.cpu.instrument import instrument
from grader.execute.cpu.messages import (
    describe_collision,
    describe_problem,
    describe_races,
    describe_unstored_read,
)
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


def test_a_tile_entry_read_before_any_thread_stored_it_is_named():
    found = describe_unstored_read({"event": "unstored_read", "array": "Bs", "two_d": True, "row": 3, "column": 5,
                                    "line": 21, "thread": [5, 3, 0], "block": [0, 1, 0]})
    assert found.fact.startswith("Bs[3][5] is read at line 21 (thread (5, 3) of block (0, 1)) before any thread of "
                                 "the block stored it")
    assert found.fix.startswith("check the loads into Bs") and "add" not in found.fix


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
    assert ("for (int i = 0; i < k; ++i)\n        { CUDA_EMU_AT(__LINE__); CUDA_EMU_STORE_AT(3, C, (0), (0), C[i]) = 1; }"
            in out)


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
