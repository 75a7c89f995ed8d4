"""On a real GPU: a class graded in one batch gets, check by check, the verdicts each student gets graded
alone; the timing of a slow kernel is never lost to the batch; a libwb file whose host code does not compile
is graded in a batch as alone, its kernel alone, under the sanitizer too."""
import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_gpu, needs_sanitizer

from grader.config import load_config
from grader.judge.verdicts import differences
from grader.result import GRADED, SANITIZER, SKIPPED, TIMING, SubmissionResult

pytestmark = [pytest.mark.gpu, needs_gpu, needs_sanitizer]
# correct, correct but slow, wrong, racy, and one that hangs, side by side
CLASS = ["good_basic", "good_tile8_renamed", "slow_uncoalesced", "b_wrong_stride", "missing_load_barrier",
         "no_bounds_checks", "hang"]


def grade_cli(config, *args):
    return subprocess.run([sys.executable, "-m", "grader", *map(str, args), "--config", str(config), "--backend",
                           "gpu"], cwd=ROOT, capture_output=True, text=True, check=False)


def test_a_batch_grades_each_student_as_grading_them_alone(config_file, tmp_path):
    folder = tmp_path / "class"
    for name in CLASS:
        (folder / name).mkdir(parents=True)
        shutil.copy(SUBMISSIONS / name / "kernel.cu", folder / name / "kernel.cu")
    finished = grade_cli(config_file, "batch", folder, "-o", tmp_path / "batch")
    assert finished.returncode == 0, finished.stderr
    max_ratio = load_config(config_file).timing.max_ratio
    for name in CLASS:
        stored = tmp_path / "batch" / "students" / f"{name}.json"
        in_batch = SubmissionResult.from_dict(json.loads(stored.read_text()))
        grade_cli(config_file, folder / name, "-o", tmp_path / "alone")
        alone = SubmissionResult.from_dict(json.loads((tmp_path / "alone" / f"{name}.json").read_text()))
        assert differences(in_batch, alone, max_ratio) == [], name
        assert in_batch.outcome == GRADED, (name, in_batch.message)
        # hung on the GPU and the emulator alike, or trapped on both at the line the cases name: the tools, which
        # would only hang or find the trap again, are not run (in the batch as alone: `differences` above)
        skipped_for = {"hang": "would only hang again", "trap": "would only find it again"}
        if name in skipped_for:
            diagnosis = next(c for c in in_batch.checks if c.kind == SANITIZER)
            assert diagnosis.status == SKIPPED and skipped_for[name] in diagnosis.message, diagnosis.message
        timing = next(c for c in in_batch.checks if c.kind == TIMING)
        if name in ("good_basic", "good_tile8_renamed", "slow_uncoalesced"):
            assert timing.status in ("passed", "failed") and "ratio_spread" in timing.metrics, timing.message
            assert "clocks" in timing.metrics


def test_a_libwb_file_graded_on_its_kernel_alone_is_graded_in_a_batch(tmp_path):
    """Its whole file does not compile (libwb's main), so the GPU child grades its device side; the sanitizer's
    launch uses that module (--sanitize: every tool runs), never "no compiled module to check"."""
    folder = tmp_path / "class" / "ece408_mp3"
    folder.mkdir(parents=True)
    shutil.copy(SUBMISSIONS / "ece408_mp3" / "kernel.cu", folder / "kernel.cu")
    finished = subprocess.run([sys.executable, "-m", "grader", "batch", str(folder.parent), "-o", str(tmp_path / "out"),
                               "--preset", "ece408", "--backend", "gpu", "--sanitize"], cwd=ROOT, capture_output=True,
                              text=True, check=False)
    assert finished.returncode == 0, finished.stderr
    result = json.loads((tmp_path / "out" / "students" / "ece408_mp3.json").read_text())
    assert result["outcome"] == GRADED and result["score"] == result["max_score"], result["message"]
    diagnosis = next(c for c in result["checks"] if c["kind"] == "sanitizer")
    assert diagnosis["status"] == "passed", diagnosis["message"]
