"""A batch's workers are forked from one template process (grader/classroom/zygote.py) that imported what a
grade needs: what it must keep from the batch of started workers it replaced. Each student graded as alone
is test_batch.py's; a forked worker killed mid-grade costing one row is test_escapes.py's."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT
from test_escapes import GOOD, hostile, stored, write

from grader.cases import load_cases
from grader.classroom.workers import Template
from grader.classroom.zygote import TEMPLATE_NAME, WORKER_NAME
from grader.config import load_config
from grader.execute.confine.proc import process_tree
from grader.plan import CPU, RunPlan
from grader.result import FAILED, GRADED, SubmissionResult

SLOW = hostile("sleep(6);")  # a kernel that holds its worker till each case times out, at no CPU cost


def start_batch(klass: Path, out: Path, config_file) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grader", "batch", str(klass), "-o", str(out), "--config",
                             str(config_file), "--backend", "cpu", "--jobs", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def named(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().strip()
    except OSError:
        return b""


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def parent_or_none(pid: int) -> int:
    """The parent's pid, or 0 where the process is gone."""
    try:
        return parent_of(pid)
    except (OSError, ValueError):
        return 0


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for_workers(batch: int, count: int, deadline: float) -> list[int]:
    """The batch's forked workers, once `count` of them grade at once."""
    while time.monotonic() < deadline:
        # A worker's own fork, before it execs (a child it starts: the GPU child, a compiler), still bears the
        # worker's name: its parent is a worker, never the template
        workers = [pid for pid in process_tree(batch)[1:]
                   if named(pid) == WORKER_NAME and named(parent_or_none(pid)) != WORKER_NAME]
        if len(workers) >= count:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} forked workers under the batch")


def test_the_template_imports_what_a_grade_needs_but_not_pycuda():
    """pycuda and CUDA live in the GPU child alone: a CUDA context in the template would be in every fork."""
    check = ("import sys; from grader.classroom.zygote import preload; preload(); "
             "assert {'grader.pipeline', 'grader.on_gpu', 'grader.run_events', 'numpy'} <= set(sys.modules); "
             "assert not [m for m in sys.modules if m.startswith('pycuda')], 'pycuda imported'")
    finished = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr


def test_workers_are_forked_from_one_template_and_a_kill_9_of_the_batch_takes_them_all(tmp_path, config_file):
    klass = tmp_path / "class"
    write(klass / "slow_a", SLOW)
    write(klass / "slow_b", SLOW)
    running = start_batch(klass, tmp_path / "out", config_file)
    try:
        workers = wait_for_workers(running.pid, 2, time.monotonic() + 120)
        templates = {parent_of(pid) for pid in workers}
        assert len(templates) == 1  # one template for the batch, forking every worker
        template = templates.pop()
        assert named(template) == TEMPLATE_NAME and parent_of(template) == running.pid
    finally:
        running.send_signal(signal.SIGKILL)
        running.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in [template, *workers]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in [template, *workers] if alive(pid)]  # die_with_parent, set again after the fork


def test_a_template_killed_mid_batch_loses_no_student(tmp_path, config_file):
    klass, out = tmp_path / "class", tmp_path / "out"
    write(klass / "slow_a", SLOW)
    write(klass / "slow_b", SLOW)
    write(klass / "carol", GOOD)
    running = start_batch(klass, out, config_file)
    workers = wait_for_workers(running.pid, 1, time.monotonic() + 120)
    os.kill(parent_of(workers[0]), signal.SIGKILL)  # the template, and with it the workers it forked
    _, errors = running.communicate(timeout=300)
    assert running.returncode == 0, errors
    graded = {name: stored(out, name) for name in ("slow_a", "slow_b", "carol")}
    assert {name: result["outcome"] for name, result in graded.items()} == dict.fromkeys(graded, "graded")
    assert graded["carol"]["score"] == 100  # graded afresh where its worker died with the template
    verdicts = {name: [(c["name"], c["status"], c["score"]) for c in graded[name]["checks"]] for name in graded}
    assert verdicts["slow_a"] == verdicts["slow_b"]


def test_a_forked_worker_that_crashes_or_is_killed_ends_alone_and_the_template_forks_the_next():
    template = Template()
    try:
        crashing = template.fork(None)
        _, errors = crashing.communicate(b"not a task")
        assert crashing.ended() and crashing.returncode == 1 and b"UnpicklingError" in errors
        killed = template.fork(None)
        killed.kill()
        killed.communicate(b"")
        assert killed.ended() and killed.returncode == -signal.SIGKILL
        for worker in (crashing, killed):
            worker.close()
        assert template.process.poll() is None  # the template goes on forking
        after = template.fork(None)
        _, errors = after.communicate(b"not a task either")
        assert after.ended() and after.returncode == 1
        after.close()
    finally:
        template.stop()


