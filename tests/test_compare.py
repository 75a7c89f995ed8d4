"""The comparing stage: verdicts and diagnoses for outputs shaped like real kernel bugs."""
import numpy as np
import pytest

from grader.judge.compare import CaseRun, Truth, judge_case, truth_of
from grader.judge.inputs import guarded_c, make_inputs, split_guarded
from grader.judge.layout import GUARD_BEFORE, GUARD_BITS
from grader.judge.locate import STORE_INDEX_FIX, stored_over
from grader.judge.tolerance import EPS32, error_bound
from grader.result import ERROR, FAILED, PASSED

TILE = 16


def run_with(c: np.ndarray, m: int, n: int, **flags) -> CaseRun:
    buffer = guarded_c(m, n)
    split_guarded(buffer, m, n)[1][:] = c
    return CaseRun(buffer=buffer, reference=None, **flags)


def judge(a, b, c, **flags):
    m, n = c.shape
    return judge_case("case", 4, a, b, run_with(c, m, n, **flags), TILE, k_factor=1.0, abs_tol=1e-6)


def product(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def test_float32_product_passes_and_scores():
    a, b = make_inputs(70, 50, 300, seed=1, distribution="uniform")
    result = judge(a, b, product(a, b))
    assert result.status == PASSED and result.score == 4
    assert result.metrics["wrong_elements"] == 0


def test_unwritten_output_fails_as_never_written():
    a, b = make_inputs(32, 32, 32, seed=2, distribution="uniform")
    c = product(a, b)
    c[5:, :] = split_guarded(guarded_c(32, 32), 32, 32)[1][5:, :]  # rows the kernel never stored
    result = judge(a, b, c)
    assert result.status == FAILED and result.score == 0
    # The headline tells the wrong elements as they are: never written, not a max error over the right ones.
    assert ("864 of 1024 elements of C are wrong: all never written (they still hold the NaN the grader fills C "
            "with)") in result.message
    assert "off by" not in result.message and "error" not in result.message
    assert "C[5][0]: expected" in result.message
    assert "the elements never written sit in tile rows 0-1 and tile columns 0-1" in result.message


def test_headline_counts_unwritten_computed_nan_and_off_apart():
    """Each kind of wrong element is told as it is, and the error figures are over the finite wrong ones only."""
    a, b = make_inputs(32, 32, 32, seed=5, distribution="uniform")
    c = product(a, b)
    poison = split_guarded(guarded_c(32, 32), 32, 32)[1]
    c[0, :4] = poison[0, :4]  # never written
    c[1, :2] = np.nan  # a NaN the kernel computed (np.nan's bits are not the poison's)
    c[2, 0] = np.inf
    c[3, 5] += 2.5
    result = judge(a, b, c)
    assert ("8 of 1024 elements of C are wrong: 4 never written (they still hold the NaN the grader fills C with); "
            "3 NaN or infinite, stored by the kernel; 1 off by 2.5 (relative") in result.message
    assert result.metrics["never_written"] == 4 and result.metrics["stored_nonfinite"] == 3
    assert result.metrics["stray_stores"] == 0 and result.metrics["inputs_changed"] is False


def test_kernel_storing_nothing_is_told_so():
    a, b = make_inputs(20, 20, 20, seed=2, distribution="uniform")
    c = split_guarded(guarded_c(20, 20), 20, 20)[1].copy()
    result = judge(a, b, c)
    assert "400 of 400 elements of C are wrong: all never written" in result.message
    assert "the kernel stored nothing to C" in result.message


def test_garbage_everywhere_with_ragged_k_points_at_the_k_bounds():
    a, b = make_inputs(40, 40, 40, seed=12, distribution="uniform")
    padded_a = np.concatenate([a, np.ones((40, 8), np.float32)], axis=1)  # reads past column k
    padded_b = np.concatenate([b, np.ones((8, 40), np.float32)], axis=0)
    result = judge(a, b, product(padded_a, padded_b))
    assert "every tile of C has wrong elements" in result.message
    assert result.fixes[0].startswith("check the k bounds: when k is not a multiple of the tile")
    assert "strides" not in result.explained


def test_last_partial_tile_column_is_named():
    a, b = make_inputs(64, 67, 64, seed=3, distribution="uniform")
    c = product(a, b)
    c[:, 64:] = 0.0  # a missing col < n bound that zeroes the ragged edge
    result = judge(a, b, c)
    assert result.status == FAILED
    assert "only the last, partial tile column is wrong (columns 64-66)" in result.message
    truth = a.astype(np.float64) @ b.astype(np.float64)
    worst = np.abs(truth[:, 64:]).max()
    assert f"192 of 4288 elements of C are wrong: all off by up to {worst:.3g} (relative 1)" in result.message
    assert "col < n" in result.explained


def test_last_partial_tile_row_is_named():
    a, b = make_inputs(67, 64, 64, seed=4, distribution="uniform")
    c = product(a, b)
    c[64:, :] += 1.0
    result = judge(a, b, c)
    assert "only the last, partial tile row is wrong (rows 64-66)" in result.message


def test_truncated_phase_count_is_diagnosed():
    m, n, k = 64, 64, 67
    a, b = make_inputs(m, n, k, seed=5, distribution="uniform")
    c = product(a[:, :64], b[:64, :])  # what k / TILE phases (rounded down) computes
    result = judge(a, b, c)
    assert result.status == FAILED
    assert "last, partial tile phase" in result.message and "(k + TILE - 1) / TILE" in result.explained


@pytest.mark.parametrize("spoiled_rows", [slice(0, 1), slice(40, 48), slice(63, 64)])
def test_the_truncated_phase_hint_needs_every_part_of_c_to_fit_it(spoiled_rows):
    """The hint is tried on a sample of the wrong elements spread over all of them: rows that are wrong
    some other way, first, in the middle or last, keep it from being given."""
    a, b = make_inputs(64, 64, 67, seed=5, distribution="uniform")
    c = product(a[:, :64], b[:64, :])
    c[spoiled_rows, :] += 1.0
    result = judge(a, b, c)
    assert result.status == FAILED and "last, partial tile phase" not in result.message


def test_wrong_stride_of_b_in_rectangular_case_points_at_strides():
    m, n, k = 48, 80, 64
    a, b = make_inputs(m, n, k, seed=6, distribution="uniform")
    flat = np.concatenate([b.ravel(), np.zeros(k * k, np.float32)])
    b_as_read = np.array([[flat[i * k + j] for j in range(n)] for i in range(k)], np.float32)  # B[i*k + j]
    result = judge(a, b, product(a, b_as_read))
    assert "every tile of C has wrong elements" in result.message
    assert "B[row * n + column]" in result.explained


def test_store_past_the_end_of_c_is_an_out_of_bounds_write():
    m, n, k = 20, 24, 8
    a, b = make_inputs(m, n, k, seed=7, distribution="uniform")
    run = run_with(product(a, b), m, n)
    after = split_guarded(run.buffer, m, n)[2]
    after[3] = 1.5  # lands where C[20][3] would be
    result = judge_case("case", 4, a, b, run, TILE, 1.0, 1e-6)
    assert result.status == FAILED
    assert "out-of-bounds write: 1 stores past the end of C" in result.message
    assert "C[20][3]" in result.message
    assert result.metrics["stray_stores"] == 1 and result.metrics["stored_nonfinite"] == 0


def test_store_before_c_is_reported():
    a, b = make_inputs(16, 16, 16, seed=8, distribution="uniform")
    run = run_with(product(a, b), 16, 16)
    run.buffer[GUARD_BEFORE - 2] = 0.0
    result = judge_case("case", 4, a, b, run, TILE, 1.0, 1e-6)
    assert "stores before the start of C" in result.message and result.metrics["stray_stores"] == 1


def test_untouched_guards_hold_the_guard_pattern():
    buffer = guarded_c(3, 5)
    before, c, after = split_guarded(buffer, 3, 5)
    assert (before.view(np.uint32) == GUARD_BITS).all() and (after.view(np.uint32) == GUARD_BITS).all()
    assert np.isnan(c).all()


def test_writing_into_b_fails_even_with_a_correct_c():
    a, b = make_inputs(16, 16, 16, seed=9, distribution="uniform")
    result = judge(a, b, product(a, b), b_changed=True)
    assert result.status == FAILED and "wrote into B" in result.message and result.metrics["inputs_changed"] is True


def test_tolerance_scales_with_k():
    m, n, k = 8, 8, 4096
    a, b = make_inputs(m, n, k, seed=10, distribution="uniform")
    truth = a.astype(np.float64) @ b.astype(np.float64)
    bound = error_bound(a.astype(np.float64), b.astype(np.float64), 1.0, 1e-6)
    assert bound.min() > 1e-6 + 100 * EPS32  # a long dot product earns more room than a short one
    assert judge(a, b, (truth + 0.5 * bound).astype(np.float32)).status == PASSED
    assert judge(a, b, (truth + 3.0 * bound).astype(np.float32)).status == FAILED


def test_reference_disagreeing_with_truth_is_a_grader_error():
    a, b = make_inputs(16, 16, 16, seed=11, distribution="uniform")
    run = run_with(product(a, b), 16, 16)
    run.reference = product(a, b) + 1.0
    result = judge_case("case", 4, a, b, run, TILE, 1.0, 1e-6)
    assert result.status == ERROR and "reference kernel" in result.message


def test_inputs_are_reproducible_from_the_seed():
    first, second = make_inputs(5, 6, 7, 42, "normal"), make_inputs(5, 6, 7, 42, "normal")
    assert all(np.array_equal(x, y) for x, y in zip(first, second))
    assert not np.array_equal(first[0], make_inputs(5, 6, 7, 43, "normal")[0])
    with pytest.raises(ValueError):
        make_inputs(1, 1, 1, 0, "cauchy")


@pytest.mark.parametrize("m, n, k", [(5, 7, 3), (13, 17, 9)])
def test_no_bound_hint_when_no_tile_phase_ran(m, n, k):
    """k smaller than one tile and a phase count that rounds down: C is all 0. Every element sits on the
    ragged edge, but that implies no missing bound; the cause is that no phase ran."""
    a, b = make_inputs(m, n, k, seed=7, distribution="uniform")
    result = judge(a, b, np.zeros((m, n), np.float32))
    assert result.status == FAILED
    assert f"no tile phase ran, as k = {k} is smaller than one tile (16)" in result.message
    assert "col < n" not in result.explained and "row < m" not in result.explained


def test_a_matrix_thinner_than_a_tile_gets_no_edge_hint():
    """n = 1: the only tile column is the partial one, so 'only the last column is wrong' says nothing."""
    a, b = make_inputs(80, 1, 96, seed=8, distribution="uniform")
    c = product(a, b) + 1.0
    result = judge(a, b, c)
    assert result.status == FAILED and "col < n" not in result.explained


def test_right_sums_stored_at_the_wrong_place_are_recognised_by_their_values():
    """A transposed store (C[col * m + row]) leaves every sum right and in another element: the values show
    it on any backend, with no writer recorded."""
    a, b = make_inputs(48, 48, 40, seed=9, distribution="normal")
    c = (a @ b).T.copy()  # float32 sums, in another order than the truth's
    result = judge(a, b, c)
    assert "C[0][1] holds" in result.message and "the value C[1][0] should hold" in result.message
    assert "the sums are right, and stored at the wrong place" in result.message
    assert result.fixes == [STORE_INDEX_FIX]


def test_wrong_values_are_not_taken_for_misplaced_ones():
    """B read with row stride k instead of n: the sums are wrong, and none is another element's."""
    m, n, k = 40, 56, 72
    a, b = make_inputs(m, n, k, seed=10, distribution="uniform")
    flat = np.resize(b.ravel(), k * k + n)
    strided = np.stack([flat[r * k: r * k + n] for r in range(k)])
    result = judge(a, b, product(a, strided))
    assert "holds" not in result.message and "every tile of C has wrong elements" in result.message


def test_launches_that_disagree_on_an_element_show_the_two_threads_storing_it():
    """On the GPU, two threads storing one element leave either's sum in it, launch by launch: the values name
    both elements those threads compute."""
    a, b = make_inputs(32, 40, 24, seed=11, distribution="uniform")
    truth = truth_of(a, b, 1.0, 1e-6)
    first, second = product(a, b), product(a, b)
    first[0, 5], second[0, 5] = first[1, 0], second[2, 3]  # C[0][5] stored by the threads of C[1][0] and C[2][3]
    found = stored_over([first, second], truth)
    assert found.fact == ("C[0][5] holds the value of C[1][0] after one launch and of C[2][3] after another: the "
                          "threads computing C[1][0] and C[2][3] both store C[0][5], and whichever stores last wins")
    assert found.fix == STORE_INDEX_FIX
    noisy = product(a, b)
    noisy[0, 5] += 0.37  # launches that disagree on a value that is no element's: nothing to say
    assert stored_over([first, noisy], truth) is None


def test_the_source_search_finds_what_looking_at_every_element_finds():
    """sources_of looks only beside where each value falls in the sorted truth (a class's wrong kernels made
    the search over every close element most of a batch worker's CPU): the same answers as looking at all."""
    from grader.judge.locate import SEPARATION, sources_of

    def by_every_element(got, own, truth):
        values, bounds = truth.value.ravel(), truth.bound.ravel()
        found = np.full(got.size, -1)
        for i, value in enumerate(got):
            distance = np.abs(value - values)
            distance[distance > bounds.max()] = np.inf  # only values within the widest bound are candidates
            first, second = np.argsort(distance, kind="stable")[:2] if values.size > 1 else (0, None)
            near, runner_up = distance[first], np.inf if second is None else distance[second]
            if np.isfinite(near) and first != own[i] and near <= bounds[first] and runner_up > SEPARATION * near:
                found[i] = first
        return found

    rng = np.random.default_rng(26)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        value = (rng.integers(-4, 4, size=(n, n)).astype(np.float64) if trial % 3 == 0  # many equal values
                 else rng.normal(size=(n, n)) * rng.uniform(0.1, 100))
        truth = Truth(value, np.abs(rng.normal(size=(n, n))) * 10 ** rng.uniform(-7, 0))
        got = value.ravel()[rng.integers(0, n * n, 16)] + rng.normal(size=16) * 10 ** rng.uniform(-9, 0)
        own = rng.integers(0, n * n, 16)
        assert sources_of(got, own, truth).tolist() == by_every_element(got, own, truth).tolist(), trial
