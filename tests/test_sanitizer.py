"""compute-sanitizer logs into hazards and sentences: hand-written fixtures, and logs captured on an H100."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hardware import needs_cxx

from grader.diagnose.sanitizer_log import (
    API_ERROR,
    DEVICE_ERROR,
    DIVERGENT_BARRIER,
    INVALID_ACCESS,
    INVALID_BARRIER,
    OUT_OF_BOUNDS,
    RACE,
    Access,
    Location,
    describe,
    parse,
    syncthreads_lines,
)

LOGS = Path(__file__).resolve().parent / "sanitizer_logs"
ALL_LOGS = sorted(LOGS.glob("*.log"))
A, B, C = 0x7F3A5C000000, 0x7F3A5C000800, 0x7F3A5C001000
BUFFERS = {"A": (A, 1600), "B": (B, 1600), "C": (C, 1600)}
KERNEL = (LOGS / "kernel.cu").read_text()


def log(name: str):
    return parse(name.split("_")[0], (LOGS / name).read_text())


def at(line: int, file: str = "kernel.cu") -> tuple[Location, ...]:
    return (Location(file, line),)


# --- memcheck -------------------------------------------------------------------------------------


def test_out_of_bounds_reads_of_a():
    report = log("memcheck_oob_read_A.log")
    assert report.complete and report.error_count == 4 and not report.target_failed
    assert [h.kind for h in report.hazards] == [OUT_OF_BOUNDS] * 3 + [API_ERROR]
    first = report.hazards[0]
    assert first.accesses == [Access("read", at(14), (15, 3, 0))]
    assert (first.block, first.thread, first.memory, first.size) == ((0, 1, 0), (15, 3, 0), "global", 4)
    assert (first.address, first.allocation, first.distance) == (A + 1644, (A, 1600), 44)
    assert report.hazards[2].block == (1, 1, 0)
    assert report.hazards[3].accesses == []
    assert describe(report, BUFFERS) == [
        "out-of-bounds read of A at line 14 in block (0, 1): 44 bytes after the end of A"]
    assert describe(report) == ["out-of-bounds read of global memory at line 14 in block (0, 1)"]


def test_out_of_bounds_writes_of_c_in_the_split_format():
    report = log("memcheck_oob_write_C_split.log")
    assert report.complete and report.error_count == 2  # the unprefixed fake "0 errors" is program output
    assert [h.kind for h in report.hazards] == [OUT_OF_BOUNDS, OUT_OF_BOUNDS]
    assert report.hazards[0].accesses == [Access("write", at(22), (4, 3, 0))]
    assert (report.hazards[0].address, report.hazards[0].distance) == (C + 1600, 0)
    assert report.hazards[1].address == C + 1644
    assert describe(report, BUFFERS) == [
        "out-of-bounds write to C at line 22 in block (1, 1): right after the end of C"]


def test_shared_memory_and_frames_outside_the_students_file():
    report = log("memcheck_shared_and_frames.log")
    assert report.complete and report.error_count == 3
    shared, through_header, header_only = report.hazards
    assert (shared.kind, shared.memory, shared.address, shared.block) == (OUT_OF_BOUNDS, "shared", 0x400, (2, 0, 0))
    assert through_header.accesses[0].frames == (Location("sm_32_intrinsics.hpp", 123), Location("kernel.cu", 15))
    assert header_only.accesses[0].frames == (Location("sm_32_intrinsics.hpp", 123),)
    assert describe(report, BUFFERS) == [
        "out-of-bounds write to shared memory at line 14 in block (2, 0)",
        "out-of-bounds read of B at line 15 in block (2, 0): 64 bytes after the end of B",
    ]
    # With the launch's shape, the read past B's end is placed in B's rows (B here is 20×20 floats).
    assert describe(report, BUFFERS, shape=(20, 20, 20))[1] == (
        "out-of-bounds read of B at line 15 in block (2, 0): 64 bytes after the end of B, B[k=20][col=16] "
        "(element 416): B is k×n = 20×20, row stride n = 20")
    assert describe(report, BUFFERS, shape=(20, 30, 20))[1].endswith("64 bytes after the end of B")  # not B's size


def test_without_line_information_the_student_gets_the_count():
    report = log("memcheck_no_lineinfo.log")
    assert report.complete and report.error_count == 1
    assert report.hazards[0].kind == OUT_OF_BOUNDS and report.hazards[0].accesses[0].frames == ()
    assert describe(report, BUFFERS) == [
        "compute-sanitizer memcheck found 1 error, but none of them points at a line of kernel.cu"]


def test_a_truncated_log_is_incomplete_but_keeps_what_it_read():
    report = log("memcheck_truncated.log")
    assert not report.complete and report.error_count is None
    assert [h.kind for h in report.hazards] == [OUT_OF_BOUNDS, INVALID_ACCESS]
    assert report.hazards[1].accesses == [Access("read")]  # its location was cut off
    assert describe(report, BUFFERS) == [
        "out-of-bounds read of A at line 14 in block (0, 1): 44 bytes after the end of A",
        "the memcheck run did not complete, so it may have missed problems",
    ]


def test_a_launch_the_tool_did_not_track_makes_the_report_incomplete():
    report = log("memcheck_untracked.log")
    assert report.error_count == 0 and not report.complete
    assert describe(report) == ["the memcheck run did not complete, so it may have missed problems"]


@pytest.mark.parametrize("name", ["memcheck_clean.log", "racecheck_clean.log", "synccheck_clean.log"])
def test_clean_logs(name):
    report = log(name)
    assert report.complete and report.error_count == 0 and report.hazards == []
    assert describe(report, BUFFERS) == []


def test_racecheck_summary_counts():
    report = log("racecheck_clean.log")
    assert (report.error_count, report.warning_count) == (0, 0)


# --- racecheck ------------------------------------------------------------------------------------


def test_analysis_report_of_a_missing_load_barrier():
    report = log("racecheck_analysis_load_barrier.log")
    assert report.complete and (report.error_count, report.warning_count) == (2, 0)
    assert [h.kind for h in report.hazards] == [RACE, RACE]
    assert report.hazards[0].accesses == [Access("write", at(14)), Access("read", at(18), hazards=3840)]
    assert report.hazards[1].lines() == (15, 18)
    # The kernel of this log has only the barrier after using the tiles (line 19).
    assert describe(report, barrier_lines=[19]) == [
        "shared-memory race between the store at line 14 and the read at line 18: "
        "a __syncthreads() is missing between them (the barrier after loading the tiles)",
        "shared-memory race between the store at line 15 and the read at line 18: "
        "a __syncthreads() is missing between them (the barrier after loading the tiles)",
    ]


def test_without_barrier_lines_a_store_before_the_read_is_ambiguous():
    report = log("racecheck_analysis_load_barrier.log")
    assert describe(report)[0] == (
        "shared-memory race between the store at line 14 and the read at line 18: a __syncthreads() is missing "
        "between them (after loading the tiles) or after the read, before the next tile is stored "
        "(after using the tiles)")


def test_hazard_report_of_a_missing_use_barrier():
    report = log("racecheck_hazard_use_barrier.log")
    assert report.complete and (report.error_count, report.warning_count) == (3, 1)
    assert [(h.hazard_type, h.severity, h.block, h.address) for h in report.hazards] == [
        ("WAR", "error", (0, 0, 0), 0x4), ("RAW", "error", (1, 0, 0), 0x8),
        ("WAR", "error", (0, 0, 0), 0x404), ("RAW", "warning", (0, 0, 0), 0x408)]
    assert report.hazards[0].accesses == [Access("read", at(18), (5, 0, 0)), Access("write", at(14), (1, 0, 0))]
    # The kernel of this log has only the barrier after loading the tiles (line 16).
    assert describe(report, barrier_lines=[16]) == [
        "shared-memory race between the store at line 14 and the read at line 18: a __syncthreads() is missing "
        "after the read, before the next tile is stored (the barrier after using the tiles)",
        "shared-memory race between the store at line 15 and the read at line 18: a __syncthreads() is missing "
        "after the read, before the next tile is stored (the barrier after using the tiles)",
    ]


def test_legacy_format_and_a_write_write_hazard():
    report = log("racecheck_legacy_all.log")
    assert report.complete and (report.error_count, report.warning_count) == (1, 1)
    race, waw = report.hazards
    assert race.accesses == [Access("write", at(14)), Access("read", at(18), hazards=6144)]
    assert (waw.hazard_type, waw.severity, waw.block) == ("WAW", "warning", (0, 0, 0))
    assert waw.accesses == [Access("write", at(14), (31, 0, 0)), Access("write", at(14), (0, 0, 0))]
    assert describe(report, barrier_lines=[19]) == [
        "shared-memory race between the store at line 14 and the read at line 18: "
        "a __syncthreads() is missing between them (the barrier after loading the tiles)",
        "shared-memory race at line 14: several threads of a block store to the same shared-memory element "
        "(check the tile indices)",
    ]


@pytest.mark.parametrize(("store", "read", "barriers", "missing"), [
    (14, 18, [19], "loading"), (14, 18, [16], "using"), (14, 18, [16, 19], "using"),
    (24, 18, None, "using"), (24, 18, [30], "using"), (24, 18, [20], "loading"),
])
def test_which_barrier_is_missing(store, read, barriers, missing):
    text = (f"========= Error: Race reported between Write access at k+0x10 in kernel.cu:{store}\n"
            f"=========     and Read access at k+0x20 in kernel.cu:{read} [4 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    (sentence,) = describe(parse("racecheck", text), barrier_lines=barriers)
    assert sentence.endswith(f"(the barrier after {missing} the tiles)")


def test_an_analysis_report_pairs_its_first_line_with_each_other_line():
    # As in NVIDIA's nsight-training racecheck example: one read raced by several writes.
    text = ("========= Error: Race reported between Read access at k+0x60 in kernel.cu:18\n"
            "=========     and Write access at k+0x10 in kernel.cu:14 [1088 hazards]\n"
            "=========     and Write access at k+0x20 in kernel.cu:15 [64 hazards]\n"
            "=========     and Read access at k+0x70 in kernel.cu:17 [2 hazards]\n"
            "=========\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    report = parse("racecheck", text)
    assert report.hazards[0].lines() == (18, 14, 15, 17)
    assert [a.hazards for a in report.hazards[0].accesses] == [None, 1088, 64, 2]
    assert describe(report, barrier_lines=[19]) == [
        "shared-memory race between the store at line 14 and the read at line 18: "
        "a __syncthreads() is missing between them (the barrier after loading the tiles)",
        "shared-memory race between the store at line 15 and the read at line 18: "
        "a __syncthreads() is missing between them (the barrier after loading the tiles)",
    ]


def test_races_outside_the_students_file_are_not_reported():
    text = ("========= Error: Race reported between Write access at k+0x10 in helpers.cuh:3\n"
            "=========     and Read access at k+0x20 in helpers.cuh:9 [4 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    assert describe(parse("racecheck", text)) == [
        "compute-sanitizer racecheck found 1 error, but none of them points at a line of kernel.cu"]


def test_syncthreads_lines_of_the_fixture_kernel():
    assert syncthreads_lines(KERNEL) == [16, 19]
    commented = KERNEL.replace("        __syncthreads();\n    }", "        // __syncthreads();\n    }")
    assert syncthreads_lines(commented) == [16]
    macro = "#define SYNC() __syncthreads()\n__global__ void k() {\n    SYNC();\n#if 0\n__syncthreads();\n#endif\n}\n"
    assert syncthreads_lines(macro) == [3]


# --- synccheck ------------------------------------------------------------------------------------


def test_divergent_barrier_in_a_block():
    report = log("synccheck_divergent_block.log")
    assert report.complete and report.error_count == 48
    assert [(h.kind, h.scope, h.block) for h in report.hazards] == [
        (DIVERGENT_BARRIER, "block", (1, 1, 0)), (DIVERGENT_BARRIER, "block", (1, 1, 0)),
        (DIVERGENT_BARRIER, "block", (0, 1, 0))]
    assert report.hazards[0].accesses == [Access(None, at(19), (4, 4, 0))]
    assert describe(report) == [
        "__syncthreads() at line 19 is reached by only some threads of block (1, 1) (divergent barrier)"]


def test_barrier_in_a_helper_and_invalid_arguments():
    report = log("synccheck_helper_warp.log")
    assert report.complete and report.error_count == 2
    divergent, invalid = report.hazards
    assert (divergent.kind, divergent.scope, divergent.block) == (DIVERGENT_BARRIER, "warp", (0, 1, 0))
    assert divergent.accesses[0].frames == (Location("kernel.cu", 4), Location("kernel.cu", 19))
    assert invalid.kind == INVALID_BARRIER
    assert invalid.accesses[0].frames == (Location("sm_30_intrinsics.hpp", 110), Location("kernel.cu", 21))
    assert describe(report) == [
        "__syncthreads() at line 4 (called from line 19) is reached by only some threads of a warp in block (0, 1) "
        "(divergent barrier)",
        "the barrier at line 21 is called with invalid arguments in block (0, 0)",
    ]


# --- robustness ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_without_its_summary_every_log_is_incomplete(path):
    tool = path.name.split("_")[0]
    text = "\n".join(line for line in path.read_text().splitlines() if "SUMMARY" not in line)
    report = parse(tool, text)
    assert not report.complete and report.error_count is None
    assert describe(report, BUFFERS)[-1] == f"the {tool} run did not complete, so it may have missed problems"


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_every_cut_of_every_log_parses(path):
    tool, text = path.name.split("_")[0], path.read_text()
    for end in range(0, len(text), 7):
        report = parse(tool, text[:end])
        describe(report, BUFFERS, barrier_lines=[16])
        if "SUMMARY" not in text[:end]:
            assert not report.complete


@pytest.mark.parametrize("text", [
    "", "\n\n", "Segmentation fault (core dumped)\n", "=========\n", "========= ERROR SUMMARY: lots of errors\n",
    "========= RACECHECK SUMMARY: unknown\n", "ERROR SUMMARY: 0 errors\n",
    "========= Invalid __global__ read of size 4 bytes\n=========     at\n=========     by thread (1,2) in block\n",
    "========= Error: Race reported between Write access at\n=========     and Read access at [x hazards]\n",
])
def test_malformed_logs_are_incomplete(text):
    for tool in ("memcheck", "racecheck", "synccheck"):
        report = parse(tool, text)
        assert not report.complete and report.error_count is None
        describe(report, BUFFERS)


def test_unknown_tool():
    with pytest.raises(ValueError, match="initcheck"):
        parse("initcheck", "")


def test_summaries_of_several_processes_add_up_and_a_forged_zero_hides_nothing():
    text = ("========= ERROR SUMMARY: 0 errors\n"
            + (LOGS / "memcheck_oob_read_A.log").read_text())
    assert parse("memcheck", text).error_count == 4


def test_a_custom_prefix():
    text = (LOGS / "synccheck_divergent_block.log").read_text().replace("=========", "@@")
    assert not parse("synccheck", text).complete
    report = parse("synccheck", text, prefix="@@")
    assert report.complete and len(report.hazards) == 3


def test_an_unknown_located_error_is_a_device_error():
    text = ("========= Warp Illegal Address\n"
            "=========     at mysgemm+0x2a0 in kernel.cu:22\n"
            "=========     by thread (0,0,0) in block (1,0,0)\n"
            "=========\n"
            "========= Some note without a location\n"
            "=========\n"
            "========= ERROR SUMMARY: 1 error\n")
    report = parse("memcheck", text)
    assert [h.kind for h in report.hazards] == [DEVICE_ERROR]
    assert describe(report) == ["the kernel stopped with a device error at line 22 in block (1, 0)"]


def test_sentences_are_deduplicated_and_capped():
    records = []
    for line in range(30, 40):
        for thread in range(3):
            records.append("========= Invalid __global__ read of size 4 bytes\n"
                           f"=========     at mysgemm+0x10 in kernel.cu:{line}\n"
                           f"=========     by thread ({thread},0,0) in block (0,0,0)\n"
                           "=========     Address 0x10 is out of bounds\n=========\n")
    report = parse("memcheck", "".join(records) + "========= ERROR SUMMARY: 30 errors\n")
    assert len(report.hazards) == 30
    sentences = describe(report, limit=4)
    assert sentences == [f"out-of-bounds read of global memory at line {n} in block (0, 0)" for n in range(30, 34)] + [
        "... and 6 more not shown"]


def test_nothing_but_numbers_and_the_students_file_reach_the_student():
    for path in ALL_LOGS:
        report = parse(path.name.split("_")[0], path.read_text())
        for sentence in describe(report, BUFFERS, barrier_lines=[16], limit=100):
            for leak in ("/tmp", "/home", "/usr", "mysgemm", "tile_barrier", "cuCtx", "cudaError", "Host Frame",
                         "0x", "hpp", "python", "libcuda"):
                assert leak not in sentence, (path.name, sentence)


CAPTURED = Path(__file__).parent / "sanitizer_logs" / "captured"


@pytest.mark.parametrize("name, expected", [
    ("missing_load_barrier.racecheck", "store at line 17 and the read at line 20: a __syncthreads() is missing "
                                       "between them (the barrier after loading the tiles)"),
    ("missing_use_barrier.racecheck", "store at line 16 and the read at line 21: a __syncthreads() is missing "
                                      "after the read, before the next tile is stored (the barrier after using"),
    ("no_bounds_checks.memcheck", "out-of-bounds read of A at line 15 in block (0, 1)"),
])
def test_logs_captured_on_an_h100_give_the_expected_sentence(name, expected):
    text = (CAPTURED / f"{name}.log").read_text()
    submission = name.split(".")[0]
    source = (Path(__file__).parent / "submissions" / submission / "kernel.cu").read_text()
    buffers = next((json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("SGEMM_GRADER_BUFFERS ")), None)
    sentences = describe(parse(name.split(".")[1], text), buffers and {k: tuple(v) for k, v in buffers.items()},
                         barrier_lines=syncthreads_lines(source))
    assert any(expected in sentence for sentence in sentences), sentences


@pytest.mark.parametrize("name", ["good_basic.racecheck", "good_basic.memcheck"])
def test_clean_captured_logs_say_nothing(name):
    report = parse(name.split(".")[1], (CAPTURED / f"{name}.log").read_text())
    assert report.complete and report.error_count == 0 and describe(report) == []


# --- the launch program and the verdict it allows ---------------------------------------------------------


@needs_cxx
def test_the_launch_program_builds_and_says_when_it_did_not_launch(tmp_path):
    """Without a module it can load (or without a driver, as in CI) it reports why and exits 3: never a launch."""
    import os
    import subprocess

    from grader.contract import KernelContract
    from grader.diagnose.launcher import launcher
    from grader.diagnose.run import launch_command
    from grader.execute.protocol import decode

    program = launcher(tmp_path / "cache")
    assert launcher(tmp_path / "cache") == program  # built once
    (tmp_path / "kernel.cubin").write_bytes(b"not a module")
    events_read, events_write = os.pipe()
    control_read, control_write = os.pipe()
    command = launch_command(program, tmp_path / "kernel.cubin", KernelContract(), 16, (19, 21, 50))
    finished = subprocess.run([*command, str(events_write), str(control_read)], pass_fds=(events_write, control_read),
                              timeout=60, check=False)
    os.close(events_write)
    with os.fdopen(events_read, "rb") as events:
        lines = events.read().splitlines()
    assert finished.returncode == 3
    assert [decode(line)["event"] for line in lines] == ["not_launched"]


def test_a_tool_that_could_not_check_makes_the_diagnosis_an_error_not_a_pass():
    from grader.diagnose.run import ToolRun, verdict
    from grader.result import ERROR, FAILED, PASSED

    clean = [ToolRun(tool) for tool in ("racecheck", "memcheck", "synccheck")]
    assert verdict(clean, 16).status == PASSED
    found = [ToolRun("racecheck", ["shared-memory race ..."]), *clean[1:]]
    assert verdict(found, 16).status == FAILED
    broken = [*clean[:2], ToolRun("synccheck", problem="the kernel was not launched (cuModuleGetFunction)")]
    check = verdict(broken, 16)
    assert check.status == ERROR and "found nothing" not in check.message
    assert "synccheck: the kernel was not launched" in check.message
