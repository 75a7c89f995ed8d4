"""The GPU twins of test_real_files.py (issue 29): the same real-shaped files, graded on a GPU, get the same
verdicts and scores as on the CPU emulator. Marked `gpu`; the lead runs them on a GPU machine.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu

from grader.cases import load_cases
from grader.config import load_config, preset_path
from grader.pipeline import RunPlan, grade
from grader.result import COMPILE_ERROR, GRADED, PASSED, SKIPPED, SUBMISSION_ERROR

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.fixture(scope="module")
def grade_one(graders):
    return graders("gpu")


def compiled(result):
    return next(c for c in result.checks if c.kind == "compile")


def cases(result):
    return [c for c in result.checks if c.kind == "case"]


@pytest.mark.parametrize("name, tile", [("include_quoted_runtime", 16), ("include_runtime_api", 16),
                                        ("tile_local_const", 8), ("tile_1d_width", 16), ("no_tile_size", 16)])
def test_real_shaped_correct_files_get_full_marks(grade_one, name, tile):
    result = grade_one(SUBMISSIONS / name)
    assert result.outcome == GRADED and result.tile_size == tile
    assert all(c.status == PASSED for c in cases(result)), [c.message for c in cases(result) if not c.passed]
    assert all(c.status == PASSED for c in result.checks if c.kind == "static")


@pytest.mark.parametrize("name", ["include_host_std", "include_cooperative_groups"])
def test_cxx_headers_reach_the_compiler(grade_one, name):
    assert "could make the compiler read other files" not in compiled(grade_one(SUBMISSIONS / name)).message


def test_an_untiled_kernel_scores_the_same_with_or_without_an_unused_macro(grade_one):
    results = [grade_one(SUBMISSIONS / name)
               for name in ("untiled_no_macro", "untiled_unused_macro", "untiled_float_macro")]
    for result in results:
        assert result.outcome == GRADED and result.tile_size == 16
        assert all(c.status == PASSED for c in cases(result))
    # timing may differ by noise: the points that do not depend on speed are the same
    assert len({sum(c.score for c in r.checks if c.kind != "timing") for r in results}) == 1


@pytest.mark.parametrize("name, outcome, words", [
    ("tile_size_disallowed", SUBMISSION_ERROR, "the tile size is 12; this lab allows 8, 16, 32"),
    ("declaration_mismatch", SUBMISSION_ERROR, "mysgemm's parameter 1 is `const float *A`"),
    ("compile_error_in_macro_line", COMPILE_ERROR, 'line 10: error: identifier "TILE_W" is undefined\n'
                                                   "    __shared__ float subTileA[TILE_W][TILE_WIDTH];"),
])
def test_outcomes_and_texts_as_on_the_cpu(grade_one, graders, name, outcome, words):
    result = grade_one(SUBMISSIONS / name)
    assert result.outcome == outcome and result.score == 0 and words in compiled(result).message
    on_cpu = graders("cpu")(SUBMISSIONS / name)
    assert (on_cpu.outcome, on_cpu.score) == (result.outcome, result.score)
    assert all(c.status == SKIPPED for c in result.checks if c.kind == "static")


def test_a_libwb_include_with_a_folder_grades_under_the_ece408_preset():
    config = load_config(preset_path("ece408"))
    result = grade(SUBMISSIONS / "include_libwb_folder", config, load_cases(config.testcases_dir), RunPlan("gpu"))
    assert result.outcome == GRADED and all(c.status == PASSED for c in cases(result))
