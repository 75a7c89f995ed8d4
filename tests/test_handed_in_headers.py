"""Headers handed in with kernel.cu (config compile.handed_in_headers): read beside it as hostile input, checked
by the include policy as kernel.cu is, carried to every compiler (nvcc's compile check, the CPU emulator's g++,
the GPU child), by every intake (a folder, batch intake, one student's archive) and into --resume's fingerprint.
The GPU twin is test_handed_in_headers_gpu.py.
"""
import io
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from hardware import needs_cxx, needs_nvcc

from grader.cases import load_cases
from grader.config import load_config
from grader.intake.intake import discover
from grader.intake.student_archive import read_student_archive
from grader.pipeline import RunPlan, grade
from grader.result import COMPILE_ERROR, GRADED, PASSED, SUBMISSION_ERROR

pytestmark = [needs_cxx, needs_nvcc]
HEADER = "tiling.cuh"
# Outside tests/submissions: its kernel.cu compiles only with the header beside it, named in the config.
SUBMISSION = ROOT / "tests" / "handed_in" / "tiled_helper"
# Every point a CPU grade can check of this kernel: 100 less timing (10), held for a GPU: its helper in the
# header reads the tiles where the emulator's profile does not count, so the speed model has too few accesses
# to estimate from (the large cases run by sampled blocks).
CPU_FULL = 90
CASES_RUN_WHOLE_FULL = CPU_FULL - 16  # under the `cases` fixture: the large cases (16 points) left out


@pytest.fixture(scope="module")
def config(config_file):
    config = load_config(config_file)
    config.compile.handed_in_headers = [HEADER]
    return config


@pytest.fixture(scope="module")
def cases(config):
    return [c for c in load_cases(config.testcases_dir) if c.on_cpu == "whole"]


def compiled(result):
    return next(c for c in result.checks if c.kind == "compile")


def copy_submission(tmp_path: Path, name: str = "alice") -> Path:
    folder = tmp_path / name
    shutil.copytree(SUBMISSION, folder)
    return folder


def every_text(result) -> str:
    return "\n".join([result.message, result.log, *(c.message for c in result.checks)])


def test_a_named_header_with_a_device_helper_grades_full_marks_on_the_cpu(config_file):
    """The helper lives in tiling.cuh: nvcc's compile check and the emulator's build both find it, the static
    checks follow the kernel into it, and every point the CPU can check is given."""
    config = load_config(config_file)
    config.compile.handed_in_headers = [HEADER]
    result = grade(SUBMISSION, config, load_cases(config.testcases_dir), RunPlan("cpu"))
    assert result.outcome == GRADED and result.score == result.checkable_max == CPU_FULL, every_text(result)
    assert compiled(result).status == PASSED and "sm_90" in compiled(result).message
    assert result.tile_size == 16 and "no tile size" not in compiled(result).message  # TILE_SIZE is the header's


def test_a_header_the_config_does_not_name_is_refused(config_file, cases):
    result = grade(SUBMISSION, load_config(config_file), cases, RunPlan("cpu"))
    assert result.outcome == COMPILE_ERROR
    assert f'line 1: #include "{HEADER}" is not allowed' in compiled(result).message


def test_a_named_header_that_includes_a_forbidden_path_is_refused_unread(tmp_path, config, cases):
    folder = copy_submission(tmp_path)
    header = folder / HEADER
    header.write_text('#include "/etc/passwd"\n' + header.read_text())
    result = grade(folder, config, cases, RunPlan("cpu"))
    message = compiled(result).message
    assert result.outcome == COMPILE_ERROR
    assert f"these lines of {HEADER} (handed in with it)" in message
    assert 'line 1: #include "/etc/passwd" is not allowed: absolute paths' in message
    assert "root:" not in every_text(result)


def test_a_header_handed_in_as_a_link_is_never_followed(tmp_path, config, cases):
    folder = copy_submission(tmp_path)
    (folder / HEADER).unlink()
    os.symlink("/etc/passwd", folder / HEADER)
    result = grade(folder, config, cases, RunPlan("cpu"))
    assert result.outcome == SUBMISSION_ERROR
    assert f"{HEADER}: a symbolic link, not a file" in result.message
    assert "root:" not in every_text(result)


def test_a_named_header_that_was_not_handed_in_is_the_students_error(tmp_path, config, cases):
    folder = copy_submission(tmp_path)
    (folder / HEADER).unlink()
    result = grade(folder, config, cases, RunPlan("cpu"))
    assert result.outcome == SUBMISSION_ERROR
    assert result.message == f"{HEADER}: included by your code but not handed in; hand it in beside kernel.cu"


def test_an_oversized_header_is_refused(tmp_path, config, cases):
    folder = copy_submission(tmp_path)
    (folder / HEADER).write_text("// padding\n" * 30000)
    result = grade(folder, config, cases, RunPlan("cpu"))
    assert result.outcome == SUBMISSION_ERROR and f"{HEADER} is larger than" in result.message


def test_a_compile_error_inside_the_header_names_the_header_and_its_line(tmp_path, config, cases):
    folder = copy_submission(tmp_path)
    header = folder / HEADER
    header.write_text(header.read_text().replace("return sum;", "return summ;"))
    result = grade(folder, config, cases, RunPlan("cpu"))
    assert result.outcome == COMPILE_ERROR
    assert f'{HEADER}(12): error: identifier "summ" is undefined' in compiled(result).message
    assert "/tmp/" not in compiled(result).message


