"""`grade` as a user runs it, on the paths that need no GPU: --no-run, misuse, bad submissions."""
import json
import shutil

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import without_gpu
from junitparser import JUnitXml, Skipped

from grader.cli import EXIT_NOT_GRADED, main
from grader.execute.nvcc.compile import nvcc_path

no_gpu_here = without_gpu


def load(out, name):
    return json.loads((out / f"{name}.json").read_text())


def test_no_run_checks_statically_compiles_and_skips_gpu_checks(tmp_path):
    code = main([str(SUBMISSIONS / "good_basic"), "--no-run", "-o", str(tmp_path)])
    assert code == 0
    result = load(tmp_path, "good_basic")
    assert set(result) >= {"submission", "score", "max_score", "status", "checks"}
    assert result["status"] == "graded" and result["max_score"] == 100
    by_kind = {}
    for check in result["checks"]:
        assert set(check) >= {"name", "kind", "status", "score", "max_score", "message"}
        by_kind.setdefault(check["kind"], []).append(check)
    assert all(c["status"] == "passed" for c in by_kind["static"])
    assert by_kind["compile"][0]["status"] == ("passed" if nvcc_path() else "skipped")
    for check in by_kind["case"] + by_kind["timing"]:
        assert check["status"] == "skipped" and "--no-run" in check["message"]
    assert result["score"] == 10


def test_junit_shows_skipped_gpu_checks_to_an_lms(tmp_path):
    main([str(SUBMISSIONS / "missing_use_barrier"), "--no-run", "-o", str(tmp_path)])
    suite = next(iter(JUnitXml.fromfile(str(tmp_path / "missing_use_barrier.junit.xml"))))
    cases = {case.name: case for case in suite}
    use = next(case for name, case in cases.items() if name.startswith("static barrier after using tiles"))
    assert use.result and "line" in use.result[0].message
    skipped_cases = [case for name, case in cases.items() if name.startswith("case ")]
    assert skipped_cases and all(isinstance(c.result[0], Skipped) for c in skipped_cases)


def test_missing_path_is_misuse_but_the_others_are_still_graded(tmp_path, capsys):
    code = main([str(tmp_path / "nope"), str(SUBMISSIONS / "good_basic"), "--no-run", "-o", str(tmp_path)])
    assert code == 2
    assert "nope: no such file or folder" in capsys.readouterr().err
    assert (tmp_path / "good_basic.json").is_file()


def test_bad_config_exits_2_naming_the_key(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text((ROOT / "config.yaml").read_text().replace("  run_s: 10", "  run_s: soon"))
    code = main([str(SUBMISSIONS / "good_basic"), "--config", str(config), "--no-run", "-o", str(tmp_path)])
    assert code == 2
    assert "timeouts.run_s: expected a number, got 'soon'" in capsys.readouterr().err
    assert not (tmp_path / "good_basic.json").exists()


@pytest.mark.parametrize("content, words", [
    (b"", "kernel.cu is empty"),
    (b"  \n\n", "kernel.cu is empty"),
    (b"\x7fELF\x00\x01binary", "binary file"),
])
def test_unreadable_submissions_get_an_error_row_not_a_crash(tmp_path, content, words, capsys):
    """Refused at the door: one line saying what was found, a non-zero exit, and still the files a CI reads."""
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "kernel.cu").write_bytes(content)
    assert main([str(folder), "--no-run", "-o", str(tmp_path / "out")]) == EXIT_NOT_GRADED
    said = capsys.readouterr()
    assert words in said.err and "skipped" not in said.out
    result = load(tmp_path / "out", "student")
    assert result["status"] == "error" and words in result["message"]
    assert result["score"] == 0 and result["max_score"] == 100  # an LMS sees 0 of 100, not 0 of 0
    assert all(c["status"] == "skipped" and words in c["message"] for c in result["checks"])


@pytest.mark.parametrize("files, words", [
    ((), "no kernel.cu: nothing handed in; hand in your kernel as kernel.cu"),
    (("notes.txt",), "no kernel.cu and no .cu file; found: notes.txt. Hand in your kernel as kernel.cu"),
    (("a.cu", "b.cu"), "no kernel.cu, but 2 .cu files (a.cu, b.cu): name the one to grade kernel.cu"),
])
def test_a_folder_without_kernel_cu_is_told_what_it_holds_and_what_to_do(tmp_path, capsys, files, words):
    folder = tmp_path / "student"
    folder.mkdir()
    for name in files:
        shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", folder / name)
    assert main([str(folder), "--no-run", "-o", str(tmp_path / "out")]) == EXIT_NOT_GRADED
    assert words in " ".join(capsys.readouterr().err.split())
    assert words in load(tmp_path / "out", "student")["message"]  # the files say it too


