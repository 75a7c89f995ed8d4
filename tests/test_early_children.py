"""Children started before their job (issue 50): a grade starts the children its plan needs before it reads and
checks the submission; each waits for its job, the run it was started for takes it, and what nobody took is killed
and its folder removed. The CPU driver and the GPU child wait the same way (protocol.await_job)."""
from __future__ import annotations

import os
import select
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import SUBMISSIONS, descendants, wait_until_gone
from hardware import needs_cxx, needs_gpu
from test_runner import CHILD_PRELUDE, make_job

from grader.cases import load_cases
from grader.config import load_config
from grader.execute.early import start_early
from grader.execute.runner import Limits, run_job
from grader.execute.spawn import ChildProgram, EarlyChildren, Placement
from grader.leftovers import GRADE, owner
from grader.pipeline import grade
from grader.plan import CPU, GPU, RunPlan
from grader.result import COMPILE, COMPILE_ERROR, GRADED

REFUSED_TO_READ = "could make the compiler read other files"


def grade_folders() -> set[str]:
    """This process's grade folders (leftovers.py names them for it) under the temporary root."""
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith(f"{GRADE}{owner()}-")}


def grader_children() -> dict[int, str]:
    """This process's live descendants running the grader's children (the CPU driver, the GPU child)."""
    return {pid: command for pid, command in descendants(os.getpid()).items() if "grader.execute" in command}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@needs_cxx
def test_a_started_driver_waits_for_its_job_and_is_gone_with_its_folder_when_not_needed():
    folders = grade_folders()
    early = EarlyChildren()
    early.start(ChildProgram.cpu_driver(), Placement(), [], "")
    (pid,) = early.pids()
    time.sleep(1.0)  # well past its interpreter's start and its imports
    started = early.take(ChildProgram.cpu_driver(), Placement())
    assert started.pid == pid and early.pids() == []  # taken once
    ready, _, _ = select.select([started.events_fd], [], [], 0)
    assert alive(pid) and not ready, "it neither ended nor said anything before it was handed a job"
    assert os.listdir(started.workdir) == []  # no job file, nothing of a submission: nothing to run yet
    assert len(grade_folders() - folders) == 1  # its own, named for this process: a kill -9 leaves it to leftovers
    started.discard()
    wait_until_gone([pid])
    assert grade_folders() == folders and not grader_children()


def test_the_startup_deadline_does_not_count_the_wait_for_the_job(tmp_path):
    """A child started early waits for the parent's work; its startup limit begins when it is handed its job."""
    script = tmp_path / "child.py"
    script.write_text(CHILD_PRELUDE + textwrap.dedent("""
        send("phase", phase="startup")
        send_case("one")
        send("done")
    """))
    program, placement = ChildProgram((sys.executable, str(script))), Placement()
    limits = Limits(startup_s=1, compile_s=1, run_s=1, max_restarts=0)
    with EarlyChildren() as early:
        early.start(program, placement, [], "")
        time.sleep(2 * limits.startup_s)  # the parent's imports and static check, made slow
        events = list(run_job(make_job(tmp_path, ("one",)), limits, lambda: 0, program, placement,
                              started=early.take(program, placement)))
    assert [event["event"] for event in events] == ["case", "done", "output"], events


@needs_cxx
@pytest.mark.parametrize("name, outcome", [("include_refused", COMPILE_ERROR), ("good_basic", GRADED)],
                         ids=["refused", "good_basic"])
def test_a_cpu_grade_takes_its_early_driver_or_leaves_nothing_behind(config_file, name, outcome):
    """A refused submission never needs the driver started for it: killed and its folder removed at the grade's end;
    a graded one is run by it. Either way no child process and no folder of the grade is left."""
    config = load_config(config_file)
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:3]
    plan = RunPlan(CPU)
    folders = grade_folders()
    early = start_early(config, cases, plan)
    (pid,) = early.pids()
    assert alive(pid)
    result = grade(SUBMISSIONS / name, config, cases, plan, early)
    assert result.outcome == outcome, result.message
    compiled = next(check for check in result.checks if check.kind == COMPILE)
    assert (REFUSED_TO_READ in compiled.message) == (name == "include_refused")
    if outcome == GRADED:
        assert result.score == result.checkable_max, [(c.name, c.message) for c in result.checks if not c.passed]
        assert "sandbox" not in result.phases  # the run started no child of its own: it took the early one
    wait_until_gone([pid])
    assert not grader_children() and grade_folders() == folders