def test_the_emulator_builds_the_header_beside_kernel_cu(tmp_path, config):
    """The g++ build of the emulator, on its own (no nvcc before it): an error in the header is located there,
    which makes it the student's (build_failure.py), and names the header."""
    from grader.build_failure import classify
    from grader.execute.confine.sandbox import detect, scratch_folder
    from grader.execute.cpu.build import build

    source = (SUBMISSION / "kernel.cu").read_text()
    contract = config.kernel.contract()

    def built(header: str):
        with scratch_folder("sgemm-test-") as work:  # a folder the sandbox's uid can reach, as the driver's
            return build(source, contract, contract.tile_source(""), tmp_path / "cache", work, detect(), 120,
                         {HEADER: header})

    broken = built((SUBMISSION / HEADER).read_text().replace("return sum;", "return summ;"))
    assert broken.binary is None and f"{HEADER}:12:" in broken.message
    assert classify(broken.log, source, [HEADER]).students
    assert built((SUBMISSION / HEADER).read_text()).binary is not None


def test_batch_intake_carries_the_header_and_the_fingerprint_follows_it(tmp_path, config, cases):
    cls = tmp_path / "class"
    copy_submission(cls, "alice")
    copy_submission(cls, "bob")
    bob = cls / "bob" / HEADER
    bob.write_text(bob.read_text().replace("sum += As[ty][i] * Bs[i][tx];", "sum += As[ty][i] * Bs[tx][i];"))
    os.symlink("/etc/passwd", cls / "mallory")  # not a student: refused by intake as before
    intake = discover([cls], tmp_path / "work", handed_in=[HEADER])
    entries = {entry.key: entry for entry in intake.submissions}
    assert (entries["alice"].path / HEADER).read_text() == (SUBMISSION / HEADER).read_text()
    names = [HEADER]
    assert entries["alice"].submitted(names) != entries["bob"].submitted(names)  # same kernel.cu, other header
    assert entries["alice"].kernel.read_bytes() == entries["bob"].kernel.read_bytes()
    right = grade(entries["alice"].path, config, cases, RunPlan("cpu"))
    assert right.score == right.checkable_max == CASES_RUN_WHOLE_FULL
    wrong = grade(entries["bob"].path, config, cases, RunPlan("cpu"))
    assert wrong.outcome == GRADED and wrong.score < CASES_RUN_WHOLE_FULL


def test_batch_intake_refuses_a_header_handed_in_as_a_link(tmp_path):
    cls = tmp_path / "class"
    folder = copy_submission(cls, "mallory")
    (folder / HEADER).unlink()
    os.symlink("/etc/passwd", folder / HEADER)
    copy_submission(cls, "alice")
    intake = discover([cls], tmp_path / "work", handed_in=[HEADER])
    assert [entry.key for entry in intake.submissions] == ["alice"]
    refusal = next(r for r in intake.refused if r.key == "mallory")
    assert "link" in refusal.reason
    assert not (tmp_path / "work" / "mallory").exists()


def zipped(members: dict[str, bytes]) -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return data.getvalue()


def test_one_students_archive_carries_the_header_beside_the_chosen_kernel(tmp_path, config, cases):
    kernel, header = (SUBMISSION / "kernel.cu").read_bytes(), (SUBMISSION / HEADER).read_bytes()
    archive = zipped({"lab3/kernel.cu": kernel, f"lab3/{HEADER}": header, f"other/{HEADER}": b"#error not this"})
    read = read_student_archive(archive, tmp_path / "alice", handed_in=[HEADER])
    assert read.folder is not None and (read.folder / HEADER).read_bytes() == header
    assert grade(read.folder, config, cases, RunPlan("cpu")).score == CASES_RUN_WHOLE_FULL


def test_one_students_archive_with_a_linked_header_is_refused(tmp_path):
    info = zipfile.ZipInfo(f"lab3/{HEADER}")
    info.external_attr = (0o120777 << 16)  # a symbolic link member
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("lab3/kernel.cu", (SUBMISSION / "kernel.cu").read_bytes())
        archive.writestr(info, "/etc/passwd")
    read = read_student_archive(data.getvalue(), tmp_path / "mallory", handed_in=[HEADER])
    assert read.folder is None and HEADER in read.refusal


def test_gradescope_grades_an_uploaded_folder_with_its_header(tmp_path, config_file):
    """The LMS entry finds kernel.cu below the upload and reads the header beside it."""
    import json

    from grader.cli import main

    named = tmp_path / "config.yaml"
    named.write_text(config_file.read_text().replace("compile:\n", f"compile:\n  handed_in_headers: [{HEADER}]\n", 1))
    copy_submission(tmp_path / "submission", "lab3")
    results = tmp_path / "results" / "results.json"
    assert main(["gradescope", str(tmp_path / "submission"), str(results), "--config", str(named),
                 "--backend", "cpu"]) == 0
    data = json.loads(results.read_text(encoding="utf-8"))
    assert data["score"] == CPU_FULL, data["output"]