def test_a_folder_with_kernel_cu_and_other_cu_files_says_which_was_graded(tmp_path, capsys):
    folder = tmp_path / "student"
    folder.mkdir()
    for name in ("kernel.cu", "old.cu"):
        shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", folder / name)
    assert main([str(folder), "--no-run", "-o", str(tmp_path / "out")]) == 0
    note = "graded kernel.cu at the top of your submission; not graded: old.cu"
    assert f"Note: {note}" in " ".join(capsys.readouterr().out.split())
    assert load(tmp_path / "out", "student")["intake_notes"] == [note]


def test_wrong_kernel_name_is_reported_without_compiling(tmp_path):
    # It may well compile: a submission error (exit 4), saying what to rename, never "did not compile".
    assert main([str(SUBMISSIONS / "wrong_kernel_name"), "--no-run", "-o", str(tmp_path)]) == 4
    stored = load(tmp_path, "wrong_kernel_name")
    assert stored["outcome"] == "submission error" and stored["checks"][0]["status"] == "error"
    assert stored["checks"][0]["message"] == ("kernel mysgemm not found; found: MySgemm. Rename MySgemm to mysgemm, "
                                              "the name the grader launches, keeping its parameters")


def test_a_file_path_is_graded_under_its_stem(tmp_path):
    file = tmp_path / "alice.cu"
    shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", file)
    main([str(file), "--no-run", "-o", str(tmp_path / "out")])
    assert load(tmp_path / "out", "alice")["submission"] == "alice"


def test_same_names_do_not_overwrite_each_other(tmp_path):
    for parent in ("a", "b"):
        (tmp_path / parent / "sub").mkdir(parents=True)
        shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", tmp_path / parent / "sub" / "kernel.cu")
    main([str(tmp_path / "a" / "sub"), str(tmp_path / "b" / "sub"), "--no-run", "-o", str(tmp_path / "out")])
    assert (tmp_path / "out" / "sub.json").is_file() and (tmp_path / "out" / "sub-2.json").is_file()


def test_fail_under_returns_1_below_the_threshold(tmp_path):
    args = [str(SUBMISSIONS / "good_basic"), "--no-run", "-o", str(tmp_path)]
    assert main(args + ["--fail-under", "50"]) == 1
    assert main(args + ["--fail-under", "5"]) == 0


@no_gpu_here
def test_without_a_gpu_auto_emulates_on_the_cpu_and_says_so(tmp_path, capsys):
    assert main([str(SUBMISSIONS / "good_basic"), "-o", str(tmp_path)]) == 0
    result = load(tmp_path, "good_basic")
    assert result["backend"] == "cpu"
    assert result["message"].startswith("CPU emulation: correctness checked, timing estimated by the speed model "
                                        "(no NVIDIA GPU found")
    emulated = [c for c in result["checks"] if c["kind"] == "case" and "GPU only" not in c["message"]]
    assert emulated and all(c["status"] == "passed" for c in emulated)
    timing = next(c for c in result["checks"] if c["kind"] == "timing")
    assert timing["status"] == "passed" and timing["metrics"]["estimated"]
    assert "CPU emulation: correctness checked, timing estimated by the speed model" in capsys.readouterr().out


@no_gpu_here
def test_without_a_gpu_backend_gpu_is_misuse(tmp_path, capsys):
    assert main([str(SUBMISSIONS / "good_basic"), "--backend", "gpu", "-o", str(tmp_path)]) == 2
    assert "--backend gpu: no NVIDIA GPU found" in capsys.readouterr().err


def test_a_secret_changes_the_inputs_but_not_the_shapes(tmp_path, monkeypatch):
    from grader.cases import load_cases, with_secret
    from grader.config import load_config

    cases = load_cases(load_config().testcases_dir)
    mixed = with_secret(cases, "instructor secret")
    assert [(c.name, c.m, c.n, c.k) for c in mixed] == [(c.name, c.m, c.n, c.k) for c in cases]
    assert all(a.seed != b.seed for a, b in zip(cases, mixed))
    assert with_secret(cases, "instructor secret") == mixed  # reproducible for the instructor
    assert with_secret(cases, "another") != mixed


