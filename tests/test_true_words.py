"""Words from the code, never tautologies: an index of sizes and constants told as where it lands, a guard quoted
only where it names the index's own variables, and phase-count advice only where the emulator's trip count shows
the count wrong. Each kernel is in tests/submissions (README: its verdict)."""
import json
import re

import numpy as np
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.execute.cpu.evidence import ROW, Program, _index_fix
from grader.execute.cpu.sites import STORE, Site, Sites
from grader.judge.locate import ROUND_UP, locate_errors
from grader.report.student_view import what_to_fix
from grader.result import CASE, PASSED, SKIPPED

# `m < m`, `4096 < 4096`, `p * T + tx < p * T + tx`: an operand compared with itself (not `a < b`, nor `x < x2`).
SELF_COMPARED = re.compile(r"(?<![\w.\])])([A-Za-z_0-9][\w.]*(?: [-+*/] [\w.]+)*) < \1(?![\w.\[(])")


def words(result) -> str:
    """Everything a report of the result can say: each check's message and fixes, the advice, the headline."""
    return json.dumps(result.to_dict(), ensure_ascii=False) + "\n".join(what_to_fix(result))


def failing(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == CASE and c.status not in (PASSED, SKIPPED)}


def test_the_pattern_finds_what_it_must_and_nothing_else():
    assert SELF_COMPARED.search("which does not keep m < m and 4096 < n")
    assert SELF_COMPARED.search("store it only where p * T + tx < p * T + tx")
    assert not SELF_COMPARED.search("store it only where row < m and col < n; k < kk; As[m] < m")


@needs_cxx
def test_a_constant_index_past_c_is_told_as_where_it_lands(graders):
    result = graders("cpu")(SUBMISSIONS / "store_constant_past_c")
    told = failing(result)
    assert told and all(c.unsafe == ["out_of_bounds"] or "out-of-bounds write" in c.message for c in told.values())
    fix = ("line 38 stores C[m * n + 4096], 4096 elements past C's end (C holds m × n elements): no thread may store "
           "there")
    assert all(c.fixes == [fix] for c in told.values()), {c.name: c.fixes for c in told.values()}
    assert "row == 0 && col == 0" not in "".join(f for c in told.values() for f in c.fixes)
    assert not SELF_COMPARED.search(words(result))


def test_a_guard_of_other_variables_is_not_quoted_as_bounding_the_index():
    """`tx < 16` names nothing of C[row * n + col]: the store has no bound on its index, and is told so."""
    site = Site(0, 22, "C", STORE, "C[row * n + col]", row="row", stride="n", column="col", guard="tx < 16")
    program = Program(Sites((site,)), 16, (("C", "C"), ("m", "m"), ("n", "n"), ("k", "k")))
    assert _index_fix(site, "C", ROW, program) == ("line 22 stores C[row * n + col] with no bound: store it only "
                                                    "where row < m and col < n")
    named = Site(0, 22, "C", STORE, "C[row * n + col]", row="row", stride="n", column="col", guard="row < m",
                 bounded=frozenset({("row", "m")}))
    assert "where `row < m`, which does not keep col < n" in _index_fix(named, "C", ROW, program)


@needs_cxx
def test_an_inner_guard_on_the_threads_index_is_told_and_the_phase_count_is_not(graders):
    """Its phase count is right (the emulator counts the trips): the cause is the guard, at its line."""
    result = graders("cpu")(SUBMISSIONS / "inner_guard_thread_index")
    told = failing(result)
    assert {"ragged_k", "k_one", "sub_tile"} <= set(told) and "square_64" not in told
    fix = ("line 31 guards each term of the dot product with `p * TILE_SIZE + tx < k`: it tests the thread's own tx, "
           "so a thread drops every term of a phase or none: test the term's index, `p * TILE_SIZE + i < k`")
    assert all(c.fixes == [fix] for c in told.values()), {c.name: c.fixes for c in told.values()}
    assert "the tile loop at line 18 runs ceil(k / 16) = 5 times, as it must" in told["ragged_k"].message
    assert ROUND_UP not in words(result) and "round the phase count" not in words(result)


@needs_cxx
def test_the_truncated_phase_count_is_still_told_where_the_trips_show_it(graders):
    result = graders("cpu")(SUBMISSIONS / "truncated_phases")
    fixes = {f for c in failing(result).values() for f in c.fixes}
    assert any("must run ceil(k / 16) times" in f or f == ROUND_UP for f in fixes), fixes


@needs_cxx
def test_no_message_of_any_corpus_kernel_compares_an_expression_with_itself(graders):
    grade = graders("cpu")
    folders = sorted(p for p in SUBMISSIONS.iterdir() if p.is_dir())
    grade.prefetch(folders)
    found = {folder.name: match.group(0) for folder in folders
             if (match := SELF_COMPARED.search(words(grade(folder))))}
    assert found == {}


@pytest.mark.gpu
@needs_gpu
@needs_cxx
@pytest.mark.parametrize("name", ["inner_guard_thread_index", "store_constant_past_c"])
def test_on_the_gpu_the_cases_the_emulator_runs_are_told_as_on_the_cpu(graders, name):
    """The GPU decides the values; the emulator's words explain the cases it runs (judge/engines.py)."""
    on_gpu, on_cpu = failing(graders("gpu")(SUBMISSIONS / name)), failing(graders("cpu")(SUBMISSIONS / name))
    assert {case: on_gpu[case].fixes for case in on_cpu} == {case: check.fixes for case, check in on_cpu.items()}
    assert not any(ROUND_UP in fix for check in on_gpu.values() for fix in check.fixes if check.name in on_cpu)


def test_a_c_over_whole_tiles_only_is_a_phase_count_only_where_the_trips_are_not_known_right():
    """The pattern alone suggests rounding down; the emulator's trip count, where it shows ceil(k / TILE), rules
    that out (judge/locate.py)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((20, 20)).astype(np.float32), rng.standard_normal((20, 20)).astype(np.float32)
    c = (a[:, :16] @ b[:16, :]).astype(np.float32)  # the last, partial phase (4 terms) skipped everywhere
    wrong, unwritten = np.ones_like(c, dtype=bool), np.zeros_like(c, dtype=bool)
    assert locate_errors(wrong, unwritten, c, a, b, 16, 4.0, 1e-5).fix == ROUND_UP
    assert locate_errors(wrong, unwritten, c, a, b, 16, 4.0, 1e-5, phase_count_right=True).fix != ROUND_UP
