"""`grade --preset ece408`: UIUC ECE408 MP3 files graded as students publish them, on the CPU emulator
(the GPU's verdicts on the same files are in test_gpu_grading.py)."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

from grader.cases import load_cases
from grader.config import load_config, preset_path
from grader.pipeline import RunPlan, grade
from grader.result import FAILED, PASSED

ECE408 = (SUBMISSIONS / "ece408_mp3" / "kernel.cu").read_text()
LOAD_GUARD = "    if (Row < numARows && m * TILE_WIDTH + tx < numAColumns)\n"
# The classic mistakes, made in the correct file: (name, change, what must fail)
BUGS = {
    "no_bounds": [(LOAD_GUARD, "    if (1)\n"),
                  ("    if (Col < numBColumns && m * TILE_WIDTH + ty < numBRows)\n", "    if (1)\n")],
    "wrong_stride": [("B[(m * TILE_WIDTH + ty) * numBColumns + Col]", "B[(m * TILE_WIDTH + ty) * numAColumns + Col]")],
    "missing_barrier": [("    __syncthreads();\n    for (int k", "    for (int k")],
}


@pytest.fixture(scope="module")
def ece408():
    config = load_config(preset_path("ece408"))
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"]
    return config, cases


def graded(tmp_path, config, cases, source: str):
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "kernel.cu").write_text(source)
    return grade(folder, config, cases, RunPlan("cpu"))


@needs_cxx
def test_a_correct_ece408_file_gets_every_point_the_cpu_can_check(tmp_path, ece408):
    result = graded(tmp_path, *ece408, ECE408)
    assert result.tile_size == 16
    assert [(c.name, c.message) for c in result.checks if c.kind != "timing" and c.status != PASSED] == []
    compiled = next(c for c in result.checks if c.kind == "compile").message
    assert "host code left out" in compiled or "nvcc is not on PATH" in compiled


@needs_cxx
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_the_classic_ece408_mistakes_lose_their_points(tmp_path, ece408, bug):
    source = ECE408
    for old, new in BUGS[bug]:
        assert old in source
        source = source.replace(old, new)
    result = graded(tmp_path, *ece408, source)
    checks = {c.name: c for c in result.checks}
    failing = [name for name, c in checks.items() if c.kind == "case" and c.status != PASSED]
    if bug == "missing_barrier":
        assert checks["barrier after loading tiles"].status == FAILED
        assert failing and "race" in checks[failing[0]].message
    elif bug == "no_bounds":
        assert "ragged_all" in failing and "square_64" not in failing
        assert "out-of-bounds read" in checks["ragged_all"].message
    else:
        assert "rect_wide" in failing and "square_64" not in failing
    assert result.score < result.checkable_max


def test_the_preset_is_refused_as_the_default_config_would_grade_it(tmp_path):
    """Without the preset, the same file is told which kernel was looked for and which was found."""
    config = load_config()
    result = grade(SUBMISSIONS / "ece408_mp3", config, load_cases(config.testcases_dir)[:1], RunPlan(None, "x"))
    compiled = next(c for c in result.checks if c.kind == "compile")
    assert compiled.message.startswith("kernel mysgemm not found; found: matrixMultiplyShared. Rename")
    assert result.outcome == "submission error"


def test_an_unknown_preset_is_misuse_naming_the_ones_there_are():
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "ece408_mp3"), "--preset", "ece409"],
                              cwd=ROOT, capture_output=True, text=True, check=False)
    assert finished.returncode == 2 and "--preset ece409: no such preset (there are: ece408, pmpp)" in finished.stderr


def test_a_config_key_lists_each_matrix_once_and_sizes_at_will(tmp_path):
    """ECE408's (A, B, C, m, k, k, n, m, n) is a valid order; a matrix twice is not."""
    config = load_config(preset_path("ece408"))
    assert config.kernel.args == ["A", "B", "C", "m", "k", "k", "n", "m", "n"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(preset_path("ece408").read_text().replace("args: [A, B, C, m, k, k, n, m, n]",
                                                             "args: [A, A, C, m, k, k, n, m, n]")
                   .replace("../", str(ROOT) + "/"))
    with pytest.raises(Exception, match="each of A, B, C once"):
        load_config(bad)


@needs_cxx
def test_the_cli_grades_with_the_preset(tmp_path):
    out = tmp_path / "out"
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "ece408_mp3"), "--preset", "ece408",
                               "--backend", "cpu", "-o", str(out)], cwd=ROOT, capture_output=True, text=True,
                              check=False)
    assert finished.returncode == 0, finished.stderr
    result = json.loads((out / "ece408_mp3.json").read_text())
    # every point checkable without a GPU: the large cases by sampled blocks, timing by the speed model's estimate
    assert result["outcome"] == "graded" and result["score"] == 100


@pytest.mark.parametrize("preset, graded, other", [(None, "mysgemm", "matrixMultiplyShared"),
                                                   ("ece408", "matrixMultiplyShared", "mysgemm")])
def test_a_file_with_both_families_kernels_is_graded_on_the_configured_one_and_says_so(tmp_path, preset, graded,
                                                                                       other):
    ece408_kernel = ECE408[ECE408.index("#define TILE_WIDTH"):ECE408.index("int main(")]
    both = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text() + "\n" + ece408_kernel
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "kernel.cu").write_text(both)
    config = load_config(preset_path(preset) if preset else None)
    result = grade(tmp_path / "both", config, load_cases(config.testcases_dir)[:1], RunPlan(None, "no backend"))
    compiled = result.checks[0]
    assert f"graded {graded}, " in compiled.message  # ece408: the first of the names it accepts the file defines
    assert f"; the file also defines {other}, which the grader does not run" in compiled.message
    assert [c.status for c in result.checks if c.kind == "static"] == [PASSED] * 3
