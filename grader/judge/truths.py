"""Each case's inputs and float64 truth, computed once per machine and kept in the grader's cache folder.

A batch grades every student in a process of its own; without this each would redo the same float64
products (two 1000³ matmuls for a large case), all at once, on cores the students' compilers need. The
files live in the grader's cache, which no sandboxed process can write; a file that cannot be read, or
whose arrays do not match the digest stored with them, is computed again. One grade computes (or reads)
them in a thread while its child starts and compiles (warming.py), so judging never waits on them. The inputs a
truth is made from are the ones the children read (input_files.py), stored once beside the truths.
"""
from __future__ import annotations

import hashlib
import os
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..cases import Case
from ..config import Config
from .compare import Truth, sampled_truth_of, truth_of
from .input_files import stored_inputs

VERSION = "1"  # bump when make_inputs (input_records.VERSION too) or the bound changes


_computing = threading.Lock()  # one thread computes a truth; another wanting it waits, then reads it


def case_truth(case: Case, config: Config) -> tuple[np.ndarray, np.ndarray, Truth]:
    tolerance = config.tolerance
    with _computing:
        return _case_truth(case.m, case.n, case.k, case.seed, case.distribution, tolerance.k_factor,
                           tolerance.abs, str(config.cache_dir))


def sampled_case_truth(case: Case, config: Config, tiles: list[tuple[int, int]], tile: int,
                       scope: str) -> tuple[np.ndarray, np.ndarray, Truth]:
    """A case run by sampled blocks: its inputs and the truth of the given tiles of C alone (compare.py), computed
    per grade (a few small products), never the whole float64 A @ B."""
    a, b = _inputs(case.m, case.n, case.k, case.seed, case.distribution, str(config.cache_dir))
    tolerance = config.tolerance
    return a, b, sampled_truth_of(a, b, tiles, tile, tolerance.k_factor, tolerance.abs, scope)


def warm_inputs(cases: list[Case], config: Config) -> None:
    """The inputs of these cases read now (a batch's template: for the sampled cases' truths, made per grade)."""
    for case in cases:
        _inputs(case.m, case.n, case.k, case.seed, case.distribution, str(config.cache_dir))


@lru_cache(maxsize=64)
def _inputs(m: int, n: int, k: int, seed: int, distribution: str, cache_dir: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = stored_inputs(m, n, k, seed, distribution, cache_dir)  # the arrays the children read (input_files.py)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def warm(cases: list[Case], config: Config, stop: threading.Event | None = None) -> None:
    """Compute every case's truth now, once, before the workers that need it start (until `stop` is set)."""
    for case in cases:
        if stop is not None and stop.is_set():
            return
        case_truth(case, config)


@lru_cache(maxsize=64)
def _case_truth(m: int, n: int, k: int, seed: int, distribution: str, k_factor: float, abs_tol: float,
                cache_dir: str) -> tuple[np.ndarray, np.ndarray, Truth]:
    a, b = _inputs(m, n, k, seed, distribution, cache_dir)
    key = hashlib.sha256(repr((VERSION, m, n, k, seed, distribution, k_factor, abs_tol)).encode()).hexdigest()
    path = Path(cache_dir, "truths", f"{key[:32]}.npz")
    truth = _load(path, (m, n))
    if truth is None:
        truth = truth_of(a, b, k_factor, abs_tol)
        _store(path, truth)
    for array in (a, b, truth.value, truth.bound):
        array.setflags(write=False)  # shared between submissions graded at once
    return a, b, truth


def _digest(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """What a stored truth must hash to: a damaged or altered file is computed again, never trusted."""
    digest = hashlib.sha256(np.ascontiguousarray(value).data)
    digest.update(np.ascontiguousarray(bound).data)
    return np.frombuffer(digest.digest(), np.uint8)


def _load(path: Path, shape: tuple[int, int]) -> Truth | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            value, bound, digest = stored["value"], stored["bound"], stored["digest"]
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if value.shape != shape or bound.shape != shape or value.dtype != np.float64 or bound.dtype != np.float64:
        return None
    if not np.array_equal(digest, _digest(value, bound)):
        return None
    return Truth(value, bound)


def _store(path: Path, truth: Truth) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
        np.savez(temporary, value=truth.value, bound=truth.bound, digest=_digest(truth.value, truth.bound))
        os.replace(temporary, path)  # readers see the whole file or none
    except OSError:
        pass  # a cache that cannot be written costs time, not a grade
