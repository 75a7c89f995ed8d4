"""Files shaped the way real students write them (issue 29), graded on the CPU emulator as CI grades them:
includes of every form, tiles sized every way, untiled kernels, and the outcomes and texts of files that
break the lab's rules or do not compile. tests/submissions/README.md lists each verdict; the GPU twins are
in test_real_files_gpu.py.
"""
import json
import re

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_nvcc

from grader.cases import load_cases
from grader.cli import main
from grader.config import load_config, preset_path
from grader.pipeline import RunPlan, grade
from grader.report.gradescope import to_gradescope
from grader.report.prairielearn import to_prairielearn
from grader.result import COMPILE_ERROR, ERROR, GRADED, PASSED, SKIPPED, SUBMISSION_ERROR

pytestmark = [needs_cxx, needs_nvcc]  # nvcc's compile check decides "compile error" on the CPU path too
REFUSED_TO_READ = "could make the compiler read other files"


@pytest.fixture(scope="module")
def grade_one(graders):
    return graders("cpu")


def compiled(result):
    return next(c for c in result.checks if c.kind == "compile")


def emulated(result):
    return [c for c in result.checks if c.kind == "case" and "GPU only" not in c.message]


# --- includes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, tile", [("include_quoted_runtime", 16), ("include_runtime_api", 16)])
def test_toolkit_headers_however_included_grade_like_any_correct_file(grade_one, name, tile):
    """`#include "cuda_runtime.h"` (quoted), <cuda_runtime_api.h>, <device_functions.h>: allowed, and the
    emulator builds them (its shims stand in for the toolkit's)."""
    result = grade_one(SUBMISSIONS / name)
    assert result.outcome == GRADED and result.tile_size == tile
    assert all(c.status in (PASSED, SKIPPED) for c in result.checks), [c.message for c in result.checks]
    assert all(c.status == PASSED for c in emulated(result)) and len(emulated(result)) > 10


@pytest.mark.parametrize("name", ["include_host_std", "include_cooperative_groups"])
def test_standard_and_toolkit_cxx_headers_reach_the_compiler(grade_one, name):
    """<bits/stdc++.h>, <fstream>, <cooperative_groups.h>: the policy lets them through, nvcc builds them with
    C++ linkage and the emulator runs the kernel: every point the CPU can check."""
    result = grade_one(SUBMISSIONS / name)
    message = compiled(result).message
    assert REFUSED_TO_READ not in message and "is not allowed" not in message
    assert result.outcome == GRADED and result.score == result.checkable_max
    assert result.checkable_max in (90, 100), result.checks  # timing passed by the speed model, or held


def test_every_refused_include_form_is_named_with_its_reason(grade_one):
    result = grade_one(SUBMISSIONS / "include_refused")
    message = compiled(result).message
    assert result.outcome == COMPILE_ERROR and REFUSED_TO_READ in message
    assert ('line 1: #include "helpers.cuh" is not allowed: "helpers.cuh" is not a header of the CUDA toolkit or '
            "the C/C++ compiler") in message
    assert 'line 2: #include "../common/timer.h" is not allowed: ".." is not allowed in header names' in message
    assert ('line 3: #include "/usr/include/stdio.h" is not allowed: absolute paths are not allowed in header '
            "names") in message
    assert "line 5: #include MATH_HEADER is not allowed: the header name comes from a macro" in message
    assert all(c.status == SKIPPED for c in emulated(result))


def test_a_libwb_include_with_a_folder_is_dropped_with_the_host_code():
    config = load_config(preset_path("ece408"))
    cases = [c for c in load_cases(config.testcases_dir) if c.on_cpu == "whole"][:3]
    result = grade(SUBMISSIONS / "include_libwb_folder", config, cases, RunPlan("cpu"))
    assert result.outcome == GRADED and all(c.status == PASSED for c in emulated(result))
    assert all(c.status == PASSED for c in result.checks if c.kind == "static")