@pytest.mark.gpu
@needs_gpu
@needs_cxx
@pytest.mark.parametrize("name, outcome", [("include_refused", COMPILE_ERROR), ("good_basic", GRADED)],
                         ids=["refused", "good_basic"])
def test_a_gpu_grade_takes_its_early_children_or_leaves_nothing_behind(config_file, name, outcome):
    """On a GPU: the GPU child and the emulator's driver started before the static check; a refused submission kills
    both unused, good_basic is graded by them in full. No child process, no folder of the grade is left."""
    config = load_config(config_file)
    cases = load_cases(config.testcases_dir)
    plan = RunPlan(GPU, sanitize=True)
    folders = grade_folders()
    early = start_early(config, cases, plan)
    pids = early.pids()
    assert len(pids) == 2 and all(alive(pid) for pid in pids)  # the GPU child and the CPU driver beside it
    result = grade(SUBMISSIONS / name, config, cases, plan, early)
    assert result.outcome == outcome, result.message
    if outcome == GRADED:
        assert result.score == result.max_score, [(c.name, c.message) for c in result.checks if not c.passed]
        assert result.phases.get("child_start", 0) > 0 and "sandbox" not in result.phases  # the early child ran it
        emulator = next(c for c in result.checks if c.kind == COMPILE).metrics["emulator_phases"]
        assert "cases" in emulator and "sandbox" not in emulator  # and the early driver the emulator's cases
    else:
        assert REFUSED_TO_READ in next(c for c in result.checks if c.kind == COMPILE).message
    wait_until_gone(pids)
    assert not grader_children() and grade_folders() == folders


def test_a_grade_starts_its_own_children_when_the_command_did_not(config_file, monkeypatch):
    """The class's workers and the service call grade() alone: it starts the children first, before the static
    check, and accounts for it as child_spawn."""
    started = []
    real_start = EarlyChildren.start
    monkeypatch.setattr(EarlyChildren, "start", lambda self, program, *rest: started.append(program.argv[-1]) or
                        real_start(self, program, *rest))
    config = load_config(config_file)
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:1]
    result = grade(SUBMISSIONS / "include_refused", config, cases, RunPlan(CPU))
    assert result.outcome == COMPILE_ERROR
    assert started == ["grader.execute.cpu"] and list(result.phases)[:2] == ["child_spawn", "static"]
    assert not grader_children()


def test_a_grade_that_runs_nothing_starts_nothing(config_file):
    """--no-run (no engine): no child, no folder, no early start told among the phases."""
    config = load_config(config_file)
    cases, plan = load_cases(config.testcases_dir), RunPlan(None, "not run: --no-run")
    folders = grade_folders()
    with start_early(config, cases, plan) as early:
        assert early.pids() == [] and grade_folders() == folders
    result = grade(SUBMISSIONS / "good_basic", config, cases, plan)
    assert "child_spawn" not in result.phases and not grader_children()


def test_a_sandboxed_child_reads_the_job_written_after_its_start_whatever_the_umask(sandbox):
    """The job is written once the child runs, as the sandbox's uid where the grader is root: not the file's owner,
    it must still read it under the tightest umask."""
    body = 'send_case(job["cases"][0]["name"])\nsend("done")\n'
    program = ChildProgram((sys.executable, "-c", CHILD_PRELUDE + body), sandbox)
    with EarlyChildren() as early:
        early.start(program, Placement(), [], "")  # in a folder of its own, which the uid may enter
        started = early.take(program, Placement())
        folder = started.workdir.parent
        before = os.umask(0o077)
        try:
            events = list(run_job(make_job(folder, ("one",)), Limits(startup_s=60, compile_s=60, run_s=60,
                                                                      max_restarts=0), lambda: 0, program,
                                  started=started))
        finally:
            os.umask(before)
    assert [event["event"] for event in events] == ["case", "done", "output"], events
