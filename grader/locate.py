"""Says where the wrong elements of C sit, by tile, and what that pattern usually means.

Each pattern is one small test; the first that matches gives the hint.
"""
from __future__ import annotations

import numpy as np

from .findings import Finding
from .tolerance import bound_of, within

SAMPLE_FIRST, SAMPLE_SPREAD = 64, 2048  # wrong elements the truncated-phase hint is tried on, then checked on
ROUND_UP = "round the phase count up, (k + TILE - 1) / TILE, and load out-of-range tile entries as 0"


def locate_errors(wrong: np.ndarray, unwritten: np.ndarray, c: np.ndarray, a: np.ndarray, b: np.ndarray,
                  tile: int, k_factor: float, abs_tol: float) -> Finding:
    m, n = wrong.shape
    k = a.shape[1]
    rows, cols = np.nonzero(wrong)
    tile_rows, tile_cols = np.unique(rows // tile).tolist(), np.unique(cols // tile).tolist()
    grid_rows, grid_cols = -(-m // tile), -(-n // tile)
    where = (f"tile rows {_ranges(tile_rows)} and tile columns {_ranges(tile_cols)} "
             f"(of {grid_rows}×{grid_cols} tiles of {tile}×{tile})")
    for hint in (
        _nothing_stored(unwritten),
        _last_partial_phase(c, wrong, rows, cols, a, b, tile, k_factor, abs_tol),
        _partial_edges(rows, cols, m, n, tile),
        _unwritten_only(wrong, unwritten, where),
        _everywhere(tile_rows, tile_cols, grid_rows, grid_cols, m, n, k, tile),
    ):
        if hint:
            return hint
    return Finding(f"wrong elements sit in {where}")


def _nothing_stored(unwritten: np.ndarray) -> Finding | None:
    if unwritten.all():
        return Finding("the kernel stored nothing to C", "each thread must write its sum to C[row * n + col]")
    return None


def _unwritten_only(wrong: np.ndarray, unwritten: np.ndarray, where: str) -> Finding | None:
    if unwritten[wrong].all():
        return Finding(f"the elements never written sit in {where}",
                       "check the condition and the index of the store to C")
    return None


def _last_partial_phase(c, wrong, rows, cols, a, b, tile, k_factor, abs_tol) -> Finding | None:
    """C equals the product over whole tiles of k only: the phase count rounds down."""
    k = a.shape[1]
    whole = (k // tile) * tile
    if k % tile == 0:
        return None
    if whole == 0:  # the product over no terms: 0, where nothing else points at any bound
        if not (c[wrong] == 0).all():
            return None
        return Finding(f"C is 0 where it is wrong: no tile phase ran, as k = {k} is smaller than one tile ({tile}) "
                       f"and the phase count k / {tile} rounds down to 0", ROUND_UP)
    for count in (SAMPLE_FIRST, SAMPLE_SPREAD):  # most wrong kernels fail the small sample, cheaply
        if not _truncated_product_at(c, rows, cols, a[:, :whole], b[:whole, :], k_factor, abs_tol, count):
            return None
    return Finding(f"C is the product over the first {whole} of k = {k} only: the last, partial tile phase "
                   f"(k % {tile} = {k % tile} terms) is skipped", ROUND_UP)


def _truncated_product_at(c, rows, cols, a, b, k_factor, abs_tol, count: int) -> bool:
    """Whether `count` wrong elements, spread evenly over all of them in row order, each equal the product
    over the truncated k: per element, not the two float64 matrix products the test over every element
    takes (a CPU-second at 1000³, for each wrong case of a class's many such kernels). A hint, not a
    verdict: thousands of elements from every part of C agreeing is the pattern."""
    pick = np.unique(np.linspace(0, rows.size - 1, min(count, rows.size)).astype(np.int64))
    rows, cols = rows[pick], cols[pick]
    a_rows, b_cols = a[rows, :].astype(np.float64), b[:, cols].T.astype(np.float64)
    value = np.einsum("ij,ij->i", a_rows, b_cols)
    bound = bound_of(np.einsum("ij,ij->i", np.abs(a_rows), np.abs(b_cols)), a.shape[1], k_factor, abs_tol)
    return bool(within(c[rows, cols], value, bound).all())


def _partial_edges(rows, cols, m, n, tile) -> Finding | None:
    """Only the ragged edge is wrong. Said only where whole tiles exist beside the edge and are right: when
    m or n is smaller than one tile, every element is on the edge and the pattern implies no bound."""
    last_row_start, last_col_start = (m // tile) * tile, (n // tile) * tile
    in_last_rows = (m % tile != 0) & (m > tile) & (rows >= last_row_start)
    in_last_cols = (n % tile != 0) & (n > tile) & (cols >= last_col_start)
    if in_last_cols.all():
        return Finding(f"only the last, partial tile column is wrong (columns {last_col_start}-{n - 1})",
                       "check the bound on B's column (col < n) when loading the B tile and storing C")
    if in_last_rows.all():
        return Finding(f"only the last, partial tile row is wrong (rows {last_row_start}-{m - 1})",
                       "check the bound on A's row (row < m) when loading the A tile and storing C")
    if (in_last_rows | in_last_cols).all():
        return Finding("only the partial tiles along the bottom and right edges are wrong",
                       "check the bounds row < m and col < n on the loads and on the store")
    return None


def _everywhere(tile_rows, tile_cols, grid_rows, grid_cols, m, n, k, tile) -> Finding | None:
    if len(tile_rows) < grid_rows or len(tile_cols) < grid_cols:
        return None
    causes = []
    if len({m, n, k}) > 1:
        causes.append("the strides: A[row * k + column] and B[row * n + column] (they only differ from the "
                      "square case's when m, n and k differ)")
    if k % tile:
        causes.append("the k bounds: when k is not a multiple of the tile, the last phase's tiles stick out of "
                      "A and B, so load entries with column or row >= k as 0")
    if not causes:
        causes.append("the tile loads, the inner product and the index of C")
    return Finding(f"every tile of C has wrong elements ({m}×{n}×{k}, tile {tile})", "check " + "; and ".join(causes))


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)