# --- tiles --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, tile", [("tile_local_const", 8), ("tile_1d_width", 16), ("no_tile_size", 16)])
def test_tiles_sized_as_real_labs_size_them_grade_fully(grade_one, name, tile):
    result = grade_one(SUBMISSIONS / name)
    assert result.outcome == GRADED and result.tile_size == tile
    assert all(c.status in (PASSED, SKIPPED) for c in result.checks), [c.message for c in result.checks]
    assert all(c.status == PASSED for c in emulated(result))
    assert "#define TILE_SIZE" not in json.dumps(result.to_dict())  # no advice that would break it


UNTILED = ["untiled_no_macro", "untiled_unused_macro", "untiled_float_macro"]


def test_an_untiled_kernel_scores_the_same_with_or_without_an_unused_macro(grade_one):
    results = [grade_one(SUBMISSIONS / name) for name in UNTILED]
    assert len({r.score for r in results}) == 1 and results[0].score > 0
    for result in results:
        assert result.outcome == GRADED and result.tile_size == 16
        assert all(c.status == PASSED for c in emulated(result))
        statics = [c for c in result.checks if c.kind == "static"]
        assert all(c.status != PASSED for c in statics)
        assert "no __shared__ tile is declared in mysgemm" in statics[0].message
    assert "launched with blocks of 16 × 16 threads" in compiled(results[0]).message


def test_the_block_size_of_an_untiled_kernel_comes_from_the_config(config_file):
    config = load_config(config_file)
    config.kernel.block_size = 8
    cases = [c for c in load_cases(config.testcases_dir) if c.on_cpu == "whole"][:2]
    result = grade(SUBMISSIONS / "untiled_no_macro", config, cases, RunPlan("cpu"))
    assert result.tile_size == 8 and all(c.status == PASSED for c in emulated(result))
    assert "launched with blocks of 8 × 8 threads" in compiled(result).message


# --- outcomes and texts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, words", [
    ("tile_size_disallowed", "the tile size is 12; this lab allows 8, 16, 32"),
    ("declaration_mismatch", "mysgemm's parameter 1 is `const float *A`; the lab passes the size m there"),
])
def test_a_file_that_breaks_the_labs_rules_is_a_submission_error_not_a_compile_error(grade_one, name, words):
    result = grade_one(SUBMISSIONS / name)
    assert result.outcome == SUBMISSION_ERROR and result.score == 0
    assert result.message.startswith(words) and "compile error" not in result.message
    assert all(c.status == SKIPPED and words in c.message for c in result.checks if c.kind != "compile")


def test_a_compile_error_quotes_the_students_own_line_with_the_caret_where_they_wrote_it(grade_one):
    message = compiled(grade_one(SUBMISSIONS / "compile_error_in_macro_line")).message
    lines = message.splitlines()
    at = lines.index('line 10: error: identifier "TILE_W" is undefined')
    assert lines[at + 1] == "    __shared__ float subTileA[TILE_W][TILE_WIDTH];"
    assert lines[at + 2].index("^") == lines[at + 1].index("TILE_W]")
    assert "__attribute__" not in message and "[16]" not in message


def test_the_emulators_compile_errors_quote_the_students_line_too():
    from grader.execute.cpu.build import compiler_message

    source = "#define TILE_WIDTH 16\n__global__ void k() {\n    __shared__ float ds_A[TILE_W][TILE_WIDTH];\n}\n"
    built = source.replace("__shared__ float", "CUDA_EMU_AT(__LINE__); __shared__ float")
    log = "/tmp/x/emulator/kernel.cu:3:52: error: 'TILE_W' was not declared in this scope\n"
    lines = compiler_message(log, source, built).splitlines()
    assert lines[1:] == ["line 3: error: 'TILE_W' was not declared in this scope",
                         "    __shared__ float ds_A[TILE_W][TILE_WIDTH];",
                         "                          ^"]


