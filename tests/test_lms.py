"""The LMS entries as the platforms call them: Gradescope and PrairieLearn containers have no GPU."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

from grader.cli import main
from grader.report.gradescope import to_gradescope
from grader.report.prairielearn import to_prairielearn
from grader.result import (
    CASE,
    COMPILE,
    COMPILE_ERROR,
    GRADED,
    STATIC,
    TIMING,
    SubmissionResult,
    errored,
    passed,
    skipped,
)
from grader.settle import NOT_BUILT

GOOD = SUBMISSIONS / "good_basic" / "kernel.cu"


def gradescope(tmp_path, folder, config_file, *flags):
    results = tmp_path / "results" / "results.json"
    assert main(["gradescope", str(folder), str(results), "--config", str(config_file), *flags]) == 0
    return json.loads(results.read_text(encoding="utf-8"))


def test_gradescope_finds_kernel_cu_in_an_uploaded_folder(tmp_path, config_file):
    submission = tmp_path / "submission"
    (submission / "lab3").mkdir(parents=True)
    shutil.copy(GOOD, submission / "lab3" / "kernel.cu")
    data = gradescope(tmp_path, submission, config_file, "--no-run")
    assert "not found" not in data["output"]
    static = [t for t in data["tests"] if t["name"].startswith("static")]
    assert static and all(t["status"] == "passed" for t in static)


def test_gradescope_names_every_kernel_cu_when_there_are_several(tmp_path, config_file):
    submission = tmp_path / "submission"
    for sub in ("lab3", "old"):
        (submission / sub).mkdir(parents=True)
        shutil.copy(GOOD, submission / sub / "kernel.cu")
    data = gradescope(tmp_path, submission, config_file, "--no-run")
    assert data["score"] == 0
    assert "2 files named kernel.cu in your submission (lab3/kernel.cu, old/kernel.cu)" in data["output"]


@needs_cxx
def test_gradescope_without_gpu_scores_what_it_could_check(tmp_path, config_file):
    submission = tmp_path / "submission"
    submission.mkdir()
    shutil.copy(ROOT / "reference" / "kernel.cu", submission / "kernel.cu")
    data = gradescope(tmp_path, submission, config_file, "--backend", "cpu")
    # Timing decided by the speed model (the reference: about 1× its own time); every case by the emulator, the
    # large ones by sampled blocks: every point checked without a GPU.
    assert data["score"] == 100
    assert "100/100" in data["output"]
    assert all(t["status"] == "passed" for t in data["tests"])  # nothing that was not checked shows as failed
    assert sum(t["max_score"] for t in data["tests"]) == 100
    assert (data["extra_data"]["checkable_max_score"], data["extra_data"]["max_score"]) == (100, 100)
    assert "leaderboard" not in data  # nothing was timed: an estimate is no time to rank


@needs_cxx
@pytest.mark.parametrize("entry", ["gradescope", "prairielearn"])
def test_the_lms_entries_take_without_gpu_as_grade_batch_does(tmp_path, quick_config_file, entry):
    """`--without-gpu hold` scores what could be checked, for an assignment worth that; `scale` scores its share
    of the full total, for an assignment worth the full total. PrairieLearn's score is a fraction either way:
    what changes is what the student is told the question stands for."""
    submission = tmp_path / "submission"
    submission.mkdir()
    shutil.copy(ROOT / "reference" / "kernel.cu", submission / "kernel.cu")
    results = tmp_path / "results.json"
    written = {}
    for mode in ("hold", "scale"):
        assert main([entry, str(submission), str(results), "--config", str(quick_config_file), "--backend", "cpu",
                     "--without-gpu", mode]) == 0
        written[mode] = json.loads(results.read_text())
    held, scaled = written["hold"], written["scale"]
    if entry == "prairielearn":
        assert held["score"] == scaled["score"] == 1.0
        assert "checkable without a GPU" in held["message"] and "share of all this question's points" in \
            scaled["message"]
        return
    checkable, full = held["extra_data"]["checkable_max_score"], held["extra_data"]["max_score"]
    assert checkable < full and sum(t["max_score"] for t in held["tests"]) == checkable
    assert (held["score"], held["extra_data"]["assignment_points"]) == (checkable, checkable)
    assert (scaled["score"], scaled["extra_data"]["assignment_points"]) == (full, full)


def timed() -> SubmissionResult:
    metrics = {"student_ms": 12.5, "reference_ms": 10.0, "ratio": 1.25, "student_gflops": 1374.4,
               "reference_gflops": 1718.0, "max_ratio": 2.0}
    return SubmissionResult("t", GRADED, [passed("square_64", CASE, 3),
                                          passed("speed vs reference", TIMING, 10, "1.25x", metrics=metrics)])


def test_gradescope_timing_figures_and_leaderboard_when_a_gpu_timed_it():
    data = to_gradescope(timed())
    assert data["extra_data"]["timing"] == {"student_ms": 12.5, "reference_ms": 10.0, "ratio": 1.25,
                                            "student_gflops": 1374.4, "reference_gflops": 1718.0}
    assert data["leaderboard"] == [{"name": "GFLOP/s", "value": 1374.4, "order": "desc"},
                                   {"name": "Time vs reference", "value": 1.25, "order": "asc"}]


def test_gradescope_setup_installs_the_cpu_backends_compiler():
    setup = (ROOT / "gradescope" / "setup.sh").read_text()
    install = next(line for line in setup.splitlines() if "apt-get install" in line)
    assert "g++" in install.split()


def test_the_lms_images_prepare_the_cache_once_the_grader_is_installed():
    # Each submission is graded in a fresh container from the image: what `grade prepare` builds must be in it.
    for path, install in ((ROOT / "gradescope" / "setup.sh", "pip\" install"),
                          (ROOT / "prairielearn" / "Dockerfile", "pip install")):
        lines = path.read_text().splitlines()
        installed = max(i for i, line in enumerate(lines) if install in line and not line.startswith("#"))
        prepared = [i for i, line in enumerate(lines) if "grade\" prepare" in line or "RUN grade prepare" in line]
        assert prepared and prepared[0] > installed, path


def compile_error() -> SubmissionResult:
    return SubmissionResult("c", COMPILE_ERROR, [
        errored("compile", COMPILE, 0, "kernel.cu(12): error: identifier \"tile\" is undefined"),
        # as the pipeline makes it by default (points.static_after_compile_error: false)
        skipped("barrier after loading tiles", STATIC, 4, f"{NOT_BUILT}line 20"),
        skipped("square_64", CASE, 3, "not run: the kernel did not compile")])


def test_prairielearn_code_that_does_not_build_is_not_gradable_by_default():
    data = to_prairielearn(compile_error())
    assert data["gradable"] is False and data["score"] == 0
    assert 'identifier "tile" is undefined' in data["format_errors"][0]
    static = next(t for t in data["tests"] if t["name"] == "barrier after loading tiles")
    assert static["points"] == 0 and "does not compile" in static["output"]


def test_prairielearn_a_config_key_makes_it_a_graded_zero(tmp_path):
    data = to_prairielearn(compile_error(), compile_error_graded=True)
    assert (data["gradable"], data["score"]) == (True, 0) and "format_errors" not in data
    # The key, read by the entry PrairieLearn calls from a config that gives only it (the rest: config.yaml's).
    config = tmp_path / "config.yaml"
    config.write_text("prairielearn:\n  compile_error_graded: true\n")
    student = tmp_path / "student"
    student.mkdir()
    shutil.copy(SUBMISSIONS / "hip_port" / "kernel.cu", student)  # HIP: a compile error, refused before nvcc
    results = tmp_path / "results.json"
    assert main(["prairielearn", str(student), str(results), "--config", str(config), "--no-run"]) == 0
    written = json.loads(results.read_text())
    assert (written["gradable"], written["score"]) == (True, 0)


def test_prairielearn_question_is_shipped_and_points_at_the_entry():
    question = ROOT / "prairielearn" / "questions" / "tiledSgemm"
    info = json.loads((question / "info.json").read_text())
    assert info["gradingMethod"] == "External" and info["externalGradingOptions"]["enabled"] is True
    entrypoint = info["externalGradingOptions"]["entrypoint"]
    assert entrypoint == "/grade/tests/run.sh" and (question / "tests" / "run.sh").is_file()
    run = (question / "tests" / "run.sh").read_text()
    assert "python3 -m grader prairielearn /grade/student /grade/results/results.json" in run
    assert 'file-name="kernel.cu"' in (question / "question.html").read_text()
    dockerfile = (ROOT / "prairielearn" / "Dockerfile").read_text()
    assert "g++" in dockerfile and "pip install" in dockerfile


@pytest.mark.parametrize("folder", ["gradescope", "prairielearn/questions/tiledSgemm/tests"])
def test_lms_scripts_are_valid_shell(folder):
    import subprocess

    for path in (ROOT / folder).iterdir():
        if path.suffix == ".sh" or path.name == "run_autograder":
            assert path.stat().st_mode & 0o111, f"{path} must be executable"
            subprocess.run(["bash", "-n", str(path)], check=True)


def test_prairielearn_output_counts_what_its_score_counts(tmp_path, config_file):
    """A compile error scored 0 said "Score: 10/74" in its output (issue 28): every field now tells one score."""
    data = to_prairielearn(compile_error(), compile_error_graded=True)
    assert data["score"] == 0 and data["message"].startswith("compile error: 0/")
    assert data["output"].startswith("Score: 0/") and sum(t["points"] for t in data["tests"]) == 0
    student = tmp_path / "student"
    shutil.copytree(SUBMISSIONS / "compile_error", student)
    results = tmp_path / "results.json"
    assert main(["prairielearn", str(student), str(results), "--config", str(config_file), "--no-run"]) == 0
    written = json.loads(results.read_text())
    points = sum(t["points"] for t in written["tests"])
    out_of = sum(t["max_points"] for t in written["tests"])
    shown = f"Score: {points:g}/{out_of:g}"
    assert points == written["score"] * out_of == 0 and written["output"].startswith(shown)
    assert written["message"].startswith(f"compile error: {points:g}/{out_of:g}")


def test_gradescope_tells_the_student_which_kernel_was_graded(tmp_path, config_file):
    submission = tmp_path / "submission"
    (submission / "lab3").mkdir(parents=True)
    shutil.copy(GOOD, submission / "lab3" / "kernel.cu")
    data = gradescope(tmp_path, submission, config_file, "--no-run")
    assert "Note: graded lab3/kernel.cu, the only kernel.cu in your submission" in data["output"]
    (submission / "old").mkdir()
    shutil.copy(GOOD, submission / "old" / "kernel.cu")
    shutil.copy(GOOD, submission / "kernel.cu")
    data = gradescope(tmp_path, submission, config_file, "--no-run")
    assert "Note: graded kernel.cu at the top of your submission; not graded: lab3/kernel.cu, old/kernel.cu" \
        in data["output"]


def test_gradescope_refuses_a_kernel_cu_that_is_a_link(tmp_path, config_file):
    """A link would be read through (the autograder's own files) or another file graded in its place."""
    submission = tmp_path / "submission"
    (submission / "lab3").mkdir(parents=True)
    shutil.copy(GOOD, submission / "lab3" / "kernel.cu")
    (submission / "kernel.cu").symlink_to(ROOT / "config.yaml")
    data = gradescope(tmp_path, submission, config_file, "--no-run")
    assert "kernel.cu: a symbolic link, not a file" in data["output"] and data["extra_data"]["outcome"] == \
        "submission error"
    assert "testcases" not in data["output"]  # nothing of the linked file was read
