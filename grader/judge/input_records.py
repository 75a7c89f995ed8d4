"""Where a case's stored inputs live (input_files.py) and what the parent recorded of each file: what a job carries,
and the read-only descriptor a child gets. No numpy here: the parent reads these on its way to starting a child.

A file is `<cache>/inputs/<key>.npy`, keyed by VERSION, m, n, k, seed and distribution; beside it `<key>.json`, the
file's identity as the parent wrote it: size, inode, device, and modification and change times. A write, a chmod or
a replacement changes the change time, so a file that is not the recorded one is never used.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

VERSION = "1"  # bump when make_inputs changes: a changed generator never reads a file an older one made
FOLDER = "inputs"
IDENTITY = ("size", "inode", "device", "mtime_ns", "ctime_ns")
CACHED, GENERATED = "cached", "generated"  # where a child's inputs came from, as its `case` event says


def data_path(cache_dir: Path | str, m: int, n: int, k: int, seed: int, distribution: str) -> Path:
    key = hashlib.sha256(repr((VERSION, m, n, k, seed, distribution)).encode()).hexdigest()[:32]
    return Path(cache_dir, FOLDER, f"{key}.npy")


def record_path(data: Path) -> Path:
    return data.with_suffix(".json")


def identity(info: os.stat_result) -> dict:
    return {"size": info.st_size, "inode": info.st_ino, "device": info.st_dev, "mtime_ns": info.st_mtime_ns,
            "ctime_ns": info.st_ctime_ns}


def same(info: os.stat_result, record: dict) -> bool:
    """Whether the file `info` describes is the recorded one."""
    found = identity(info)
    return stat.S_ISREG(info.st_mode) and all(found[name] == record.get(name) for name in IDENTITY)


def recorded_identity(data: Path) -> dict | None:
    try:
        record = json.loads(record_path(data).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not all(type(record.get(name)) is int for name in IDENTITY):
        return None
    return {name: record[name] for name in IDENTITY}


def recorded(m: int, n: int, k: int, seed: int, distribution: str, cache_dir: Path | str) -> dict | None:
    """What a job carries of a case's file (its path and recorded identity) where the file is the recorded one;
    None where it is missing or was changed (the child then generates its inputs)."""
    data = data_path(cache_dir, m, n, k, seed, distribution)
    found = recorded_identity(data)
    try:
        if found is None or not same(os.stat(data, follow_symlinks=False), found):
            return None
    except OSError:
        return None
    return {"path": str(data), **found}


def opened_for_child(record: dict) -> int | None:
    """A read-only descriptor of the recorded file for a child (runner.py passes it), checked to be that very
    file; None where it is not there or not the recorded one."""
    try:
        descriptor = os.open(record["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, KeyError, TypeError):
        return None
    if same(os.fstat(descriptor), record):
        return descriptor
    os.close(descriptor)
    return None


def for_child(record: dict, descriptor: int) -> dict:
    """The record as the child's job carries it: the descriptor in place of the cache's path."""
    return {**{name: record[name] for name in IDENTITY}, "fd": descriptor}
