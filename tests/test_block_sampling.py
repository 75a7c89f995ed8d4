"""Block sampling (issues 47, 49): a case too large to emulate whole runs on the CPU by its edge blocks and a
sample of its interior ones drawn by a seed only the grading secret decides, each block emulated and instrumented
as a small case's are; every element of those blocks' tiles of C is checked against a float64 truth of just those
elements."""
from dataclasses import replace

import numpy as np
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx

from grader.cases import SAMPLED, SKIP, WHOLE, Case, load_cases, sample_seed, with_secret
from grader.config import load_config
from grader.contract import COLUMNS, ROWS
from grader.errors import ConfigError
from grader.execute.child_run import run_child
from grader.execute.cpu.sampling import BlockSample, launched_blocks, sampled_tiles, tiles_of_elements
from grader.intake.submission import read_submission
from grader.judge.compare import CaseRun, judge_case, sampled_truth_of, truth_of
from grader.judge.inputs import guarded_c, make_inputs, split_guarded
from grader.pipeline import RunPlan, grade
from grader.result import ERROR, FAILED, PASSED, SKIPPED

TILE = 16
TRAP_TILE = (11, 9)  # trap_one_interior_block traps in blockIdx (9, 11): tile row 11, tile column 9 of C


def test_every_edge_tile_and_the_corner_are_run_and_the_interior_is_sampled():
    tiles = sampled_tiles(1031, 1009, TILE, BlockSample(seed=1, interior=32))
    assert set(tiles.edge) == {(64, c) for c in range(64)} | {(r, 63) for r in range(65)} | {(0, 0)}  # 65 × 64 tiles
    assert (64, 63) in tiles.edge
    assert len(tiles.interior) == 32 and all(r < 64 and c < 63 for r, c in tiles.interior)
    assert len(tiles.all) == 161
    assert tiles.describe() == "the 129 edge tiles and 32 sampled interior tiles of 4,160"


def test_a_square_grids_interior_sample_holds_each_tiles_transpose():
    """A kernel that takes its row from blockIdx.x computes tile (c, r) in block (r, c): right on a square C."""
    tiles = sampled_tiles(512, 512, TILE, BlockSample(seed=3, interior=16))
    assert {(c, r) for r, c in tiles.all} == set(tiles.all) and 16 <= len(tiles.interior) <= 32


def test_a_small_grid_runs_every_interior_tile_when_the_sample_asks_for_more():
    tiles = sampled_tiles(64, 64, TILE, BlockSample(seed=1, interior=32))
    assert len(tiles.all) == 16 and tiles.describe() == "the 8 edge tiles and 8 sampled interior tiles of 16"


def test_which_interior_tiles_depends_on_the_secret():
    case = Case("large_ragged", 1031, 1009, 1013, 601, 6)
    drawn = {secret: sampled_tiles(1031, 1009, TILE, BlockSample(sample_seed(with_secret([case], secret)[0]), 32))
             for secret in ("one", "two")}
    assert drawn["one"].interior != drawn["two"].interior
    again = sampled_tiles(1031, 1009, TILE, BlockSample(sample_seed(with_secret([case], "one")[0]), 32))
    assert again == drawn["one"]  # the parent and the driver compute the same tiles from the same sample


def test_the_tiles_where_the_gpu_found_wrong_elements_are_run_too():
    extra = tiles_of_elements([5, 6, 700, 20], [30, 31, 500, 40], TILE, most=8)
    assert extra == ((0, 1), (1, 2), (43, 31))
    tiles = sampled_tiles(1031, 1009, TILE, BlockSample(seed=1, interior=0, extra=extra + ((64, 0), (99, 99))))
    assert tiles.extra == extra  # the edge tile (64, 0) is run anyway; (99, 99) is not in C
    assert "3 tiles where the GPU found wrong elements" in tiles.describe()


def test_blocks_are_launched_as_the_contract_launches_them():
    assert launched_blocks([(2, 5)], COLUMNS) == [(5, 2)]  # blockIdx.x over C's columns
    assert launched_blocks([(2, 5)], ROWS) == [(2, 5)]