def graded_by_a_fork(template: Template, student: Path, config, cases, truths: Path) -> SubmissionResult:
    """One student graded by a worker the template forks, the truths in the cache deleted once it is forked."""
    forked = template.fork(None)
    assert forked is not None
    shutil.rmtree(truths, ignore_errors=True)
    try:
        output, errors = forked.communicate(pickle.dumps((student, config, cases, RunPlan(CPU))))
        assert forked.ended() and forked.returncode == 0, errors.decode()
    finally:
        forked.close()
    return SubmissionResult.from_dict(json.loads(output))


def test_a_warmed_template_loads_the_truths_once_for_every_worker(tmp_path, quick_config_file):
    """What each student's grade loaded for itself (the float64 truths, above all) the template loads once, when
    the batch tells it the config and cases: its forks grade from what it holds. The truths deleted from the
    cache after the warm are not made again by the worker; an unwarmed template's worker makes them itself."""
    config_path = tmp_path / "config.yaml"
    config_path.write_text(quick_config_file.read_text().replace("cache_dir: ~/.cache/sgemm-grader",
                                                                 f"cache_dir: {tmp_path / 'cache'}"))
    config = load_config(config_path)
    cases = load_cases(config.testcases_dir)
    truths = config.cache_dir / "truths"
    student = tmp_path / "student"
    write(student, GOOD)
    warmed, cold = Template(), Template()
    try:
        warmed.warm(config, cases, on_gpu=False)
        result = graded_by_a_fork(warmed, student, config, cases, truths)
        assert result.outcome == GRADED and not [c.name for c in result.checks if c.status == FAILED]
        assert not list(truths.glob("*.npz")), "the worker computed truths the template held"
        alone = graded_by_a_fork(cold, student, config, cases, truths)
        assert alone.score == result.score and alone.score > 0
        assert list(truths.glob("*.npz")), "an unwarmed template's worker makes its truths itself"
    finally:
        warmed.stop()
        cold.stop()


def test_a_warm_request_the_template_cannot_read_leaves_it_forking():
    """A request cut short (past the control message's size) or otherwise unreadable costs each worker its own
    loads, never the template: it still forks the next student's worker."""
    template = Template()
    try:
        template.control.send(b"warm" + b"\x80\x04\x95 cut short")
        forked = template.fork(None)
        assert forked is not None and parent_of(forked.pid) == template.process.pid
        named_by = time.monotonic() + 10
        while named(forked.pid) != WORKER_NAME and time.monotonic() < named_by:
            time.sleep(0.02)  # it names itself once forked
        assert named(forked.pid) == WORKER_NAME
        forked.kill()
        assert forked.ended()
        forked.close()
    finally:
        template.stop()


# In a process of its own: the template's preload and warm, then a worker forked from it grades a student and says
# which of what a grade asks once per process it asked again (exit code 0: none).
ASKED_AGAIN = """
import fnmatch, os, pickle, sys
from pathlib import Path
from grader.cases import load_cases
from grader.classroom import zygote
from grader.config import load_config
from grader.execute.cpu.build import compiler_version
from grader.pipeline import grade
from grader.plan import CPU, RunPlan
from grader.result import GRADED
from grader.source.include_policy import compiler_folders, toolkit_folders

config = load_config(Path(sys.argv[1]))
cases = load_cases(config.testcases_dir)
zygote.preload()
zygote.warm(pickle.dumps((config, cases, False)))
asked = {"the compilers' include folders": compiler_folders, "nvcc's include folders": toolkit_folders,
         "the C++ compiler's version": compiler_version, "a toolkit header's pattern": fnmatch._compile_pattern}
before = {what: cached.cache_info().misses for what, cached in asked.items()}
pid = os.fork()
if pid == 0:
    result = grade(Path(sys.argv[2]), config, cases, RunPlan(CPU))
    again = [what for what, cached in asked.items() if cached.cache_info().misses != before[what]]
    print(result.outcome, again, flush=True)
    os._exit(0 if result.outcome == GRADED and not again else 1)
os._exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_warmed_templates_worker_asks_nothing_the_template_asked(tmp_path, quick_config_file):
    """What a grade asks once per process (the compilers' include folders: a `g++ -E -v` each; the C++ compiler's
    version, the emulation's build key; the toolkit headers' patterns, against which every #include is tried) the
    warmed template asks, once per batch: a worker forked from it asks none of it again."""
    student = tmp_path / "student"
    write(student, GOOD.replace("#include", "#include <stdio.h>\n#include", 1))  # a header of no toolkit pattern
    finished = subprocess.run([sys.executable, "-c", ASKED_AGAIN, str(quick_config_file), str(student)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr[-3000:]
