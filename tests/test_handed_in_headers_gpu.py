"""GPU twin of test_handed_in_headers.py: the GPU child compiles kernel.cu with the handed-in header beside it
(pycuda's include_dirs) and grades it in full. Marked `gpu`; the lead runs it on a GPU machine.
"""
import pytest
from conftest import ROOT
from hardware import needs_gpu

from grader.cases import load_cases
from grader.config import load_config
from grader.pipeline import RunPlan, grade
from grader.result import COMPILE_ERROR, GRADED

pytestmark = [pytest.mark.gpu, needs_gpu]
HEADER = "tiling.cuh"
SUBMISSION = ROOT / "tests" / "handed_in" / "tiled_helper"


@pytest.fixture(scope="module")
def config(config_file):
    config = load_config(config_file)
    config.compile.handed_in_headers = [HEADER]
    return config


def test_a_named_header_with_a_device_helper_grades_100_on_the_gpu(config):
    result = grade(SUBMISSION, config, load_cases(config.testcases_dir), RunPlan("gpu"))
    assert result.outcome == GRADED and result.score == result.max_score == 100, result.checks


def test_a_compile_error_in_the_header_names_it_on_the_gpu(tmp_path, config):
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "kernel.cu").write_text((SUBMISSION / "kernel.cu").read_text())
    header = (SUBMISSION / HEADER).read_text()
    (folder / HEADER).write_text(header.replace("return sum;", "return summ;"))
    cases = load_cases(config.testcases_dir)[:2]
    result = grade(folder, config, cases, RunPlan("gpu"))
    message = next(c for c in result.checks if c.kind == "compile").message
    assert result.outcome == COMPILE_ERROR and f'{HEADER}(12): error: identifier "summ" is undefined' in message
