"""The README's and docs' CPU examples, run as written: each command is found in its page word for word, run
through the installed `grade` in a folder holding what its placeholders name (my_submission/, sub/, class.zip),
and what the page says it gives is checked. The examples that grade on the CPU emulator take seconds each and
are marked `slow` (deselect with -m 'not slow'); the others take well under a second."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

SCRIPT = Path(sys.executable).with_name("grade")  # the console script the README installs
# Where the tests run from an interpreter without it (the GPU host's wheels), its module form: the same entry.
GRADE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "grader"]
PAGES = {name: (ROOT / name).read_text() for name in ("README.md", "docs/instructors.md", "docs/students.md",
                                                       "docs/service-and-cluster.md")}
# What a placeholder of the docs stands for: a submission (sub/: the one a preset grades) or a class.
KERNELS = {"preset ece408": "ece408_mp3", "preset pmpp": "pmpp_square"}


def run_as_written(page: str, command: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command as the page writes it (`grade …`, `.venv/bin/grade …`, `python -m grader …`), run in cwd."""
    assert command in PAGES[page], f"{page} no longer says `{command}`: update this test with it"
    words = shlex.split(command)
    if words[0] in ("grade", ".venv/bin/grade"):
        words[:1] = GRADE
    elif words[:3] == ["python", "-m", "grader"]:
        words[0] = sys.executable
    finished = subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in finished.stdout + finished.stderr, finished.stderr
    return finished


def submission(cwd: Path, name: str, kernel: str = "good_basic") -> Path:
    folder = cwd / name
    folder.mkdir()
    shutil.copy(SUBMISSIONS / kernel / "kernel.cu", folder / "kernel.cu")
    return folder


def named_files(page: str, folder: str) -> list[str]:
    """The files of `folder` the page names (`results/grades.csv`, …)."""
    return sorted(set(re.findall(rf"`{re.escape(folder)}/([\w./-]+\.\w+)`", PAGES[page])))


def test_help_lists_every_command_the_readme_names(tmp_path):
    said = run_as_written("README.md", "grade --help", tmp_path).stdout
    listed = re.search(r"`grade --help` lists every command \(([^)]*)\)", PAGES["README.md"])[1]
    for command in re.findall(r"`(\S+)`", listed):
        assert f"grade {command} " in said


def test_cluster_certs_writes_the_files_the_page_names(tmp_path):
    assert run_as_written("docs/service-and-cluster.md", "grade cluster-certs DIR", tmp_path).returncode == 0
    for name in ("ca.pem", "scheduler.pem", "worker.pem", "client.pem", "client-key.pem"):
        assert (tmp_path / "DIR" / name).is_file()
    assert (tmp_path / "DIR" / "client-key.pem").stat().st_mode & 0o777 == 0o600


@needs_cxx
@pytest.mark.slow
def test_the_readme_grades_the_student_template(tmp_path):
    shutil.copytree(ROOT / "student_template", tmp_path / "student_template")
    finished = run_as_written("README.md", ".venv/bin/grade student_template/", tmp_path)
    assert finished.returncode == 0 and "Total:" in finished.stdout
    assert (tmp_path / "results" / "student_template.json").is_file()


@needs_cxx
@pytest.mark.slow
def test_the_readme_prepares_the_cache_before_the_first_grade(tmp_path):
    finished = run_as_written("README.md", ".venv/bin/grade prepare", tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert "ready: the CPU emulator's harness object and precompiled header" in finished.stdout


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("command", ["grade my_submission/", "python -m grader my_submission/"])
def test_the_student_quick_start(tmp_path, command):
    submission(tmp_path, "my_submission")
    finished = run_as_written("README.md", command, tmp_path)
    assert finished.returncode == 0 and "Total:" in finished.stdout


@needs_cxx
@pytest.mark.slow
def test_a_class_in_one_command_writes_every_file_the_readme_names(tmp_path):
    with zipfile.ZipFile(tmp_path / "class.zip", "w") as canvas:  # Canvas's "Download Submissions" names
        canvas.write(SUBMISSIONS / "good_basic" / "kernel.cu", "ada_1001_5001_kernel.cu")
        canvas.write(SUBMISSIONS / "missing_load_barrier" / "kernel.cu", "brook_1002_5002_kernel.cu")
    finished = run_as_written("README.md", "grade batch class.zip -o results/", tmp_path)
    assert finished.returncode == 0, finished.stderr
    named = named_files("README.md", "results") + named_files("docs/instructors.md", "results")
    assert "junit.xml" in named and "grades.csv" in named
    assert [name for name in named if not (tmp_path / "results" / name).is_file()] == []
    assert "2 students" in " ".join(finished.stdout.split())


@needs_cxx
@pytest.mark.slow
def test_a_few_submissions_at_once_and_where_the_time_went(tmp_path):
    for name in ("sub1", "sub2", "sub"):
        submission(tmp_path, name)
    assert run_as_written("docs/instructors.md", "grade sub1/ sub2/ -o results/", tmp_path).returncode == 0
    for name in ("sub1.json", "sub1.junit.xml", "sub2.json", "sub2.junit.xml"):
        assert (tmp_path / "results" / name).is_file()
    phases = run_as_written("docs/instructors.md", "grade --phases sub/", tmp_path)
    assert phases.returncode == 0 and "Phases of sub" in phases.stderr


@needs_cxx
@pytest.mark.slow
@pytest.mark.parametrize("preset", ["ece408", "pmpp"])
def test_the_presets_grade_their_courses_files(tmp_path, preset):
    submission(tmp_path, "sub", KERNELS[f"preset {preset}"])
    finished = run_as_written("docs/instructors.md", f"grade --preset {preset} sub/", tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert json.loads((tmp_path / "results" / "sub.json").read_text())["outcome"] == "graded"
