"""End to end on a real GPU: every known submission gets the verdict it must get.

Marked `gpu`; skipped cleanly where there is no NVIDIA GPU or no pycuda.
"""
import json
import shutil
import time

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_gpu
from junitparser import Error, JUnitXml

from grader.cli import EXIT_NOT_GRADED, main
from grader.config import load_config
from grader.judge.engines import HUNG, hung_on_both
from grader.result import ERROR, FAILED, PASSED, SKIPPED

pytestmark = [
    pytest.mark.gpu,
    needs_gpu,
]


@pytest.fixture(scope="module")
def grade_one(graders):
    return graders("gpu")


def checks_of(result, kind=None):
    return {c.name: c for c in result.checks if kind is None or c.kind == kind}


@pytest.fixture
def reference_submission(tmp_path):
    folder = tmp_path / "reference_as_submission"
    folder.mkdir()
    shutil.copy(ROOT / "reference" / "kernel.cu", folder / "kernel.cu")
    return folder


def test_reference_gets_full_marks(grade_one, reference_submission):
    result = grade_one(reference_submission)
    not_passed = [(c.name, c.message) for c in result.checks if c.status != PASSED]
    assert not not_passed
    assert result.score == result.max_score == 100
    assert result.tile_size == 16 and result.device


@pytest.mark.parametrize("name, tile", [("good_basic", 16), ("good_tile8_renamed", 8),
                                        ("good_tile32_macro_sync", 32), ("slow_uncoalesced", 16),
                                        ("tile_width_named", 16), ("tile_const_int", 16), ("index_macro_pasting", 16),
                                        ("paste_helper_macro", 16),
                                        ("tile_custom_macro", 16)])
def test_good_submissions_pass_every_case(grade_one, name, tile):
    result = grade_one(SUBMISSIONS / name)
    assert result.tile_size == tile
    failing = [(c.name, c.message) for c in result.checks if c.kind != "timing" and c.status != PASSED]
    assert not failing
    # Tile 8 may be slower than the 16-wide reference, but it must have been timed with verified outputs.
    assert checks_of(result, "timing")["speed vs reference"].metrics["ratio"] > 0


def test_student_template_compiles_and_fails_the_cases(grade_one):
    result = grade_one(ROOT / "student_template")
    assert checks_of(result)["compile"].status == PASSED
    cases = checks_of(result, "case").values()
    assert cases and all(c.status == FAILED for c in cases)
    assert "the kernel stored nothing to C" in next(iter(cases)).message


@pytest.mark.parametrize("name, check, words", [
    ("missing_load_barrier", "barrier after loading tiles", "line"),
    ("missing_use_barrier", "barrier after using tiles", "line"),
    ("conditional_barrier", "barrier after loading tiles", "threadIdx"),
])
def test_barrier_mistakes_fail_their_static_check(grade_one, name, check, words):
    result = grade_one(SUBMISSIONS / name)
    assert checks_of(result)[check].status == FAILED
    assert words in checks_of(result)[check].message


def test_barriers_left_in_comments_do_not_count(grade_one):
    statics = checks_of(grade_one(SUBMISSIONS / "barrier_in_comment"), "static")
    assert statics["barrier after loading tiles"].status == FAILED
    assert statics["barrier after using tiles"].status == FAILED


def test_missing_bounds_checks_fail_ragged_cases_only(grade_one):
    cases = checks_of(grade_one(SUBMISSIONS / "no_bounds_checks"), "case")
    assert cases["square_64"].status == PASSED and cases["square_512"].status == PASSED
    for ragged in ("ragged_m", "ragged_n", "ragged_all", "primes_small"):
        assert cases[ragged].status in (FAILED, ERROR)
    messages = " ".join(c.message for c in cases.values())
    # told by the emulator beside the GPU (its loads read past A first), or by the GPU's own fault
    assert any(words in messages for words in ("out-of-bounds write", "out-of-bounds read", "illegal memory access"))


def test_wrong_stride_of_b_fails_rectangular_cases_and_says_so(grade_one):
    cases = checks_of(grade_one(SUBMISSIONS / "b_wrong_stride"), "case")
    assert cases["square_256"].status == PASSED
    # the emulator beside the GPU saw the stride the read used: its words, as on the CPU (test_cpu_grading.py)
    fix = ("line 19 reads B[(p * TILE_SIZE + ty) * k + col]: B's rows are n long, so its element "
           "[p * TILE_SIZE + ty][col] is B[(p * TILE_SIZE + ty) * n + col]")
    assert cases["rect_wide"].status == FAILED and cases["rect_wide"].fixes == [fix]
    # k > n: it also reads past B's end, which the emulator beside the GPU sees, with the stride B has
    tall = cases["rect_tall"]
    assert tall.status == ERROR and tall.unsafe == ["out-of-bounds read"] and tall.fixes == [fix]


