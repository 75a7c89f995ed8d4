"""Input an instructor or a student really hands in: each is a clear error naming file and key (exit 2,
nothing run), or it grades as it should."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_nvcc

from grader.cli import main
from grader.intake.submission import decode_source

GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_bytes()


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.yaml"
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    path.write_text(text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}"))
    return path


def refused(capsys, tmp_path, *args) -> str:
    out = tmp_path / "out"
    assert main([str(SUBMISSIONS / "good_basic"), "-o", str(out), *args]) == 2
    assert not out.exists()  # nothing ran, nothing written
    return capsys.readouterr().err


@pytest.mark.parametrize("old, new, words", [
    ("  run_s: 10", "  run_s: .inf", "timeouts.run_s: expected a finite number, got inf"),
    ("    load_barrier: 4", "    load_barrier: .nan", "points.static.load_barrier: expected a finite number, got nan"),
    ("  seed: 2024", "  seed: -1", "timing.seed: must be from 0 to 4294967295"),
])
def test_bad_config_values_name_file_and_key(capsys, tmp_path, config, old, new, words):
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new))
    err = refused(capsys, tmp_path, "--config", str(config))
    assert str(config) in err and words in " ".join(err.split())


def test_an_empty_config_file_is_refused(capsys, tmp_path):
    empty = tmp_path / "config.yaml"
    empty.write_text("\n# nothing here\n")
    err = " ".join(refused(capsys, tmp_path, "--config", str(empty)).split())
    assert f"{empty}: the file is empty" in err


def test_a_negative_case_seed_is_the_case_files_error(capsys, tmp_path, config):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "10.yaml").write_text("cases:\n  - {name: a, m: 4, n: 4, k: 4, seed: -3, points: 1}\n")
    config.write_text(config.read_text().replace(f"testcases: {ROOT / 'testcases'}", f"testcases: {cases}"))
    err = " ".join(refused(capsys, tmp_path, "--config", str(config)).split())
    assert f"{cases / '10.yaml'}: cases[0].seed: must be from 0" in err


def test_an_empty_case_file_is_refused(capsys, tmp_path, config):
    cases = tmp_path / "cases"
    shutil.copytree(ROOT / "testcases", cases)
    (cases / "99-empty.yaml").write_text("")
    config.write_text(config.read_text().replace(f"testcases: {ROOT / 'testcases'}", f"testcases: {cases}"))
    err = " ".join(refused(capsys, tmp_path, "--config", str(config)).split())
    assert f"{cases / '99-empty.yaml'}: cases: the file holds no cases" in err


def test_an_empty_secret_file_is_refused(capsys, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("  \n")
    err = " ".join(refused(capsys, tmp_path, "--secret-file", str(secret)).split())
    assert f"--secret-file {secret}: the file is empty" in err


def test_decoding_a_kernel_as_editors_save_it():
    assert decode_source(b"\xef\xbb\xbf#define T 16\r\n// ok\r\n") == "#define T 16\n// ok\n"
    assert decode_source(b"// caf\xe9 au lait\n") == "// café au lait\n"  # Latin-1
    # An editor that puts a BOM before a Latin-1 file: the BOM goes, the rest is Latin-1 (never "ï»¿" at line 1).
    assert decode_source(b"\xef\xbb\xbf// caf\xe9\n") == "// café\n"
    assert decode_source("// 学生\n".encode()) == "// 学生\n"


@needs_cxx
def test_bom_crlf_and_latin1_kernels_grade_like_the_plain_one(graders, tmp_path):
    crlf = GOOD.replace(b"\n", b"\r\n")
    variants = {"bom": b"\xef\xbb\xbf" + GOOD, "crlf": crlf,
                "latin1": b"// r\xe9sum\xe9 de l'\xe9tudiant\r\n" + crlf,
                "bom_latin1": b"\xef\xbb\xbf// r\xe9sum\xe9\n" + GOOD}
    grade = graders("cpu")
    for name, data in variants.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "kernel.cu").write_bytes(data)
    grade.prefetch([SUBMISSIONS / "good_basic", *(tmp_path / name for name in variants)])
    plain = grade(SUBMISSIONS / "good_basic")
    assert plain.score == plain.checkable_max > 0
    for name in variants:
        result = grade(tmp_path / name)
        got = (result.outcome, result.score, result.checkable_max)
        assert got == ("graded", plain.score, plain.checkable_max), name
    # Line numbers stay the student's: the Latin-1 file has one more line before the same code.
    lines = {c.name: c.metrics.get("line") for c in grade(tmp_path / "latin1").checks}
    assert lines == {c.name: (c.metrics["line"] + 1 if c.metrics.get("line") else c.metrics.get("line"))
                     for c in plain.checks}


def test_fail_under_compares_with_what_could_be_checked(tmp_path):
    from grader.cli import below
    from grader.result import CASE, GRADED, TIMING, SubmissionResult, passed, skipped

    cpu = SubmissionResult("s", GRADED, [passed("a", CASE, 74),
                                         skipped("t", TIMING, 26, "not timed", needs_gpu="timing")])
    assert not below(cpu, 100)  # 74 of 74 checkable is full marks
    gpu_run_timing_lost = SubmissionResult("s", GRADED, [passed("a", CASE, 74), skipped("t", TIMING, 26, "slow")])
    assert below(gpu_run_timing_lost, 100)  # a GPU run that skipped timing did lose those points
    cpu.checks[0].score = 37
    assert below(cpu, 60) and not below(cpu, 50)  # 37 of 74 is 50 of 100


def test_a_results_file_is_json_for_an_lms_even_from_a_folder_without_kernel(tmp_path, config):
    folder = tmp_path / "sub"
    folder.mkdir()
    results = tmp_path / "results.json"
    assert main(["prairielearn", str(folder), str(results), "--config", str(config), "--no-run"]) == 0
    assert json.loads(results.read_text())["gradable"] is False


@needs_nvcc
def test_a_compile_error_in_the_graders_own_lines_is_told_in_the_students_terms(graders):
    """The tile size probe the grader appends fails when TILE_SIZE is a variable: the student reads what
    to change, never the probe's text or its internal names."""
    compiled = next(c for c in graders("cpu")(SUBMISSIONS / "tile_size_from_block").checks if c.kind == "compile")
    assert compiled.status == "error"
    assert "the tile size must be a compile-time integer constant, e.g. #define TILE_SIZE 16" in compiled.message
    assert "sgemm_grader" not in compiled.message and "<grader" not in compiled.message
