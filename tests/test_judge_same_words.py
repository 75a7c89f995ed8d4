"""The judge made cheaper (issue 50: a batch worker's judging CPU) says exactly what it said before: each faster
piece against the straightforward computation it replaced, on outputs shaped like real kernels' bugs."""
import numpy as np
import pytest

from grader.cases import Case
from grader.config import Config
from grader.judge import truths
from grader.judge.compare import (
    Truth,
    _error_figures,
    _errors,
    _finite_max,
    _how_wrong,
    sampled_truth_of,
    stable_argsort,
    truth_of,
    wrong_mask,
)
from grader.judge.inputs import make_inputs
from grader.judge.layout import POISON_BITS
from grader.judge.locate import _partial_edges, _tiles_with
from grader.judge.tolerance import within

TILE = 16
M, N, K = 259, 253, 131  # ragged in every dimension, as large_ragged is
POISON = np.array(POISON_BITS, np.uint32).view(np.float32)
SOME_TILES = [(0, 0), (3, 7), *((16, c) for c in range(16)), *((r, 15) for r in range(17))]  # the edges, and two
EDGE_WORDS = {"column": "last, partial tile column", "row": "last, partial tile row", "both": "partial tiles along"}


def bugs(a, b) -> dict[str, np.ndarray]:
    """C as kernels with the usual bugs leave it (bench/judge_cpu.py's patterns, smaller), and with some elements
    never written or NaN and inf stored."""
    rng = np.random.default_rng(50)
    right = (a @ b).astype(np.float32)
    m, n = right.shape
    scattered = right.copy()  # a missing barrier: a fifth of the elements off
    spots = rng.random((m, n)) < 0.2
    scattered[spots] += rng.standard_normal(int(spots.sum())).astype(np.float32)
    strided = np.concatenate([b.ravel(), np.full(K * K, np.nan, np.float32)])[np.arange(K)[:, None] * K + np.arange(n)]
    edges = right.copy()
    edges[(m // TILE) * TILE:, :] += 1.0
    edges[:, (n // TILE) * TILE:] += 1.0
    mixed = scattered.copy()
    mixed[::7, ::5] = POISON
    mixed[3, :9] = np.inf
    mixed[5, 2:4] = np.nan
    return {"right": right, "missing_barrier": scattered, "wrong_stride": (a @ strided).astype(np.float32),
            "no_bounds": edges, "misplaced": np.roll(right, 1, axis=1), "unwritten_and_nonfinite": mixed,
            "nothing_stored": np.full((m, n), POISON)}


@pytest.fixture(scope="module")
def case():
    a, b = make_inputs(M, N, K, 601, "normal")
    whole = truth_of(a, b, 4.0, 1e-5)
    return a, b, whole, sampled_truth_of(a, b, SOME_TILES, TILE, 4.0, 1e-5, "some tiles")


def reference_wrong_mask(c, truth):
    wrong = ~within(c, truth.value, truth.bound)
    return wrong if truth.checked is None else wrong & truth.checked


def reference_error_figures(c, truth, wrong) -> dict:
    checked = slice(None) if truth.checked is None else truth.checked
    diff = np.abs(c[checked].astype(np.float64) - truth.value[checked])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / np.maximum(np.abs(truth.value[checked]), 1e-30)
    bad = c[wrong]
    unwritten = bad.view(np.uint32) == POISON_BITS

    def finite_max(values):
        finite = values[np.isfinite(values)]
        return float(finite.max()) if finite.size else None
    return {"wrong_elements": int(bad.size), "never_written": int(unwritten.sum()),
            "stored_nonfinite": int((~np.isfinite(bad) & ~unwritten).sum()),
            "max_abs_error": finite_max(diff), "max_rel_error": finite_max(rel)}


def reference_how_wrong(c, truth, wrong) -> str:
    unwritten = c.view(np.uint32) == POISON_BITS
    never, finite = wrong & unwritten, wrong & np.isfinite(c)
    stored_nonfinite = wrong & ~unwritten & ~finite

    def count(part):
        return "all" if int(part.sum()) == int(wrong.sum()) and part.sum() > 1 else str(int(part.sum()))
    parts = []
    if never.any():
        parts.append(f"{count(never)} never written (they still hold the NaN the grader fills C with)")
    if stored_nonfinite.any():
        parts.append(f"{count(stored_nonfinite)} NaN or infinite, stored by the kernel")
    if finite.any():
        diff = np.abs(c[finite].astype(np.float64) - truth.value[finite])
        rel = diff / np.maximum(np.abs(truth.value[finite]), 1e-30)
        parts.append(f"{count(finite)} off by {'up to ' if finite.sum() > 1 else ''}{diff.max():.3g} "
                     f"(relative {rel.max():.3g})")
    return "; ".join(parts)


def reference_partial_edges(rows, cols, m, n, tile) -> str | None:
    in_last_rows = (m % tile != 0) & (m > tile) & (rows >= (m // tile) * tile)
    in_last_cols = (n % tile != 0) & (n > tile) & (cols >= (n // tile) * tile)
    if in_last_cols.all():
        return "column"
    if in_last_rows.all():
        return "row"
    if (in_last_rows | in_last_cols).all():
        return "both"
    return None


@pytest.mark.parametrize("pattern", ["right", "missing_barrier", "wrong_stride", "no_bounds", "misplaced",
                                     "unwritten_and_nonfinite", "nothing_stored"])
@pytest.mark.parametrize("scope", ["whole", "sampled"])
def test_the_errors_and_their_figures_are_what_the_plain_computation_gives(case, pattern, scope):
    a, b, whole, sampled = case
    c = bugs(a, b)[pattern]
    truth = Truth(whole.value, whole.bound) if scope == "whole" else sampled
    wrong = reference_wrong_mask(c, truth)
    diff, fast_wrong = _errors(c, truth)
    assert np.array_equal(fast_wrong, wrong) and np.array_equal(wrong_mask(c, truth), wrong)
    assert _error_figures(c, truth, fast_wrong, diff) == reference_error_figures(c, truth, wrong)
    if wrong.any():
        assert _how_wrong(c[wrong], truth.value[wrong]) == reference_how_wrong(c, truth, wrong)


@pytest.mark.parametrize("pattern", ["missing_barrier", "wrong_stride", "no_bounds", "misplaced"])
def test_where_the_wrong_elements_sit_is_what_every_elements_row_and_column_give(case, pattern):
    a, b, whole, _ = case
    wrong = reference_wrong_mask(bugs(a, b)[pattern], whole)
    rows, cols = np.nonzero(wrong)
    assert _tiles_with(wrong.any(axis=1), TILE) == np.unique(rows // TILE).tolist()
    assert _tiles_with(wrong.any(axis=0), TILE) == np.unique(cols // TILE).tolist()
    expected, said = reference_partial_edges(rows, cols, M, N, TILE), _partial_edges(wrong, TILE)
    assert (said is None) == (expected is None)
    assert said is None or EDGE_WORDS[expected] in said.fact


@pytest.mark.parametrize("m, n", [(259, 253), (7, 253), (259, 5), (256, 253), (259, 256), (256, 256)])
def test_the_partial_edge_is_told_exactly_where_every_wrong_element_is_on_it(m, n):
    rng = np.random.default_rng(m * n)
    for trial in range(60):
        wrong = np.zeros((m, n), bool)
        rows_from, cols_from = int(rng.integers(0, m)), int(rng.integers(0, n))
        region = [wrong[rows_from:, :], wrong[:, cols_from:], wrong[rows_from:, cols_from:], wrong][trial % 4]
        region[...] = rng.random(region.shape) < 0.3
        rows, cols = np.nonzero(wrong)
        expected = reference_partial_edges(rows, cols, m, n, TILE)
        said = _partial_edges(wrong, TILE)
        assert (said is None) == (expected is None), trial
        assert said is None or EDGE_WORDS[expected] in said.fact, trial


def test_the_faster_sort_orders_the_truth_as_the_stable_sort_does(case):
    rng = np.random.default_rng(3)
    for trial in range(300):
        size = int(rng.integers(0, 300))
        values = rng.integers(-3, 4, size).astype(float) if trial % 3 == 0 else rng.standard_normal(size)
        if trial % 5 == 0 and size:
            values[rng.integers(0, size, size // 3)] = np.nan
        if trial % 7 == 0 and size:
            values[rng.integers(0, size, size // 3)] = -0.0  # equal to 0.0, a tie to keep in index order
        assert np.array_equal(stable_argsort(values), np.argsort(values, kind="stable")), trial
    value = case[2].value.ravel()
    assert np.array_equal(stable_argsort(value), np.argsort(value, kind="stable"))


def test_the_finite_maximum_is_the_largest_finite_value():
    rng = np.random.default_rng(4)
    for trial in range(200):
        values = rng.standard_normal(int(rng.integers(0, 40)))
        values[rng.random(values.size) < [0, 0.1, 0.5, 1][trial % 4]] = [np.nan, np.inf, -np.inf][trial % 3]
        finite = values[np.isfinite(values)]
        assert _finite_max(values) == (float(finite.max()) if finite.size else None), trial


def test_a_kept_sampled_truth_is_the_made_one_byte_for_byte(tmp_path):
    """The truth of a sampled case's checked tiles is read from the cache as it was made; a damaged file is made
    again, never trusted."""
    config = Config()
    config.compile.cache_dir = str(tmp_path)
    case = Case("big", M, N, K, 601, 4, distribution="normal")
    a, b, made = truths.sampled_case_truth(case, config, SOME_TILES, TILE, "some tiles")
    fresh = sampled_truth_of(a, b, SOME_TILES, TILE, config.tolerance.k_factor, config.tolerance.abs, "some tiles")
    kept = list((tmp_path / "truths").glob("sampled-*.npz"))
    assert len(kept) == 1
    for damage in (None, b"not an npz"):
        if damage:
            kept[0].write_bytes(damage)
        truths._sampled_truth.cache_clear()
        _, _, read = truths.sampled_case_truth(case, config, SOME_TILES, TILE, "some tiles")
        for got in (made, read):
            assert got.scope == "some tiles"
            for name in ("value", "bound", "checked"):
                assert getattr(got, name).tobytes() == getattr(fresh, name).tobytes(), name


def test_the_wrong_elements_kept_for_a_second_emulation_are_the_spread_every_wrong_elements_position_gives(
        case, tmp_path):
    from grader.judge.inputs import guarded_c, split_guarded
    from grader.run_events import WRONG_KEPT, RunEvents

    a, b, whole, _ = case
    large = Case("big", M, N, K, 601, 4, distribution="normal", cpu="sampled")
    events = RunEvents(Config(), [large], tmp_path)
    buffers = {}
    for pattern, c in bugs(a, b).items():
        buffers[pattern] = guarded_c(M, N)
        split_guarded(buffers[pattern], M, N)[1][:] = c
    for pattern in ("missing_barrier", "wrong_stride", "no_bounds"):
        buffer = buffers[pattern]
        events._keep_wrong_at(large, [buffers["right"], buffer], whole)  # the first launch right: the second's
        rows, cols = np.nonzero(reference_wrong_mask(split_guarded(buffer, M, N)[1], whole))
        pick = np.unique(np.linspace(0, rows.size - 1, min(WRONG_KEPT, rows.size)).astype(np.int64))
        kept = events.wrong_at["big"]
        assert np.array_equal(kept[0], rows[pick]) and np.array_equal(kept[1], cols[pick]), pattern


def test_a_kept_order_is_the_stable_sort_of_the_truth_and_a_damaged_one_is_sorted_again(tmp_path):
    """A whole truth's values' order (the search for misplaced values) is kept beside it when it is made, read
    back by a worker that needs it, and sorted again where the file is damaged or gone."""
    config = Config()
    config.compile.cache_dir = str(tmp_path)
    case = Case("big", M, N, K, 601, 4, distribution="normal")
    _, _, made = truths.case_truth(case, config)
    expected = np.argsort(made.value.ravel(), kind="stable")
    kept = list((tmp_path / "truths").glob("*.order"))
    assert len(kept) == 1
    for damage in (None, b"not an npz", None):
        if damage:
            kept[0].write_bytes(damage)
        truths._case_truth.cache_clear()
        _, _, read = truths.case_truth(case, config)
        assert np.array_equal(read.order, expected)
    kept[0].unlink()
    truths._case_truth.cache_clear()
    assert np.array_equal(truths.case_truth(case, config)[2].order, expected) and kept[0].exists()


def test_grade_prepare_keeps_the_truth_of_the_tiles_every_grade_checks_for_each_tile_size(tmp_path):
    from grader.cases import sample_seed
    from grader.execute.cpu.sampling import BlockSample, sampled_tiles
    from grader.prepare import warm_sampled_truths

    config = Config()
    config.compile.cache_dir = str(tmp_path)
    config.kernel.tile_sizes = [8, 16]
    large, small = Case("big", 300, 280, 40, 601, 4, cpu="sampled"), Case("small", 20, 20, 20, 1, 4)
    assert warm_sampled_truths([large, small], config, truths) == 1
    assert len(list((tmp_path / "truths").glob("sampled-*.npz"))) == 2  # one per tile size, of the sampled case
    for tile in (8, 16):  # what a grade's judge asks for (run_events.RunEvents._truth) is what was kept
        tiles = sampled_tiles(large.m, large.n, tile, BlockSample(sample_seed(large), config.sampling.interior_blocks))
        truths._sampled_truth.cache_clear()
        a, b, kept = truths.sampled_case_truth(large, config, tiles.all, tile, tiles.describe())
        made = sampled_truth_of(a, b, tiles.all, tile, config.tolerance.k_factor, config.tolerance.abs, "")
        assert kept.value.tobytes() == made.value.tobytes() and kept.checked.tobytes() == made.checked.tobytes()
    assert len(list((tmp_path / "truths").glob("sampled-*.npz"))) == 2  # read, none made again


def test_the_search_of_the_sorted_truth_finds_what_searchsorted_on_it_finds():
    from grader.judge.locate import sorted_search

    rng = np.random.default_rng(5)
    for trial in range(300):
        size = int(rng.integers(0, 200))
        values = rng.integers(-3, 4, size).astype(float) if trial % 2 else rng.standard_normal(size)
        if trial % 5 == 0 and size:
            values[rng.integers(0, size, size // 4)] = np.nan
        targets = np.concatenate([rng.choice(values, 8) if size else [], rng.normal(size=8) * 3, [np.nan, np.inf]])
        order = np.argsort(values, kind="stable")
        for side in ("left", "right"):
            expected = np.searchsorted(values[order], targets, side)
            assert np.array_equal(sorted_search(values, order, targets, side), expected), (trial, side)
