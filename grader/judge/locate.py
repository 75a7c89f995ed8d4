"""Says where the wrong elements of C sit, by tile, and what that pattern usually means.

Each pattern is one small test; the first that matches gives the hint.
"""
from __future__ import annotations

import numpy as np

from .findings import Finding
from .tolerance import bound_of, within

SAMPLE_FIRST, SAMPLE_SPREAD = 64, 2048  # wrong elements the truncated-phase hint is tried on, then checked on
STORE_INDEX_FIX = ("check the index of your store to C and the condition that guards it: C is m×n, so element "
                   "[row][col] is C[row * n + col], stored only where row < m and col < n, each by its own thread")
MISPLACED_SAMPLE = 64  # wrong elements looked up among the right values of C
SEPARATION = 8  # how much closer the matched truth must be than the next one
ROUND_UP = "round the phase count up, (k + TILE - 1) / TILE, and load out-of-range tile entries as 0"


def locate_errors(wrong: np.ndarray, unwritten: np.ndarray, c: np.ndarray, a: np.ndarray, b: np.ndarray,
                  tile: int, k_factor: float, abs_tol: float, truth=None, phase_count_right: bool = False,
                  at: np.ndarray | None = None) -> Finding:
    """`truth` (compare.Truth), when given, lets a wrong element be recognised as another element's value; of a
    case run by sampled blocks (truth.checked) only the tiles checked are spoken of, and no element's value is
    looked up among the others' (most have no truth). Where the emulator saw the tile loop run ceil(k / TILE)
    times (`phase_count_right`), a C that looks like the product over whole tiles only is not told as a phase
    count that rounds down. `at`: the flat indices of the wrong elements, where the caller has them."""
    sampled = truth is not None and truth.checked is not None
    m, n = wrong.shape
    k = a.shape[1]
    at = np.flatnonzero(wrong) if at is None else at
    grid_rows, grid_cols = -(-m // tile), -(-n // tile)
    tile_rows, tile_cols = _tiles_with(wrong.any(axis=1), tile), _tiles_with(wrong.any(axis=0), tile)
    where = (f"tile rows {_ranges(tile_rows)} and tile columns {_ranges(tile_cols)} "
             f"(of {grid_rows}×{grid_cols} tiles of {tile}×{tile})")
    for hint in (
        _nothing_stored(unwritten, truth.checked if sampled else None),
        None if phase_count_right else _last_partial_phase(c, wrong, at, a, b, tile, k_factor, abs_tol),
        None if sampled else _misplaced(c, wrong, at, truth),
        _partial_edges(wrong, tile),
        _unwritten_only(unwritten[wrong], where),
        _everywhere(tile_rows, tile_cols, grid_rows, grid_cols, m, n, k, tile, "checked " if sampled else ""),
    ):
        if hint:
            return hint
    return Finding(f"wrong elements sit in {where}")


def _nothing_stored(unwritten: np.ndarray, checked: np.ndarray | None = None) -> Finding | None:
    if (unwritten if checked is None else unwritten[checked]).all():
        return Finding("the kernel stored nothing to C", "each thread must write its sum to C[row * n + col]")
    return None


def _tiles_with(lines: np.ndarray, tile: int) -> list[int]:
    """The tiles (of rows or of columns) holding a line where `lines` is True, ascending."""
    return np.unique(np.flatnonzero(lines) // tile).tolist()


def _spread(at: np.ndarray, count: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of `count` of the elements at flat indices `at`, spread evenly over them in row order."""
    pick = np.unique(np.linspace(0, at.size - 1, min(count, at.size)).astype(np.int64))
    return np.divmod(at[pick], n)


def _unwritten_only(unwritten_wrong: np.ndarray, where: str) -> Finding | None:
    """`unwritten_wrong`: for each wrong element, whether it still holds the poison."""
    if unwritten_wrong.all():
        return Finding(f"the elements never written sit in {where}",
                       "check the condition and the index of the store to C")
    return None


def _last_partial_phase(c, wrong, at, a, b, tile, k_factor, abs_tol) -> Finding | None:
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
        if not _truncated_product_at(c, *_spread(at, count, c.shape[1]), a[:, :whole], b[:whole, :], k_factor,
                                     abs_tol):
            return None
    return Finding(f"C is the product over the first {whole} of k = {k} only: the last, partial tile phase "
                   f"(k % {tile} = {k % tile} terms) is skipped", ROUND_UP)


def _truncated_product_at(c, rows, cols, a, b, k_factor, abs_tol) -> bool:
    """Whether the wrong elements at (rows, cols), spread evenly over all of them in row order, each equal the product
    over the truncated k: per element, not the two float64 matrix products the test over every element
    takes (a CPU-second at 1000³, for each wrong case of a class's many such kernels). A hint, not a
    verdict: thousands of elements from every part of C agreeing is the pattern."""
    a_rows, b_cols = a[rows, :].astype(np.float64), b[:, cols].T.astype(np.float64)
    value = np.einsum("ij,ij->i", a_rows, b_cols)
    bound = bound_of(np.einsum("ij,ij->i", np.abs(a_rows), np.abs(b_cols)), a.shape[1], k_factor, abs_tol)
    return bool(within(c[rows, cols], value, bound).all())


def _misplaced(c: np.ndarray, wrong: np.ndarray, at: np.ndarray, truth) -> Finding | None:
    """Wrong elements that hold other elements' right values: the sums are right and stored at the wrong
    place (a wrong index of C, two threads storing one element). Seen from the values alone, so it holds on
    any backend; the pattern only where at least half of a sample of wrong elements show it (`at`: the wrong
    elements' flat indices)."""
    if truth is None:
        return None
    finite = at[np.isfinite(c[wrong])]
    if finite.size < 2:
        return None
    rows, cols = _spread(finite, MISPLACED_SAMPLE, c.shape[1])
    got = c[rows, cols].astype(np.float64)
    source = sources_of(got, rows * c.shape[1] + cols, truth)
    matched = source >= 0
    if matched.sum() < max(2, rows.size // 2):
        return None
    first = int(np.argmax(matched))
    origin = divmod(int(source[first]), c.shape[1])
    return Finding(f"C[{rows[first]}][{cols[first]}] holds {got[first]:.6g}, the value C[{origin[0]}][{origin[1]}] "
                   f"should hold; {int(matched.sum())} of {rows.size} wrong elements looked at hold another "
                   "element's value: the sums are right, and stored at the wrong place", STORE_INDEX_FIX)


def sources_of(got: np.ndarray, own: np.ndarray, truth) -> np.ndarray:
    """For each value, the flat index of the one element of the truth it is (-1: none, or its own `own`).
    One element must be within tolerance and far closer than any other: a value stored elsewhere is within
    rounding of its own truth, while a wrong value lands between truths at random (that close to one by
    chance about one time in SEPARATION)."""
    values, bounds, order = truth.value.ravel(), truth.bound.ravel(), truth.order
    low = sorted_search(values, order, got - truth.widest, "left")
    high = sorted_search(values, order, got + truth.widest, "right")
    at = sorted_search(values, order, got, "left")
    source = np.full(got.size, -1)
    for i in range(got.size):
        # The two values nearest got[i] sit beside where it would be inserted in the sorted truth (distances grow
        # away from there on both sides): of those within the widest bound, at most two on each side.
        near = order[max(low[i], at[i] - 2):min(high[i], at[i] + 2)]
        if near.size == 0:
            continue
        distance = np.abs(got[i] - values[near])
        ranked = np.argsort(distance, kind="stable")[:2]
        if near[ranked[0]] == own[i] or distance[ranked[0]] > bounds[near[ranked[0]]]:
            continue
        if near.size == 1 or distance[ranked[1]] > SEPARATION * distance[ranked[0]]:
            source[i] = near[ranked[0]]
    return source


def sorted_search(values: np.ndarray, order: np.ndarray, targets: np.ndarray, side: str) -> np.ndarray:
    """np.searchsorted(values[order], targets, side) without making values[order] (a million-element gather, for
    the few dozen values a wrong kernel's search looks up): a binary search reading the ~20 it compares each."""
    low, high = np.zeros(targets.size, np.intp), np.full(targets.size, values.size, np.intp)
    while (searching := low < high).any():
        middle = (low + high) // 2
        probe = values[order[np.minimum(middle, values.size - 1)]]
        after = _sorts_before(probe, targets) if side == "left" else ~_sorts_before(targets, probe)
        low = np.where(searching & after, middle + 1, low)
        high = np.where(searching & ~after, middle, high)
    return low


def _sorts_before(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x < y in numpy's sort order, where NaN comes after every number."""
    return (x < y) | (np.isnan(y) & ~np.isnan(x))


STORED_OVER_LOOKS = 16  # elements where launches disagree, looked at for two owners


def stored_over(outputs: list[np.ndarray], truth) -> Finding | None:
    """Launches that disagree on an element, each leaving another element's right value in it: the threads
    computing those elements both store it, and which stores last changes from launch to launch. What the
    GPU shows of two threads storing one element of C (`outputs`: each launch's C, m×n)."""
    first, n = outputs[0], outputs[0].shape[1]
    differ = np.zeros(first.shape, bool)
    for other in outputs[1:]:
        differ |= first.view(np.uint32) != other.view(np.uint32)
    rows, cols = np.nonzero(differ & np.isfinite(first))
    for r, c in zip(rows[:STORED_OVER_LOOKS].tolist(), cols[:STORED_OVER_LOOKS].tolist()):
        got = np.array([float(output[r, c]) for output in outputs])
        if not np.isfinite(got).all():
            continue
        owners = sorted(set(sources_of(got, np.full(got.size, r * n + c), truth).tolist()))
        if len(owners) >= 2 and owners[0] >= 0:
            one, two = (f"C[{i // n}][{i % n}]" for i in owners[:2])
            return Finding(f"C[{r}][{c}] holds the value of {one} after one launch and of {two} after another: the "
                           f"threads computing {one} and {two} both store C[{r}][{c}], and whichever stores last wins",
                           STORE_INDEX_FIX)
    return None


def _partial_edges(wrong: np.ndarray, tile: int) -> Finding | None:
    """Only the ragged edge is wrong. Said only where whole tiles exist beside the edge and are right: when
    m or n is smaller than one tile, every element is on the edge and the pattern implies no bound."""
    m, n = wrong.shape
    last_row_start, last_col_start = (m // tile) * tile, (n // tile) * tile
    # The rows and columns before the partial edge (all of them where there is none): no wrong element there
    # means every wrong element is on that edge.
    rows_before = last_row_start if m % tile != 0 and m > tile else m
    cols_before = last_col_start if n % tile != 0 and n > tile else n
    if not wrong[:, :cols_before].any():
        return Finding(f"only the last, partial tile column is wrong (columns {last_col_start}-{n - 1})",
                       "check the bound on B's column (col < n) when loading the B tile and storing C")
    if not wrong[:rows_before, :].any():
        return Finding(f"only the last, partial tile row is wrong (rows {last_row_start}-{m - 1})",
                       "check the bound on A's row (row < m) when loading the A tile and storing C")
    if not wrong[:rows_before, :cols_before].any():
        return Finding("only the partial tiles along the bottom and right edges are wrong",
                       "check the bounds row < m and col < n on the loads and on the store")
    return None


def _everywhere(tile_rows, tile_cols, grid_rows, grid_cols, m, n, k, tile, checked: str = "") -> Finding | None:
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
    return Finding(f"every {checked}tile of C has wrong elements ({m}×{n}×{k}, tile {tile})",
                   "check " + "; and ".join(causes))


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