def test_secret_file_that_cannot_be_read_is_misuse(tmp_path, capsys):
    code = main([str(SUBMISSIONS / "good_basic"), "--no-run", "--secret-file", str(tmp_path / "missing"),
                 "-o", str(tmp_path)])
    assert code == 2 and "--secret-file" in capsys.readouterr().err


def test_an_entry_points_imports_pause_the_collector_and_leave_it_running():
    """`grade` and the CPU driver import with the garbage collector paused (grader/startup.py): it must run again
    after, or a long-lived process that imports through it would never collect."""
    import gc

    from grader.startup import paused_collection

    assert gc.isenabled()
    with paused_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ImportError), paused_collection():
        import grader.no_such_module  # noqa: F401
    assert gc.isenabled()  # also after imports that failed


def test_grade_help_lists_every_command_and_each_has_its_own_help():
    import subprocess
    import sys

    from grader.cli import COMMANDS
    from grader.config import preset_names

    def helped(*argv: str) -> str:
        finished = subprocess.run([sys.executable, "-m", "grader", *argv, "--help"], capture_output=True, text=True,
                                  cwd=ROOT, check=False)
        assert finished.returncode == 0, finished.stderr
        return finished.stdout

    top = helped()
    for command in COMMANDS:
        assert f"grade {command if command != 'grade' else 'PATH ...'}" in top
        if command != "grade":
            assert helped(command).startswith(f"usage: grade {command}")
    assert f"presets/: {', '.join(preset_names())}" in " ".join(top.split()) and "pmpp" in preset_names()


def test_a_grade_ends_with_its_output_and_files_whole_its_exit_code_and_nothing_left_in_the_temp_root(
        tmp_path, temp_root, quick_config_file):
    """`grade` ends without the interpreter's teardown of its modules (startup.ended_now, after the threads that are
    no daemons and the atexit functions): everything it printed reaches the pipe, every file it wrote is whole,
    the exit code is the command's, and the scratch folders removed on threads while it assembled the result
    (leftovers.removed_soon) are gone."""
    import os
    import subprocess
    import sys

    from conftest import left_in

    env = {**os.environ, "TMPDIR": str(temp_root)}
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "good_basic"),
                               str(SUBMISSIONS / "empty"), "--config", str(quick_config_file), "--backend", "cpu",
                               "-o", str(tmp_path)],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert finished.returncode == EXIT_NOT_GRADED, finished.stderr  # the empty one is not graded
    good = load(tmp_path, "good_basic")
    assert good["status"] == "graded" and good["score"] > 0
    assert finished.stdout.rstrip().splitlines()[-1].startswith("Graded with: ")  # the last line printed
    assert "empty" in finished.stderr and load(tmp_path, "empty")["status"] != "graded"
    assert JUnitXml.fromfile(str(tmp_path / "good_basic.junit.xml"))  # parses: written whole
    assert left_in(temp_root) == []


def test_the_fast_end_waits_for_threads_runs_atexit_and_flushes_what_was_printed(tmp_path):
    """ended_now() skips only the teardown: a thread that is no daemon finishes its work, an atexit function runs,
    text still in stdout's buffer (a pipe's) is written, and the exit code is the one given."""
    import subprocess
    import sys

    code = ("import atexit, pathlib, sys, threading, time\n"
            "from grader.startup import ended_now\n"
            f"folder = pathlib.Path({str(tmp_path)!r})\n"
            "def late(): time.sleep(0.3); (folder / 'thread').write_text('done')\n"
            "threading.Thread(target=late).start()\n"
            "atexit.register(lambda: (folder / 'atexit').write_text('ran'))\n"
            "print('buffered, not flushed', end='')\n"
            "ended_now(3)\n")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert finished.returncode == 3, finished.stderr
    assert finished.stdout == "buffered, not flushed"
    assert (tmp_path / "thread").read_text() == "done" and (tmp_path / "atexit").read_text() == "ran"


def test_every_lms_entry_is_a_command():
    """cli.py names the LMS entries' commands itself, so that `grade PATH` need not import the exports: the names
    and report/exports.py's LMS_ENTRIES must stay the same set."""
    from grader.cli import LMS_COMMANDS
    from grader.report.exports import LMS_ENTRIES

    assert set(LMS_COMMANDS) == set(LMS_ENTRIES)
