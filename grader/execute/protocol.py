"""The one protocol between a sandboxed child and the grader: typed events, one JSON object per line.

The GPU child, the CPU harness driver and the sanitizer child send with `Channel`; the parent reads with
`decode`, which checks every event against `EVENTS` (known name, required fields, types, sizes). Anything
else is a `ProtocolError`: the submission's fault (its process was compromised or crashed mid-line), never
a grader crash. The CPU harness's own reports (written by student code running natively) are checked
against `HARNESS_REPORTS` the same way. Files a child leaves in its folder are read with `read_untrusted`:
no symlink, no FIFO, bounded size.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..judge.input_records import CACHED, GENERATED

MAX_LINE_BYTES = 1 << 20
MAX_TEXT = 64 * 1024
MAX_LIST = 4096


class ProtocolError(Exception):
    """An event that is not one the protocol defines."""


# Field types: a type, a tuple of types (None allowed as type(None)), or a `one_of` set of strings.
NUMBER = (int, float)
OPTIONAL_INT = (int, type(None))


def one_of(*values: str) -> frozenset[str]:
    return frozenset(values)


TRIPLE = ("triple",)  # a list of three non-negative ints: a thread or block index
NUMBERS = ("numbers",)  # a list of numbers
RECORDS = ("records",)  # a list of harness reports, each checked against HARNESS_REPORTS
RECORD = ("record",)  # one harness report
BUFFER_MAP = ("buffers",)  # {"A": [address, bytes], ...}
ACCESSES = ("accesses",)  # the harness's "access" and "barriers" reports (the access profile), each checked
MAX_ACCESS_LINES = 256
MAX_BARRIER_LINES = 64  # lines of __syncthreads a profile reports barriers of (cuda_emu.h, count_barrier)
COUNT = ("count",)  # a non-negative int
SITE = ("site",)  # an instrumented access's number (sites.py): a lookup key into the grader's own texts
MAX_SITES = 256  # sites.py's

TARGET = one_of("student", "reference")
# "profile": the CPU emulator's access profile, advice only, after the cases (harness_driver.py)
PHASE = one_of("startup", "compile", "case", "timing", "profile")

# name -> (required fields, optional fields). Only a child sends these; "timeout", "crash", "restart",
# "left_out", "turn", "turns_held" and "output" are the parent's own, and a child that sends one breaks the protocol.
# "compiled"'s compiled_ahead: the GPU child compiled its cubins while CUDA started; the CPU driver found the
# emulation built when it came to build it.
EVENTS: dict[str, tuple[dict, dict]] = {
    "phase": ({"phase": PHASE}, {"case": str}),
    "toolchain": ({"arch": str, "nvcc": str}, {}),
    "compiled": ({"device": str, "arch": str, "tile_size": OPTIONAL_INT},
                 {"reference_tile": OPTIONAL_INT, "cpu_s": NUMBER, "host_code_left_out": bool, "cubins": dict,
                  "pci_bus_id": str, "context_s": NUMBER, "init_s": NUMBER, "student_compile_s": NUMBER,
                  "reference_compile_s": NUMBER, "compiled_ahead": bool}),
    # log: the CPU emulator's compiler output as printed, whose diagnostics say whose failure it was;
    # mismatch: the compiled declaration is not what the lab launches (a submission error)
    "compile_error": ({"target": TARGET, "message": str}, {"emulator": bool, "log": str, "mismatch": bool}),
    "kernel_missing": ({"target": TARGET, "message": str}, {}),
    "case": ({"case": str, "seconds": NUMBER, "a_changed": bool, "b_changed": bool},
             {"races": RECORDS, "schedules_differ": int, "launches": int, "distinct_outputs": int,
              "unstored_reads": RECORDS, "collisions": RECORDS, "c_collisions": int, "indices": RECORDS,
              "c_reads": RECORDS, "tile_loops": RECORDS, "mappings": RECORDS, "unstored": RECORDS,
              "unwritten_in_c": RECORDS, "inputs": one_of(CACHED, GENERATED)}),
    "case_error": ({"case": str, "schedule": str, "problem": RECORD}, {}),
    # A turn on the device for the cases, or for a sanitizer launch (job: which of launch_kernel's): "go"
    "await_device": ({}, {"job": int}),
    "await_timing": ({}, {}),  # a turn for one measurement: answered "go REPETITIONS" or "skip"
    "timing": ({"student_ms": NUMBERS, "reference_ms": NUMBERS, "launches": int, "wrong_launches": int,
                "first_wrong_launch": OPTIONAL_INT, "m": int, "n": int, "k": int, "phase_s": NUMBER,
                "peak_gflops": NUMBER}, {}),
    "fault": ({"error": str}, {}),
    # launch_kernel's, per job: where its buffers are, that its launch happened (how the synchronize ended)
    "buffers": ({"buffers": BUFFER_MAP}, {"job": int}),
    "launched": ({"status": str}, {"job": int}),
    "not_launched": ({"reason": str}, {"job": int}),
    # The CPU emulator's access profile of the student's kernel and the reference's on one shape (size³), and
    # the seconds it added after the last case.
    "access_profile": ({"size": int, "student": ACCESSES, "reference": ACCESSES},
                       {"seconds": NUMBER, "reference_tile": OPTIONAL_INT}),
    "done": ({}, {}),
}

# What the CPU harness reports (cuda_emu.h, harness.cpp): student code shares its process, so every field
# is checked before a message is built from it.
HARNESS_REPORTS: dict[str, tuple[dict, dict]] = {
    # store_trip, other_trip: each access's trip of the tile loop; barrier_line: the barrier both passed last
    "race": ({"kind": one_of("read_after_store", "store_after_read", "store_after_store"), "array": str,
              "two_d": bool, "row": int, "column": int, "store_thread": TRIPLE, "store_line": int,
              "other_thread": TRIPLE, "other_line": int, "block": TRIPLE, "store_after_read": bool},
             {"store_trip": COUNT, "other_trip": COUNT, "barrier_line": COUNT}),
    # site, row, column, stride: the element a site's access meant, where the fault is at that access
    "fault": ({"what": str}, {"thread": TRIPLE, "block": TRIPLE, "buffer": one_of("A", "B", "C"),
                              "access": str, "side": one_of("before", "after"), "elements": int, "line": int,
                              "returncode": OPTIONAL_INT, "site": SITE, "matrix": one_of("A", "B", "C"),
                              "row": int, "column": int, "stride": int}),
    # A site's access to the element [row][column] of `matrix` by an index row * stride + column, off the matrix
    # (a stride not its row length, a row or a column past it): the first of each kind per site and launch.
    "index": ({"site": SITE, "matrix": one_of("A", "B", "C"), "row": int, "column": int, "stride": int,
               "thread": TRIPLE, "block": TRIPLE}, {}),
    # A site read the element of C [row][column] before any thread stored it in the launch (C += v).
    "c_read": ({"site": SITE, "row": COUNT, "column": COUNT, "thread": TRIPLE, "block": TRIPLE}, {}),
    # A thread that stored nothing into C, whose element [row][column] (the launch's) no thread stored.
    "c_unstored": ({"thread": TRIPLE, "block": TRIPLE, "row": COUNT, "column": COUNT}, {}),
    # The fewest and most trips a thread made through the tile loop, of the threads that reached it.
    "tile_loop": ({"fewest": COUNT, "most": COUNT, "threads": COUNT}, {}),
    # Stores into C: how many; at the element the launch gives the thread; at the transposed launch's. The
    # first store elsewhere than the launch's: thread, block, the element, line.
    "c_mapping": ({"stores": COUNT, "as_launched": COUNT, "transposed": COUNT},
                  {"thread": TRIPLE, "block": TRIPLE, "row": COUNT, "column": COUNT, "line": COUNT}),
    "divergence": ({"kind": one_of("different_barriers", "exited"), "line": int, "thread": TRIPLE,
                    "other_line": int, "other_thread": TRIPLE, "block": TRIPLE}, {}),
    # A shared entry read while it still held the poison no thread of its block had overwritten.
    "unstored_read": ({"array": str, "two_d": bool, "row": int, "column": int, "line": int, "thread": TRIPLE,
                       "block": TRIPLE}, {}),
    # At a launch's end, the elements of C holding a value read from a shared entry no thread of its block stored
    # (cuda_emu.h, MARK_FAMILY): how many; the first, [row][column], who stored it at `line`; and the read it came
    # from where its mark names one (`mark`: that read's number in the launch, from 1): the entry of `array`, the
    # line, the reading thread and block.
    "unwritten_in_c": ({"elements": COUNT, "row": COUNT, "column": COUNT},
                       {"line": COUNT, "thread": TRIPLE, "block": TRIPLE, "mark": COUNT, "array": str, "two_d": bool,
                        "entry_row": COUNT, "entry_column": COUNT, "read_line": COUNT, "read_thread": TRIPLE,
                        "read_block": TRIPLE}),
    # Two threads stored one element of C: `thread` of `block` at `line`, after `other_*`.
    "c_collision": ({"row": int, "column": int, "line": int, "thread": TRIPLE, "block": TRIPLE, "other_line": int,
                     "other_thread": TRIPLE, "other_block": TRIPLE}, {}),
    # A warp collective (shuffle, vote, __syncwarp) that a lane its mask names never reached.
    "warp_divergence": ({"primitive": str, "line": int, "mask": int, "arrived": int, "thread": TRIPLE,
                         "other_thread": TRIPLE, "other_state": one_of("exited", "barrier", "collective"),
                         "other_line": int, "other_primitive": str, "block": TRIPLE}, {}),
    # unwritten_reads: the reads of unstored shared entries the launch named (cuda_emu.h, unwritten_reads), the most
    # of its launches; cpu_s: the worker's own CPU seconds so far
    "done": ({"a_changed": bool, "b_changed": bool, "races": int},
             {"c_collisions": int, "unwritten_reads": COUNT, "cpu_s": NUMBER}),
    # A case the CPU driver stopped past its time limit, in its worker's own time: the driver's record, never
    # read from a report (a forged one is ignored there).
    "timeout": ({"limit_s": NUMBER}, {}),
    # A profile run's figures for one (line, kind, array): warp-level requests, their sectors (global) or
    # turns (shared: n-way bank conflicts) in total, the worst, and the least the same bytes could take;
    # stride: bytes from lane 0's element to lane 1's; rows, columns: a 2-D shared array's shape; bytes: of
    # one lane's access; lines (global): the 128-byte lines the requests touched.
    "access": ({"line": int, "kind": one_of("global_load", "global_store", "shared_load", "shared_store"),
                "array": str, "requests": int, "total": int, "max": int, "ideal": int, "rows": int, "columns": int,
                "bytes": int},
               {"stride": int, "lines": COUNT}),
    # A profile run's block-wide barriers completed at one line of __syncthreads, over its blocks.
    "barriers": ({"line": int, "count": COUNT}, {}),
}


def decode(line: bytes) -> dict:
    """One line from a child, checked; raises ProtocolError."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"an event of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError(f"not JSON: {line[:80]!r}") from None
    return check(event, EVENTS)