def test_a_sampled_truth_is_the_whole_truth_on_its_tiles():
    a, b = make_inputs(50, 40, 30, 7, "uniform")
    tiles = [(0, 0), (6, 4), (3, 2)]  # (6, 4) is the corner: 2 rows × 8 columns of it lie in C
    sampled, whole = sampled_truth_of(a, b, tiles, 8, 1.0, 1e-6, "three tiles"), truth_of(a, b, 1.0, 1e-6)
    assert int(sampled.checked.sum()) == 64 + 16 + 64
    assert np.allclose(sampled.value[sampled.checked], whole.value[sampled.checked], rtol=1e-12, atol=0)
    assert np.allclose(sampled.bound[sampled.checked], whole.bound[sampled.checked], rtol=1e-12, atol=0)


def test_a_sampled_case_is_judged_on_its_tiles_alone():
    m, n, k = 100, 90, 20
    a, b = make_inputs(m, n, k, 3, "uniform")
    tiles = sampled_tiles(m, n, 8, BlockSample(seed=4, interior=5))
    truth = sampled_truth_of(a, b, tiles.all, 8, 1.0, 1e-6, tiles.describe())
    right = guarded_c(m, n)  # C's poison where no block ran, the truth in the tiles that did
    split_guarded(right, m, n)[1][truth.checked] = truth.value[truth.checked]

    def judged(output):
        return judge_case("big", 4, a, b, CaseRun(output, None), 8, 1.0, 1e-6, truth=truth)

    passed = judged(right)
    assert passed.status == PASSED, passed.message
    assert passed.message == f"correct (100×90×20): {tiles.describe()}; every element of them right"
    wrong = right.copy()
    r, col = np.argwhere(truth.checked)[7]
    split_guarded(wrong, m, n)[1][r, col] += 1.0
    failed = judged(wrong)
    assert failed.status == FAILED
    assert (f"1 of the {int(truth.checked.sum()):,} elements of C checked ({tiles.describe()}) are wrong"
            in failed.message)
    assert failed.metrics["wrong_elements"] == 1


def _cases(tmp_path, text: str):
    (tmp_path / "cases.yaml").write_text(text)
    return load_cases(tmp_path)


def test_a_case_file_says_how_the_cpu_runs_each_case(tmp_path):
    cases = _cases(tmp_path, """cases:
  - {name: small, m: 64, n: 64, k: 64, seed: 1, points: 1}
  - {name: big, m: 1024, n: 1024, k: 1024, seed: 2, points: 1}
  - {name: forced_whole, m: 1024, n: 1024, k: 64, seed: 3, points: 1, cpu: whole}
  - {name: skipped, m: 64, n: 64, k: 64, seed: 4, points: 1, cpu: skip}
  - {name: old_spelling, m: 1024, n: 1024, k: 1024, seed: 5, points: 1, gpu_only: true}
""")
    assert [case.on_cpu for case in cases] == [WHOLE, SAMPLED, WHOLE, SKIP, SKIP]
    assert [case.emulated for case in cases] == [True, True, True, False, False]


@pytest.mark.parametrize("entry, key", [("cpu: sometimes", "cpu"), ("gpu_only: true, cpu: sampled", "gpu_only")])
def test_a_case_file_with_an_unknown_or_contradictory_cpu_choice_is_refused(tmp_path, entry, key):
    with pytest.raises(ConfigError, match=key):
        _cases(tmp_path, f"cases:\n  - {{name: x, m: 64, n: 64, k: 64, seed: 1, points: 1, {entry}}}\n")


def test_the_shipped_large_cases_run_by_sampled_blocks_on_the_cpu(config_file):
    config = load_config(config_file)
    sampled = [case.name for case in load_cases(config.testcases_dir) if case.sampled]
    assert sampled == ["square_512", "large_ragged", "large_hidden"]


# ---- on the CPU emulator ------------------------------------------------------------------------------------


def seed_that(sampling: bool, m: int, n: int, interior: int) -> int:
    """The first case seed whose interior sample holds (or, `sampling` false, leaves out) the trapping tile
    (test_sanitize_gpu.py's too)."""
    return next(seed for seed in range(1000)
                if (TRAP_TILE in sampled_tiles(m, n, TILE, BlockSample(sample_seed(Case("x", m, n, 48, seed, 1)),
                                                                       interior)).interior) == sampling)


