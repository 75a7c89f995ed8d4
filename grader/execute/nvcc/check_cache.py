"""The GPU-less nvcc check's verdicts, kept by what decides them, so the same file is compiled once.

nvcc on a kernel is most of a CPU grade's own CPU time after the emulation (about 0.3 CPU-s), and a class
regraded, a student grading again, or a batch resumed hands it the same text. The key is the compile
cache's (text, handed-in headers, options, arch, linkage) with the nvcc binary's identity in place of its
version string (so no nvcc runs to ask it), plus the kernel contract the cubin's parameters were checked
against. Only verdicts that follow from the text are kept: compiled, a compile error, parameters that do not
match. A timeout or a grader fault is never kept: the next grade runs nvcc again. A compiled file's cubin
(what its resources are read from) is kept beside its verdict. The cache lives with the compile cache, where
no sandbox can reach; an entry that cannot be read back whole is compiled again.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

from ...cache_file import keep
from ...contract import KernelContract
from ..confine.sandbox import Sandbox
from .compile import CompileOutcome, compile_check, cubin_key, nvcc_path

FOLDER = "compile-check"
MAX_ENTRY_BYTES = 1 << 20


def checked(cache_dir: Path, source: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox,
            contract: KernelContract | None = None, headers: dict[str, str] | None = None) -> CompileOutcome:
    """compile_check's outcome, from the cache when this exact check was made before."""
    path = cache_dir / FOLDER / f"{_key(source, arch, options, contract, headers)}.json"
    kept = _load(path)
    if kept is not None:
        return kept
    outcome = compile_check(source, arch, options, timeout, sandbox, contract, headers)
    if not outcome.timed_out and not outcome.grader_fault:
        _store(path, outcome)
    return outcome


def _key(source: str, arch: str, options: list[str], contract: KernelContract | None,
         headers: dict[str, str] | None) -> str:
    compiled = cubin_key(source, options, arch, _nvcc_identity(), headers)
    return hashlib.sha256(f"{compiled}\0{contract!r}".encode()).hexdigest()


def _nvcc_identity() -> str:
    """Which nvcc: the path it is found by, where that leads, its size and modification time (a new toolkit,
    or nvcc found another way, is a new key)."""
    nvcc = nvcc_path()
    if nvcc is None:
        return ""
    real = os.path.realpath(nvcc)
    info = os.stat(real)
    return f"{nvcc}:{real}:{info.st_size}:{info.st_mtime_ns}"


def _load(path: Path) -> CompileOutcome | None:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(MAX_ENTRY_BYTES + 1))
        outcome = CompileOutcome(**data)
        if outcome.ok:
            outcome.cubin = path.with_suffix(".cubin").read_bytes()
    except (OSError, ValueError, TypeError):
        return None
    if not (isinstance(outcome.ok, bool) and isinstance(outcome.message, str) and isinstance(outcome.mismatch, bool)):
        return None
    if outcome.timed_out or outcome.grader_fault or (outcome.ok and not outcome.cubin):
        return None
    return outcome


def _store(path: Path, outcome: CompileOutcome) -> None:
    """The cubin first, the verdict last: a verdict is found only once its cubin is in place."""
    if outcome.ok and not keep(path.with_suffix(".cubin"), outcome.cubin):
        return
    keep(path, json.dumps({key: value for key, value in asdict(outcome).items() if key != "cubin"}))