def check(event: object, table: dict[str, tuple[dict, dict]]) -> dict:
    if not isinstance(event, dict) or event.get("event") not in table:
        name = event.get("event") if isinstance(event, dict) else type(event).__name__
        raise ProtocolError(f"unknown event {str(name)[:40]!r}")
    required, optional = table[event["event"]]
    for key, value in event.items():
        if key == "event":
            continue
        if key not in required and key not in optional:
            raise ProtocolError(f"{event['event']}: unexpected field {key[:40]!r}")
        _check_value(event["event"], key, value, required.get(key, optional.get(key)))
    missing = [key for key in required if key not in event]
    if missing:
        raise ProtocolError(f"{event['event']}: missing {', '.join(missing)}")
    return event


def _check_value(name: str, key: str, value: object, kind) -> None:
    ok = _matches(value, kind)
    if not ok:
        raise ProtocolError(f"{name}: field {key!r} has a value of the wrong type or size")


def _matches(value: object, kind) -> bool:
    if isinstance(kind, frozenset):
        return isinstance(value, str) and value in kind
    if kind is TRIPLE:
        return (isinstance(value, list) and len(value) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 32 for v in value))
    if kind is NUMBERS:
        return isinstance(value, list) and len(value) <= MAX_LIST and all(_number(v) for v in value)
    if kind is RECORDS:
        return (isinstance(value, list) and len(value) <= 64
                and all(_record_ok(v) for v in value))
    if kind is RECORD:
        return _record_ok(value)
    if kind is ACCESSES:
        return (isinstance(value, list) and len(value) <= MAX_ACCESS_LINES + MAX_BARRIER_LINES
                and all(_record_ok(v) and (v["event"] == "barriers" or v["event"] == "access" and access_ok(v))
                        for v in value))
    if kind is BUFFER_MAP:
        return (isinstance(value, dict) and set(value) <= {"A", "B", "C"}
                and all(isinstance(v, list) and len(v) == 2 and all(_int(x) for x in v) for v in value.values()))
    if kind is dict:
        return (isinstance(value, dict) and len(value) <= 8
                and all(isinstance(k, str) and isinstance(v, str) and len(v) < 256 for k, v in value.items()))
    if kind is str:
        return isinstance(value, str) and len(value) <= MAX_TEXT
    if kind is int:
        return _int(value)
    if kind is COUNT:
        return _int(value) and value >= 0
    if kind is SITE:
        return _int(value) and 0 <= value < MAX_SITES
    if kind is bool:
        return isinstance(value, bool)
    if kind == NUMBER:
        return _number(value)
    if kind == OPTIONAL_INT:
        return value is None or _int(value)
    return False


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 63