def scores_on_every_path(tmp_path, config_file, folder) -> dict:
    """The score one file gets from the CLI, a batch, Gradescope's and PrairieLearn's entries."""
    out = tmp_path / "cli"
    assert main([str(folder), "-o", str(out), "--config", str(config_file), "--backend", "cpu"]) == 0
    cli = json.loads((out / f"{folder.name}.json").read_text())
    assert main(["batch", str(folder), "-o", str(tmp_path / "batch"), "--config", str(config_file),
                 "--backend", "cpu", "--jobs", "1"]) == 0
    batch = json.loads(next((tmp_path / "batch" / "students").glob("*.json")).read_text())
    gradescope = tmp_path / "gs.json"
    assert main(["gradescope", str(folder), str(gradescope), "--config", str(config_file), "--backend", "cpu"]) == 0
    prairielearn = tmp_path / "pl.json"
    assert main(["prairielearn", str(folder), str(prairielearn), "--config", str(config_file),
                 "--backend", "cpu"]) == 0
    pl = json.loads(prairielearn.read_text())
    return {"cli": cli["score"], "batch": batch["score"], "gradescope": json.loads(gradescope.read_text())["score"],
            "prairielearn": sum(t["points"] for t in pl["tests"])}


def test_a_file_that_does_not_compile_scores_the_same_on_every_path(tmp_path, config_file):
    scores = scores_on_every_path(tmp_path, config_file, SUBMISSIONS / "compile_error_in_macro_line")
    assert set(scores.values()) == {0}, scores


def test_the_config_may_keep_static_points_after_a_compile_error_on_every_path(tmp_path, config_file):
    config = tmp_path / "config.yaml"
    text = config_file.read_text().replace("static_after_compile_error: false", "static_after_compile_error: true")
    assert "static_after_compile_error: true" in text
    config.write_text(text)
    scores = scores_on_every_path(tmp_path, config, SUBMISSIONS / "compile_error_in_macro_line")
    assert set(scores.values()) == {10}, scores


def test_grading_the_same_result_in_every_lms_gives_the_same_points(grade_one):
    result = grade_one(SUBMISSIONS / "compile_error_in_macro_line")
    assert to_gradescope(result)["score"] == 0
    assert sum(t["points"] for t in to_prairielearn(result)["tests"]) == 0
    assert all(c.status == SKIPPED and re.search("does not compile", c.message)
               for c in result.checks if c.kind == "static")
    assert compiled(result).status == ERROR


def test_the_caret_follows_the_token_through_macro_expansion():
    """nvcc quotes `16 * 16 * nope` for `\tfloat y = TW * TW * nope;`: the caret lands on the student's `nope`,
    and on the macro's name when nvcc points into an expansion."""
    from grader.execute.nvcc.compile import student_compile_message

    source = "#define TW 16\n__global__ void k() {\n\tfloat y = TW * TW * nope; float z = TW.x;\n}\n"
    log = ('kernel.cu(3): error: identifier "nope" is undefined\n'
           "   float y = 16 * 16 * nope; float z = 16.x;\n"
           "                       ^\n\n"
           'kernel.cu(3): error: expression must have class type\n'
           "   float y = 16 * 16 * nope; float z = 16.x;\n"
           "                                       ^\n")
    lines = student_compile_message(log, source).splitlines()
    own = "    float y = TW * TW * nope; float z = TW.x;"
    assert lines[2:4] == [own, " " * own.index("nope") + "^"]
    assert lines[6:8] == [own, " " * own.index("TW.x") + "^"]


def test_the_block_size_must_be_a_tile_size_the_lab_allows(tmp_path, config_file):
    """An untiled kernel is launched with it, and a launch the lab does not allow would be a submission error."""
    from grader.errors import ConfigError

    config = tmp_path / "config.yaml"
    config.write_text(config_file.read_text().replace("block_size: 16", "block_size: 12"))
    with pytest.raises(ConfigError, match=r"kernel.block_size: must be one of tile_sizes \(8, 16, 32\)"):
        load_config(config)