def test_truncated_phase_count_is_diagnosed(grade_one):
    cases = checks_of(grade_one(SUBMISSIONS / "truncated_phases"), "case")
    assert cases["square_256"].status == PASSED
    assert cases["ragged_k"].status == FAILED  # the emulator beside the GPU counted the tile loop's trips
    assert "the tile loop at line 14 runs floor(k / 16) = 4 times here" in cases["ragged_k"].message


def test_store_outside_c_is_an_out_of_bounds_write(grade_one):
    cases = checks_of(grade_one(SUBMISSIONS / "store_outside_c"), "case")
    failing = [c for c in cases.values() if c.status == FAILED]
    assert failing and all("out-of-bounds write" in c.message for c in failing)


def test_hanging_kernel_times_out_without_taking_the_grader_down(grade_one, config_file):
    started = time.monotonic()
    result = grade_one(SUBMISSIONS / "hang")
    cases = list(checks_of(result, "case").values())
    timeouts = load_config(config_file).timeouts
    tries = 1 + timeouts.max_restarts  # each hang gets a fresh child for the rest
    limit = timeouts.gpu_hang_s  # a case on the GPU (the GPU is held alone meanwhile)
    # it hangs on both engines: the GPU's words, its own limit (the emulator beside it gives a case the GPU hung in
    # no more than that, once told: hang_notices.py)
    assert all(c.status == ERROR and f"timed out after {limit:g} s of its own time" in c.message
               and "the kernel did not finish" in c.message for c in cases[:tries])
    assert all(c.status == SKIPPED and "crashed or hung in 3 cases" in c.message for c in cases[tries:])
    # and the merged cases say so, which is what spares it compute-sanitizer's runs (diagnose/checks.py)
    assert all(hung_on_both(c) for c in cases[:tries]), [(c.name, c.metrics) for c in cases[:tries]]
    assert time.monotonic() - started < tries * (limit + 10)


def test_a_divergent_barrier_hangs_the_gpu_once_and_the_cases_it_gets_right_still_count(grade_one):
    """conditional_barrier's __syncthreads() inside `if (row < m && col < n)` hangs the GPU in its first case with
    threads outside C. The emulator beside it stopped that case and every other such one for the divergent barrier,
    so the GPU leaves those out after the one hang (hang_notices.py) and runs the rest: the cases every thread of
    which is inside C pass, as a CPU grade passes them, rather than being given up after three hangs."""
    result = grade_one(SUBMISSIONS / "conditional_barrier")
    cases = checks_of(result, "case")
    assert all(c.status != SKIPPED for c in cases.values()), [c.name for c in cases.values() if c.status == SKIPPED]
    for name in ("square_16", "square_512", "rect_deep", "k_one"):
        assert cases[name].status == PASSED, (name, cases[name].message)
    failing = [c for c in cases.values() if c.status != PASSED]
    assert failing and all(c.message.startswith("barrier divergence in block") for c in failing)
    assert sum(HUNG in c.metrics for c in cases.values()) == 1
    assert "the GPU left out the cases the CPU emulator stopped for a divergent barrier" in result.log


# A fault on both engines is told in the emulator's words, which name the line.
@pytest.mark.parametrize("name, words", [("trap", "kernel aborted: __trap() at line 10"),
                                         ("illegal_address", "invalid memory access at line 28")])
def test_faults_end_the_case_with_a_clear_verdict(grade_one, name, words):
    result = grade_one(SUBMISSIONS / name)
    cases = list(checks_of(result, "case").values())
    assert cases[0].status == ERROR and cases[0].message.startswith(words)
    assert "Traceback" not in " ".join(c.message for c in result.checks)


def test_compile_error_names_the_students_line(grade_one):
    compile_check = checks_of(grade_one(SUBMISSIONS / "compile_error"))["compile"]
    assert compile_check.status == ERROR
    assert "line 12: error" in compile_check.message


def test_wrong_kernel_name_lists_what_is_there(grade_one):
    compile_check = checks_of(grade_one(SUBMISSIONS / "wrong_kernel_name"))["compile"]
    assert compile_check.message.startswith("kernel mysgemm not found; found: MySgemm. Rename MySgemm to mysgemm")