def _number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and value == value  # not NaN


def access_ok(record: dict) -> bool:
    """An access record's counts are possible: requests > 0, at least one sector or turn each, and at most 256
    (a warp's 32 lanes, each touching a few sectors at most: a bound that keeps a forged figure sane)."""
    requests = record["requests"]
    return (0 < requests and requests <= record["ideal"] <= 64 * requests and 1 <= record["max"] <= 256
            and requests <= record["total"] <= 256 * requests and len(record["array"]) <= 64
            and record.get("lines", requests) <= record["total"])


def _record_ok(value: object) -> bool:
    try:
        check(value, HARNESS_REPORTS)
    except ProtocolError:
        return False
    return True


def harness_report(line: str) -> dict | None:
    """One line of a harness report file, or None when it is not a valid report."""
    try:
        return check(json.loads(line), HARNESS_REPORTS)
    except (ValueError, ProtocolError):
        return None


# The parent's line on a child's control pipe that says its job file is written (spawn.py): every child reads it,
# and only it, before it reads its job; what it reads there after it are the parent's answers to its requests.
JOB_READY = b"job\n"


def await_job(control_fd: int) -> None:
    """Block until the parent says the job is ready. Read a byte at a time, so nothing of a later answer is taken
    from whoever reads the pipe next. A pipe closed first (the grade did not need this child) ends the process."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(control_fd, 1)
        if not byte:
            os._exit(0)  # the parent is done with us before there was a job: nothing to say, nothing to clean
        line += byte
    if line != JOB_READY:
        raise ProtocolError(f"expected the job's announcement on the control pipe, got {line[:40]!r}")


# After it, the parent's lines on a child's control pipe are short words answering the child's requests in order
# ("go", "go N", "skip", "ready"). One kind comes unasked, to the CPU emulator's driver beside a GPU run: a case the GPU
# hung in and the seconds it had there (hang_notices.py), as GPU_HUNG and a JSON object.
GPU_HUNG = "gpu_hung"


def gpu_hung_line(case: str, limit_s: float) -> bytes:
    return f"{GPU_HUNG} {json.dumps({'case': case, 'limit_s': limit_s})}\n".encode()


def gpu_hung_notice(line: str) -> tuple[str, float] | None:
    """The (case, limit) a GPU_HUNG line tells; None for any other line (an answer)."""
    word, _, rest = line.partition(" ")
    if word != GPU_HUNG:
        return None
    notice = json.loads(rest)
    return str(notice["case"]), float(notice["limit_s"])


class Channel:
    """A child's end of its event pipe. Sending checks the event too, so a grader bug fails loudly in tests."""

    def __init__(self, fd: int):
        self._fd = fd

    def send(self, event: str, **fields) -> None:
        message = check({"event": event, **fields}, EVENTS)
        os.write(self._fd, (json.dumps(message) + "\n").encode())


def read_untrusted(path: Path, max_bytes: int) -> bytes:
    """A file a sandboxed process may have written: only a regular file, never through a symlink, at most
    max_bytes. Raises OSError otherwise (the caller treats it as the submission's fault)."""
    fd = _open_regular(path)
    try:
        if os.fstat(fd).st_size > max_bytes:
            raise OSError(f"{Path(path).name} is larger than {max_bytes} bytes")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise OSError(f"{Path(path).name} grew past {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def read_untrusted_head(path: Path, count: int) -> bytes:
    """The first `count` bytes (or fewer) of a file a sandboxed process may have written, as read_untrusted
    opens it: a regular file, never through a symlink, never waiting on a pipe."""
    fd = _open_regular(path)
    try:
        return os.read(fd, count)
    finally:
        os.close(fd)


def _open_regular(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{Path(path).name} is not a regular file")
    return fd
