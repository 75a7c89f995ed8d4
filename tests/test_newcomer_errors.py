"""What a new instructor meets on a fresh install (issue 48), each through the `grade` command in a subprocess:
every error says what to do and exits with a code docs/instructors.md lists, optional libraries name their
install command, a config merges over the project's, and the LMS builds carry what the docs use."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

SCRIPT = Path(sys.executable).with_name("grade")  # the console script the README installs
# Where the tests run from an interpreter without it (the GPU host's wheels), its module form: the same entry.
GRADE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "grader"]
GOOD = SUBMISSIONS / "good_basic" / "kernel.cu"
EXIT_BELOW, EXIT_USAGE, EXIT_NO_WORKERS, EXIT_NOT_GRADED, EXIT_REMOTE = 1, 2, 3, 4, 5


def grade(*args, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    finished = subprocess.run([*GRADE, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                              env=env, timeout=timeout)
    assert "Traceback" not in finished.stderr + finished.stdout, finished.stderr
    return finished


def folder_with(root: Path, name: str, data: bytes) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_bytes(data)
    return folder


# --- optional libraries: the README's install has no extras --------------------------------------------------


def without(tmp_path: Path, *modules: str) -> dict:
    """An environment where importing `modules` fails as an uninstalled package's import does."""
    shadow = tmp_path / "shadow"
    for module in modules:
        (shadow / module).mkdir(parents=True)
        (shadow / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n")
    return {**os.environ, "PYTHONPATH": str(shadow)}


@pytest.mark.parametrize("command", [
    ["cluster-certs", "certs"],
    ["scheduler", "--certs", "certs"],
    ["worker", "--scheduler", "tls://127.0.0.1:8786", "--certs", "certs"],
    ["batch", GOOD.parent, "--cluster", "tls://127.0.0.1:8786", "--certs", "certs", "--no-run"],
], ids=["cluster-certs", "scheduler", "worker", "batch --cluster"])
def test_cluster_commands_without_their_libraries_name_the_install_command(tmp_path, command):
    finished = grade(*command, cwd=tmp_path, env=without(tmp_path, "cryptography", "distributed"))
    assert finished.returncode == EXIT_USAGE
    # `[cluster]` is printed as typed: Rich's markup took it for a style and printed `pip install -e '.'`.
    assert "pip install -e '.[cluster]'" in finished.stderr
    assert not (tmp_path / "certs").exists()  # refused before anything is made


def test_serve_without_its_libraries_names_the_install_command(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("ece: a-token-of-twenty-characters\n")
    tokens.chmod(0o600)
    finished = grade("serve", "--tokens", tokens, "--no-run", cwd=tmp_path, env=without(tmp_path, "fastapi"))
    assert finished.returncode == EXIT_USAGE and "pip install -e '.[serve]'" in finished.stderr


# --- submissions the grader cannot grade: a submission error, what to change, exit 4 ---------------------------


def test_a_kernel_of_another_name_is_a_submission_error_saying_what_to_rename(tmp_path):
    renamed = GOOD.read_text().replace("mysgemm", "my_sgemm")
    folder_with(tmp_path, "sub", renamed.encode())
    finished = grade("sub", "--backend", "cpu", "-o", "out", cwd=tmp_path)
    assert finished.returncode == EXIT_NOT_GRADED
    said = " ".join(finished.stdout.split())  # the table wraps its lines
    assert "Rename my_sgemm to mysgemm" in said and "did not compile" not in said
    stored = json.loads((tmp_path / "out" / "sub.json").read_text())
    assert stored["outcome"] == "submission error"
    assert "Total: 0/90 points checkable without a GPU" in said  # the CPU's total (timing held), not 0/100


def test_the_reference_under_the_ece408_preset_is_told_the_presets_name(tmp_path):
    finished = grade("--preset", "ece408", ROOT / "reference", "--no-run", "-o", "out", cwd=tmp_path)
    assert finished.returncode == EXIT_NOT_GRADED
    assert "Rename mysgemm to matrixMultiplyShared" in " ".join(finished.stdout.split())


@needs_cxx
def test_a_tile_size_the_lab_does_not_allow_is_not_graded_and_gets_no_advice(tmp_path):
    finished = grade(SUBMISSIONS / "tile_size_disallowed", "--backend", "cpu", "-o", "out", cwd=tmp_path)
    said = " ".join(finished.stdout.split())
    assert finished.returncode == EXIT_NOT_GRADED
    assert "the tile size is 12; this lab allows 8, 16, 32" in said
    assert "How to make it faster" not in said and "registers" not in said


@needs_cxx
def test_a_bom_before_a_latin1_comment_grades_as_the_plain_file(tmp_path):
    folder_with(tmp_path, "sub", b"\xef\xbb\xbf// r\xe9sum\xe9 de l'\xe9tudiant\n" + GOOD.read_bytes())
    finished = grade("sub", "--backend", "cpu", "-o", "out", cwd=tmp_path)
    assert finished.returncode == 0 and "#line" not in finished.stdout
    stored = json.loads((tmp_path / "out" / "sub.json").read_text())
    assert (stored["outcome"], stored["score"]) == ("graded", 100)  # every point, as the plain file gets on the CPU


# --- --fail-under and a closed stdout ------------------------------------------------------------------------


def test_fail_under_says_why_it_exits_1_and_refuses_a_threshold_past_the_total(tmp_path):
    below = grade(GOOD.parent, "--no-run", "--fail-under", "50", "-o", "out", cwd=tmp_path)
    assert below.returncode == EXIT_BELOW
    assert re.search(r"good_basic: \d+/100 is below --fail-under 50", below.stderr), below.stderr
    past = grade(GOOD.parent, "--no-run", "--fail-under", "150", "-o", "out", cwd=tmp_path)
    assert past.returncode == EXIT_USAGE and "give a score from 0 to 100" in past.stderr


def test_a_reader_that_leaves_early_costs_no_grade_and_no_failure(tmp_path):
    """`grade a b | head -1`: the grades go on, their files are written, the exit code is the grades'."""
    process = subprocess.Popen([*GRADE, GOOD.parent, SUBMISSIONS / "compile_error", "--no-run", "-o", "out"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    _, errors = process.communicate(timeout=300)
    assert process.returncode == 0, errors
    assert b"Traceback" not in errors
    assert {p.name for p in (tmp_path / "out").glob("*.json")} == {"good_basic.json", "compile_error.json"}


# --- the LMS client of a grading service ---------------------------------------------------------------------


def test_remote_without_token_or_student_says_what_is_missing(tmp_path):
    folder_with(tmp_path, "student", GOOD.read_bytes())
    finished = grade("prairielearn", "student", "results/results.json", "--remote", "http://127.0.0.1:9",
                     cwd=tmp_path)
    assert finished.returncode == EXIT_REMOTE
    said = " ".join(finished.stderr.split())
    assert "--remote needs --token-file FILE" in said and "--student ID" in said
    assert json.loads((tmp_path / "results" / "results.json").read_text())["gradable"] is False


def test_remote_with_a_wrong_token_says_what_to_fix(tmp_path):
    from test_serve import WRONG_TOKEN, Service

    folder_with(tmp_path, "student", GOOD.read_bytes())
    token = tmp_path / "token"
    token.write_text(WRONG_TOKEN)
    service = Service(tmp_path).start()
    try:
        finished = grade("gradescope", "student", "results/results.json", "--remote",
                         f"http://127.0.0.1:{service.port}", "--token-file", token, "--student", "s1",
                         "--remote-timeout", "20", cwd=tmp_path)
    finally:
        service.kill()
    said = " ".join(finished.stderr.split())
    assert finished.returncode == EXIT_REMOTE
    assert "answered 401" in said and "--token-file must hold this course's token" in said


def test_prairielearn_help_does_not_promise_gradescopes_metadata(tmp_path):
    said = " ".join(grade("prairielearn", "--help", cwd=tmp_path).stdout.split())
    student = said[said.index("--student ID "):][:200]
    assert "Gradescope" not in student and "required with --remote" in student


# --- configuration --------------------------------------------------------------------------------------------


def config_outside(tmp_path: Path, text: str, name: str = "lab.yaml") -> Path:
    path = tmp_path / "elsewhere" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_a_config_outside_the_repository_setting_one_key_takes_the_rest_from_the_project(tmp_path):
    config = config_outside(tmp_path, "timing:\n  repetitions: 5\n")
    finished = grade("--config", config, GOOD.parent, "--no-run", "-o", "out", cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert json.loads((tmp_path / "out" / "good_basic.json").read_text())["max_score"] == 100


@pytest.mark.parametrize("text, words", [
    ("timing:\n  repetitions: 5\ntiming:\n  warmup: 1\n", "line 3: the key 'timing' is given twice"),
    ("source: x.yaml\n", "source: unknown key (allowed: compile, feedback, kernel, points, prairielearn, "
                         "reference, sampling, testcases, timeouts, timing, tolerance)"),
], ids=["duplicate key", "source"])
def test_config_mistakes_name_the_file_and_what_to_change(tmp_path, text, words):
    config = config_outside(tmp_path, text)
    finished = grade("--config", config, GOOD.parent, "--no-run", cwd=tmp_path)
    assert finished.returncode == EXIT_USAGE
    assert f"{config}: {words}" in " ".join(finished.stderr.split())


def case_folder(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "elsewhere" / "cases"
    folder.mkdir(parents=True)
    (folder / name).write_text(text)
    return config_outside(tmp_path, "testcases: cases\n")


def test_a_yml_case_file_is_read(tmp_path):
    config = case_folder(tmp_path, "quick.yml", "cases:\n  - {name: tiny, m: 3, n: 5, k: 7, seed: 1, points: 2}\n")
    finished = grade("--config", config, GOOD.parent, "--no-run", "-o", "out", cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr
    checks = json.loads((tmp_path / "out" / "good_basic.json").read_text())["checks"]
    assert [c["name"] for c in checks if c["kind"] == "case"] == ["tiny"]


def test_a_bare_list_of_cases_is_told_to_go_under_cases(tmp_path):
    config = case_folder(tmp_path, "quick.yaml", "- {name: tiny, m: 3, n: 5, k: 7, seed: 1, points: 2}\n")
    finished = grade("--config", config, GOOD.parent, "--no-run", cwd=tmp_path)
    assert finished.returncode == EXIT_USAGE and "put the cases under `cases:`" in finished.stderr


# --- the cluster ----------------------------------------------------------------------------------------------


def test_cluster_certs_says_only_the_clients_key_runs_code(tmp_path):
    finished = grade("cluster-certs", "certs", cwd=tmp_path)
    said = " ".join(finished.stdout.split())
    assert finished.returncode == 0 and "Anyone holding a key" not in said
    assert "Whoever holds client-key.pem can run code on the workers" in said


@pytest.mark.slow
def test_a_cluster_batch_with_no_worker_stops_with_rows_and_files_and_its_scheduler_leaves_nothing(tmp_path):
    """Exit 3 with a grader-error row per student and the class files (it was exit 2 and no files), and
    `grade scheduler`'s start-up line and scratch space (it left /tmp/dask-scratch-space)."""
    from test_serve import free_port

    assert grade("cluster-certs", "certs", cwd=tmp_path).returncode == 0
    temp, port = tmp_path / "temp", free_port()
    temp.mkdir()
    log = tmp_path / "scheduler.log"
    with log.open("w") as written:
        scheduler = subprocess.Popen([*GRADE, "scheduler", "--certs", "certs", "--port", str(port), "--http",
                                      f"127.0.0.1:{free_port()}"], cwd=tmp_path, stdout=written,
                                     stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(temp)})
    try:
        deadline = time.monotonic() + 60
        while "Scheduler at" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any(temp.iterdir())  # its scratch space is in the temporary root, in a folder of its own
        finished = grade("batch", GOOD.parent, SUBMISSIONS / "compile_error", "--cluster",
                         f"tls://127.0.0.1:{port}", "--certs", "certs", "--worker-wait", "2", "-o", "out",
                         cwd=tmp_path)
    finally:
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(timeout=60)
    assert finished.returncode == EXIT_NO_WORKERS
    assert "start a worker and run the same command with --resume" in " ".join(finished.stderr.split())
    rows = (tmp_path / "out" / "grades.csv").read_text()
    assert rows.count("grader error") >= 2 and (tmp_path / "out" / "junit.xml").is_file()
    said = log.read_text()
    assert "dashboard at:  none (--dashboard serves one)" in said and "/status" not in said
    assert list(temp.iterdir()) == []  # removed when it stopped


# --- --help ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, words", [
    ("batch", "a Canvas or Gradescope zip"), ("serve", "LMS containers"), ("gradescope", "Gradescope's autograder"),
    ("cluster-certs", "the TLS certificates"), ("scheduler", "Dask scheduler, on TLS"),
    ("worker", "Dask workers for a cluster's batches (one per GPU)")])
def test_help_writes_names_as_they_are_written(tmp_path, command, words):
    assert words in " ".join(grade(command, "--help", cwd=tmp_path).stdout.split())


# --- the LMS builds -------------------------------------------------------------------------------------------


def what_the_grader_reads() -> set[str]:
    """The repository's top-level names an installed grader reads: its package and install files, config.yaml,
    presets/, and every folder or file config.yaml and the presets name (the docs use each of them)."""
    import yaml

    names = {"grader", "pyproject.toml", "README.md", "config.yaml", "presets"}
    for path in [ROOT / "config.yaml", *sorted((ROOT / "presets").glob("*.yaml"))]:
        data = yaml.safe_load(path.read_text())
        for key in ("testcases", "reference"):
            if key in data:
                names.add((path.parent / data[key]).resolve().relative_to(ROOT).parts[0])
    return names


def gradescope_recipe() -> list[str]:
    header = (ROOT / "gradescope" / "setup.sh").read_text()
    (line,) = [line for line in header.splitlines() if line.startswith("#   zip -r autograder.zip")]
    return line.split()[4:]


def prairielearn_recipe() -> list[str]:
    copies = [line.split()[1:-1] for line in (ROOT / "prairielearn" / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]
    return [name for names in copies for name in names]


@pytest.mark.parametrize("recipe", [gradescope_recipe, prairielearn_recipe], ids=["gradescope", "prairielearn"])
def test_the_lms_builds_carry_everything_the_grader_reads(tmp_path, recipe):
    """Built as the recipe says, the grader grades with a preset (it said "no such preset (there are: none)")."""
    names = recipe()
    assert what_the_grader_reads() <= set(names)
    built = tmp_path / "built"
    built.mkdir()
    for name in names:
        source = ROOT / name
        shutil.copytree(source, built / name, ignore=shutil.ignore_patterns("__pycache__")) if source.is_dir() \
            else shutil.copy(source, built / name)
    finished = subprocess.run([sys.executable, "-m", "grader", "--preset", "pmpp", SUBMISSIONS / "pmpp_square",
                               "--no-run", "-o", tmp_path / "out"], cwd=tmp_path, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(built), "HOME": str(tmp_path)},
                              timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert json.loads((tmp_path / "out" / "pmpp_square.json").read_text())["outcome"] == "graded"