def test_call_counting_cheat_fails_timing(grade_one):
    result = grade_one(SUBMISSIONS / "call_counter")
    timing = checks_of(result, "timing")["speed vs reference"]
    assert all(c.status == PASSED for c in checks_of(result, "case").values())
    assert timing.status == FAILED and "wrong in" in timing.message


def test_one_dimensional_tiles_give_the_tile_size(grade_one):
    """`As[BLOCK * BLOCK]`: the tile is BLOCK, a name the lab does not list (issue 29)."""
    result = grade_one(SUBMISSIONS / "no_tile_size")
    assert result.tile_size == 16 and all(c.status == PASSED for c in checks_of(result, "case").values())


def test_cli_writes_json_and_junit_for_every_submission(config_file, reference_submission, tmp_path):
    out = tmp_path / "out"
    code = main([str(reference_submission), str(SUBMISSIONS / "empty"), str(SUBMISSIONS / "illegal_address"),
                 "-o", str(out), "--config", str(config_file), "--backend", "gpu"])
    assert code == EXIT_NOT_GRADED  # the empty kernel.cu, refused at the door; the others graded
    graded = json.loads((out / "reference_as_submission.json").read_text())
    assert graded["status"] == "graded" and graded["score"] == graded["max_score"]
    empty = json.loads((out / "empty.json").read_text())
    assert empty["status"] == "error" and "empty" in empty["message"]
    suite = next(iter(JUnitXml.fromfile(str(out / "reference_as_submission.junit.xml"))))
    # the compute-sanitizer diagnosis is skipped: the emulator watched every case and nothing faulted
    assert suite.tests == 27 and suite.failures == suite.errors == 0 and suite.skipped == 1
    faulted = next(iter(JUnitXml.fromfile(str(out / "illegal_address.junit.xml"))))
    first_case = next(case for case in faulted if case.name.startswith("case square_16"))
    assert isinstance(first_case.result[0], Error)
    assert "invalid memory access at line 28" in first_case.result[0].message


# Which cases each classic ECE408 mistake (test_presets.BUGS) must break on the GPU, by shape:
# - no load bounds: a phase past k reads the next row of A (and past B), so a k that is not a multiple of
#   the tile is wrong; rows past m and columns past n are read past A's or B's end (an out-of-bounds read,
#   though they are never stored);
# - B read with stride numAColumns (k) instead of numBColumns (n): wrong whenever n != k, except k = 1
#   (only row 0 of B is read, at the same place);
# - the barrier after loading missing: with warps held back (late_warps.py) every case reads unloaded tiles.
ECE408_BREAKS = {
    "no_bounds": lambda case: case.k % 16 != 0 or case.m % 16 != 0 or case.n % 16 != 0,
    "wrong_stride": lambda case: case.n != case.k and case.k != 1,
    "missing_barrier": lambda case: True,
}
ECE408_STATIC_LOST = {"no_bounds": 0, "wrong_stride": 0, "missing_barrier": 4}  # the load barrier's points


@pytest.mark.parametrize("bug", sorted(ECE408_BREAKS))
def test_the_ece408_preset_gives_the_classic_mistakes_their_partial_scores(tmp_path, bug):
    from test_presets import BUGS, ECE408

    from grader.cases import load_cases
    from grader.config import preset_path
    from grader.pipeline import GPU, RunPlan, grade

    source = ECE408
    for old, new in BUGS[bug]:
        source = source.replace(old, new)
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "kernel.cu").write_text(source)
    config = load_config(preset_path("ece408"))
    cases = load_cases(config.testcases_dir)
    result = grade(tmp_path / "student", config, cases, RunPlan(GPU))
    checks = checks_of(result)
    broken = {case.name for case in cases if ECE408_BREAKS[bug](case)}
    assert {name for name, c in checks_of(result, "case").items() if c.status != PASSED} == broken
    assert checks["speed vs reference"].status == SKIPPED  # timing needs every case right
    lost = sum(case.points for case in cases if case.name in broken) + config.points.timing
    assert result.score == result.max_score - lost - ECE408_STATIC_LOST[bug]


def test_the_ece408_preset_grades_a_correct_mp3_file_full_marks():
    """matrixMultiplyShared(A, B, C, numARows, …, numCColumns) with a libwb main, as students publish it."""
    from grader.cases import load_cases
    from grader.config import preset_path
    from grader.pipeline import GPU, RunPlan, grade

    config = load_config(preset_path("ece408"))
    result = grade(SUBMISSIONS / "ece408_mp3", config, load_cases(config.testcases_dir), RunPlan(GPU))
    assert [(c.name, c.message) for c in result.checks if c.status != PASSED] == []
    assert result.score == result.max_score == 100
