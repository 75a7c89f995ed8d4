"""Each case's seeded A and B, made once per machine into the grader's cache and read by every grade after.

make_inputs (inputs.py) cost every student's grade its cases' inputs three times over: in the parent for the truths,
in the GPU child and in the CPU driver (0.08 CPU-s each for the 21 cases). Here the parent stores them once
(`stored_inputs`: `grade prepare`, or the first grade that finds them missing, in its warming thread), and each child
maps them from a read-only descriptor the parent opened (input_records.opened_for_child; `child_inputs`), falling
back to make_inputs where there is none or it does not check out: a grade is the same with or without these files.

A case's file holds one float32 vector, A's m×k elements then B's k×n (one file, one identity); where it lives and
the identity recorded beside it: input_records.py. The cache is the grader's own, no sandbox can write it; still a
file is used only while it is the recorded one, its .npy header says float32 and the case's element count, and its
size is the header's and that many elements; anything else is made again (the parent) or generated (a child). The
parent reads a file into memory of its own; a child maps its descriptor read-only and is never told the cache's path:
the sandbox reaches nothing new, and nothing it can write.
"""
from __future__ import annotations

import contextlib
import io
import json
import mmap
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cache_file import keep
from .input_records import data_path, identity, record_path, recorded, recorded_identity, same
from .inputs import make_inputs

if TYPE_CHECKING:
    from ..cases import Case

HEADER_BYTES = 4096  # an .npy header of a float32 vector is 128
SETTLE_NS = 25_000_000  # two clock ticks of the coarsest kernel (HZ=100), and a margin


def stored_inputs(m: int, n: int, k: int, seed: int, distribution: str, cache_dir: Path | str,
                  recorded_now: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A and B, read from the case's file where it checks out, else made and stored for the next grades (its record
    written before this returns, or where not `recorded_now` on a thread of its own: a process that ends first
    leaves it unwritten, and the next grade stores that file again)."""
    data = data_path(cache_dir, m, n, k, seed, distribution)
    found = _read_whole(data, m, n, k)
    if found is None:
        found = _split(_flat(*make_inputs(m, n, k, seed, distribution)), m, n, k)
        _store(data, _flat(*found), recorded_now)
    for array in found:
        array.setflags(write=False)  # shared between the submissions a process grades at once
    return found


def warm(cases: list[Case], cache_dir: Path | str, stop: threading.Event | None = None) -> None:
    """Every case's file made now where missing (until `stop` is set): `grade prepare`, a grade's warming thread."""
    for case in cases:
        if stop is not None and stop.is_set():
            return
        if recorded(case.m, case.n, case.k, case.seed, case.distribution, cache_dir) is None:
            stored_inputs(case.m, case.n, case.k, case.seed, case.distribution, cache_dir)


def child_inputs(record: dict | None, m: int, n: int, k: int, seed: int,
                 distribution: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """A child's A and B: mapped from the descriptor its job names where it checks out, else generated; and
    whether they came from the cache (the child reports it)."""
    mapped = _mapped(record, m, n, k) if record else None
    if mapped is not None:
        return *mapped, True
    return *make_inputs(m, n, k, seed, distribution), False


# -- the files -------------------------------------------------------------------------------------------------


def _flat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.concatenate([a.ravel(), b.ravel()])


def _split(flat: np.ndarray, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return flat[: m * k].reshape(m, k), flat[m * k:].reshape(k, n)


def _store(data: Path, flat: np.ndarray, recorded_now: bool = True) -> None:
    """The file written whole and made read-only, then its identity recorded beside it (a file without a record
    that matches it is never used)."""
    try:
        data.parent.mkdir(parents=True, exist_ok=True)
        temporary = data.with_name(f".{data.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npy")
        np.save(temporary, flat)
        temporary.chmod(0o444)  # not even the grader's user writes it in place
        os.replace(temporary, data)
        found = identity(os.stat(data, follow_symlinks=False))  # after the rename, which sets its ctime
    except OSError:
        return  # a cache that cannot be written costs time, not a grade
    if recorded_now:
        _record_after_its_clock_tick(data, found)
        return
    threading.Thread(target=_record_after_its_clock_tick, args=(data, found), daemon=True).start()


def _record_after_its_clock_tick(data: Path, found: dict) -> None:
    """The identity recorded once a change to the file could no longer keep its change time: file times come from
    a clock that moves by ticks (up to 10 ms), so a write in the tick of the rename would leave the recorded identity
    as it was. A grade's truths wait on a thread of their own (truths.py): on a cold cache it stores every case's
    file, and its judge need not wait 25 ms a case (until the record is written, a child generates its inputs)."""
    wait_ns = found["ctime_ns"] + SETTLE_NS - time.time_ns()
    if wait_ns > 0:
        time.sleep(wait_ns / 1e9)
    try:
        keep(record_path(data), json.dumps(found))
    except OSError:
        pass


def _read_whole(data: Path, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The parent's read: into memory of its own (no later change of the file reaches the truths made from it)."""
    found = recorded_identity(data)
    if found is None:
        return None
    try:
        descriptor = os.open(data, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not same(os.fstat(descriptor), found):
            return None
        offset = _data_offset(descriptor, m * k + k * n, found["size"])
        if offset is None:
            return None
        flat = np.empty(m * k + k * n, np.float32)
        if os.preadv(descriptor, [memoryview(flat).cast("B")], offset) != flat.nbytes:
            return None
        return _split(flat, m, n, k)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _mapped(record: dict, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A child's read: the descriptor its job names mapped read-only, where it is the recorded file and holds the
    case's elements (its pages read in now, before the child's turn on the device)."""
    descriptor = record.get("fd")
    if not isinstance(descriptor, int):
        return None
    try:
        if not same(os.fstat(descriptor), record):
            return None
        count = m * k + k * n
        offset = _data_offset(descriptor, count, record["size"])
        if offset is None:
            return None
        mapped = mmap.mmap(descriptor, record["size"], flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                           prot=mmap.PROT_READ)
    except (OSError, ValueError):
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(descriptor)  # the mapping stays; one number the job named and that was not open: nothing
    return _split(np.frombuffer(mapped, np.float32, count, offset), m, n, k)


def _data_offset(descriptor: int, count: int, size: int) -> int | None:
    """Where a float32 vector of `count` elements starts in the .npy file, per its header; None where the header
    says anything else or the file is not exactly that long."""
    header = io.BytesIO(os.pread(descriptor, HEADER_BYTES, 0))
    try:
        version = np.lib.format.read_magic(header)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(header)
    except (ValueError, OSError, SyntaxError, TypeError):
        return None
    offset = header.tell()
    if shape != (count,) or fortran or dtype != np.dtype("<f4") or size != offset + 4 * count:
        return None
    return offset