@needs_cxx
def test_a_trap_in_one_interior_block_is_caught_when_that_block_is_sampled(config_file):
    config = load_config(config_file)
    config.sampling.interior_blocks = 4  # of the 144 interior tiles of a 13 × 13 grid
    m = n = 200
    hit, miss = (Case(name, m, n, 48, seed_that(sampled, m, n, 4), 5, cpu=SAMPLED)
                 for name, sampled in (("sampled_over_it", True), ("sampled_elsewhere", False)))
    result = grade(SUBMISSIONS / "trap_one_interior_block", config, [hit, miss], RunPlan("cpu"))
    checks = {check.name: check for check in result.checks if check.kind == "case"}
    caught = checks["sampled_over_it"]
    assert caught.status == ERROR and "trap" in caught.message and "(9, 11" in caught.message, caught.message
    assert "line 12" in caught.message, caught.message
    # Blocks no sample holds are not run: that one is right in every tile it checked.
    assert checks["sampled_elsewhere"].status == PASSED, checks["sampled_elsewhere"].message
    assert "every element of them right" in checks["sampled_elsewhere"].message


@needs_cxx
def test_a_wrong_bound_fails_the_large_ragged_case_at_its_edge_blocks_with_the_small_cases_cause(config_file):
    config = load_config(config_file)
    config.timeouts.run_s = 20  # one large case on a shared machine: its edge blocks, whatever the load
    cases = [case for case in load_cases(config.testcases_dir) if case.name in ("ragged_n", "large_ragged")]
    result = grade(SUBMISSIONS / "b_column_unbounded", config, cases, RunPlan("cpu"))
    checks = {check.name: check for check in result.checks if check.kind == "case"}
    small, large = checks["ragged_n"], checks["large_ragged"]
    assert small.status != PASSED and large.status == small.status, large.message
    assert "out-of-bounds read of B at line 19" in large.message, large.message
    assert large.fixes == small.fixes and large.unsafe == small.unsafe
    assert "block (63, " in large.message  # the last block column, where n = 1009 is ragged


@needs_cxx
def test_a_correct_kernel_scores_every_case_on_the_cpu(config_file):
    config = load_config(config_file)
    config.timeouts.run_s = 20
    cases = [case for case in load_cases(config.testcases_dir) if case.sampled]
    result = grade(SUBMISSIONS / "good_basic", config, cases, RunPlan("cpu"))
    checks = [check for check in result.checks if check.kind == "case"]
    assert [check.status for check in checks] == [PASSED] * 3, [check.message for check in checks]
    large = next(check for check in checks if check.name == "large_ragged")
    assert large.message.startswith("correct (1031×1009×1013): the 129 edge tiles and ")
    tiles = sampled_tiles(1031, 1009, TILE, BlockSample(sample_seed(cases[1]), config.sampling.interior_blocks))
    in_c = sum(min(TILE, 1031 - r * TILE) * min(TILE, 1009 - c * TILE) for r, c in tiles.all)  # edge tiles are partial
    assert large.metrics["checked_elements"] == in_c
    assert not any(check.status == SKIPPED and check.kind == "case" for check in result.checks)
    assert replace(result).needs_gpu_points == 0  # nothing is left for a GPU: timing by the speed model too


@needs_cxx
def test_the_tiles_where_the_gpu_found_wrong_elements_are_run_and_judged_beside_the_sample(config_file):
    """What a GPU grade asks of a second emulation (on_gpu.py): the extra tiles run, and the case is told by them."""
    config = load_config(config_file)
    config.sampling.interior_blocks = 0
    case = Case("large", 200, 200, 48, 7, 5, cpu=SAMPLED)
    submission = read_submission(SUBMISSIONS / "wrong_in_one_interior_block", [])
    run = run_child(submission, config, [case], "cpu", RunPlan("cpu"), extra_tiles={"large": (TRAP_TILE,)})
    check = run.made_cases()["large"]
    assert check.status == FAILED, check.message
    assert "256 of the" in check.message and "1 tile where the GPU found wrong elements" in check.message
    alone = run_child(submission, config, [case], "cpu", RunPlan("cpu")).made_cases()["large"]
    assert alone.status == PASSED, alone.message  # its edges alone are right
