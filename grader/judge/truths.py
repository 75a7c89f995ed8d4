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
import zipfile
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from ..cases import Case
from ..config import Config
from .compare import Truth, sampled_truth_from, sampled_truth_of, stable_argsort, tiles_checked, truth_of
from .input_files import stored_inputs

VERSION = "1"  # bump when make_inputs (input_records.VERSION too) or the bound changes


_computing = threading.Lock()  # one thread computes a truth; another wanting it waits, then reads it
_sampling = threading.Lock()  # the same for sampled truths: never waiting on the whole truths a grade warms


def case_truth(case: Case, config: Config) -> tuple[np.ndarray, np.ndarray, Truth]:
    tolerance = config.tolerance
    with _computing:
        return _case_truth(case.m, case.n, case.k, case.seed, case.distribution, tolerance.k_factor,
                           tolerance.abs, str(config.cache_dir))


def sampled_case_truth(case: Case, config: Config, tiles: list[tuple[int, int]], tile: int,
                       scope: str, keep: bool = True) -> tuple[np.ndarray, np.ndarray, Truth]:
    """A case run by sampled blocks: its inputs and the truth of the given tiles of C alone (compare.py), never
    the whole float64 A @ B. Kept in the cache like a whole truth (`keep`: the tiles every grade with this tile
    size checks, which `grade prepare` makes), as making it took a batch worker 0.06 CPU-s per grade; the
    truth of tiles one submission alone checks (where the GPU found its wrong elements) is made, not kept."""
    a, b = _inputs(case.m, case.n, case.k, case.seed, case.distribution, str(config.cache_dir))
    tolerance = config.tolerance
    if not keep:
        return a, b, sampled_truth_of(a, b, tiles, tile, tolerance.k_factor, tolerance.abs, scope)
    with _sampling:
        return a, b, _sampled_truth(case.m, case.n, case.k, case.seed, case.distribution, tolerance.k_factor,
                                    tolerance.abs, tuple((int(r), int(c)) for r, c in tiles), tile, scope,
                                    str(config.cache_dir))


@lru_cache(maxsize=64)  # every case's: a sampled case's truth of its tiles takes the inputs its whole truth made
def _inputs(m: int, n: int, k: int, seed: int, distribution: str, cache_dir: str) -> tuple[np.ndarray, np.ndarray]:
    # the arrays the children read (input_files.py); a cold cache's records are written beside the judge's work
    a, b = stored_inputs(m, n, k, seed, distribution, cache_dir, recorded_now=False)
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
        _keep_order(_order_path(path), stable_argsort(truth.value.ravel()))
    truth.kept_order = partial(_kept_order, _order_path(path))
    for array in (a, b, truth.value, truth.bound):
        array.setflags(write=False)  # shared between submissions graded at once
    return a, b, truth


@lru_cache(maxsize=16)
def _sampled_truth(m: int, n: int, k: int, seed: int, distribution: str, k_factor: float, abs_tol: float,
                   tiles: tuple[tuple[int, int], ...], tile: int, scope: str, cache_dir: str) -> Truth:
    key = hashlib.sha256(repr((VERSION, m, n, k, seed, distribution, k_factor, abs_tol, tiles, tile,
                               scope)).encode()).hexdigest()
    path = Path(cache_dir, "truths", f"sampled-{key[:32]}.npz")
    checked = tiles_checked((m, n), list(tiles), tile)
    stored = _load(path, (int(checked.sum()),))  # the checked elements alone: a tenth of C, or less
    if stored is None:
        a, b = _inputs(m, n, k, seed, distribution, cache_dir)
        truth = sampled_truth_of(a, b, list(tiles), tile, k_factor, abs_tol, scope)
        _store(path, Truth(truth.value[truth.checked], truth.bound[truth.checked]))
    else:
        truth = sampled_truth_from(checked, stored.value, stored.bound, scope)
    for array in (truth.value, truth.bound, truth.checked):
        array.setflags(write=False)  # shared between submissions graded at once
    return truth


def _order_path(path: Path) -> Path:
    """Beside the truth's file, not named *.npz: the truths are the cache's *.npz files."""
    return path.with_name(f"{path.stem}.order")


def _kept_order(path: Path, truth: Truth) -> np.ndarray:
    """The truth's values' order (compare.Truth.order), read where it is kept, else sorted and kept: a batch
    worker sorting a large case's million values for its first wrong kernel took 0.05-0.14 CPU-s, reading them
    a few milliseconds. Read only where a wrong element's value is looked up among the others."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            order, digest = stored["order"], stored["digest"]
        if order.shape == (truth.value.size,) and np.array_equal(digest, _order_digest(order)):
            return order.astype(np.intp)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        pass
    order = stable_argsort(truth.value.ravel())
    _keep_order(path, order)
    return order


def _order_digest(order: np.ndarray) -> np.ndarray:
    """What a kept order must hash to (its file is named after its truth's: the key says whose it is)."""
    return np.frombuffer(hashlib.sha256(np.ascontiguousarray(order).data).digest(), np.uint8)


def _keep_order(path: Path, order: np.ndarray) -> None:
    kept = order.astype(np.int32) if order.size < 2**31 else order  # half the bytes to read back
    _write(path, order=kept, digest=_order_digest(kept))


def _digest(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """What a stored truth must hash to: a damaged or altered file is computed again, never trusted."""
    digest = hashlib.sha256(np.ascontiguousarray(value).data)
    digest.update(np.ascontiguousarray(bound).data)
    return np.frombuffer(digest.digest(), np.uint8)


def _load(path: Path, shape: tuple[int, int]) -> Truth | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            value, bound, digest = stored["value"], stored["bound"], stored["digest"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # the last: a member's CRC-32 wrong
        return None
    if value.shape != shape or bound.shape != shape or value.dtype != np.float64 or bound.dtype != np.float64:
        return None
    if not np.array_equal(digest, _digest(value, bound)):
        return None
    return Truth(value, bound)


def _store(path: Path, truth: Truth) -> None:
    _write(path, value=truth.value, bound=truth.bound, digest=_digest(truth.value, truth.bound))


def _write(path: Path, **arrays: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
        np.savez(temporary, **arrays)
        os.replace(temporary, path)  # readers see the whole file or none
    except OSError:
        pass  # a cache that cannot be written costs time, not a grade
