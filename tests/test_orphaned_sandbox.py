"""A grader process killed in the moment it starts a sandbox leaves nothing running.

bubblewrap's --die-with-parent sets the kernel's parent-death signal only once bwrap has set itself up, and
never asks whether its parent is still there; the uid drop before it clears any signal set earlier. A
grader killed before then (kill -9 of `grade serve` or of a batch takes its workers and their drivers at
once) left the run going: the emulation of a hung kernel until its CPU limit, or nvcc. A run now checks its
lifeline before its command starts, or at uid-only starts under a guard (execute/confine/parent_death.py).
"""
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT, SUBMISSIONS, live_children
from hardware import needs_cxx

from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu.build import build
from grader.execute.job import Job

# The spawner: a CPU driver that dies the moment the sandbox of a kernel that never finishes starting is
# started. The kernel's static initializer spins, so the harness never reads the end of its commands either.
SPAWNER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from grader.execute.cpu import harness_driver
    from grader.execute.job import Job
    from grader.execute.confine.sandbox import detect

    class DyingSandbox(type(detect())):
        def popen(self, *args, **kwargs):
            super().popen(*args, **kwargs)
            os._exit(0)  # as a driver killed by its parent's death would, before bwrap set its own signal

    job = Job.load(Path(sys.argv[1]))
    sandbox = detect()
    harness_driver.profile_alone(Path(sys.argv[2]), Path(job.workdir), DyingSandbox(**vars(sandbox)), job.contract)
""")
STUCK_INITIALIZER = """
#ifndef __NVCC__
static volatile int forever = 1;
static int stuck = [] { while (forever) {} return 0; }();
#endif
"""



@needs_cxx
def test_a_driver_killed_as_it_starts_the_harness_leaves_no_emulation_running(tmp_path):
    config = load_config(ROOT / "config.yaml")
    with scratch_folder("sgemm-orphan-test-") as root:  # where the sandbox's uid can reach
        _start_and_die(root, config.kernel.contract(), tmp_path)


def _start_and_die(root, contract, tmp_path):
    work, cache = root / "work", root / "cache"
    work.mkdir()
    cache.mkdir()
    work.chmod(0o755)
    job = Job("", "", contract, [], str(cache), str(work))
    source = (SUBMISSIONS / "hang" / "kernel.cu").read_text() + STUCK_INITIALIZER
    built = build(source, contract, job.tile, cache, work, detect(), 120)
    assert built.binary is not None, built.message
    job.save(tmp_path / "job.json")
    before = set(live_children())
    for attempt in range(3):
        with open(tmp_path / "spawner.log", "w+") as log:  # a file: a pipe would stay open in what is left
            spawner = subprocess.run([sys.executable, "-c", SPAWNER, str(tmp_path / "job.json"), str(built.binary)],
                                     cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=60)
        assert spawner.returncode == 0, (tmp_path / "spawner.log").read_text()
        _assert_nothing_left(before, f"attempt {attempt + 1}")


def _assert_nothing_left(before: set[str], attempt: str) -> None:
    deadline = time.monotonic() + 3.0
    while (left := set(live_children()) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
        while True:  # the orphans come to pytest (a subreaper): reap those that ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    for line in left:  # leave nothing behind for the rest of the suite, whatever the verdict
        os.kill(int(line.split(":")[0]), 9)
    assert not left, f"{attempt}: still running after the process that started it died: {left}"


# The spawner: any process that starts a sandboxed run and dies at once, before bwrap could set its signal.
BARE_SPAWNER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from grader.execute.confine.sandbox import UID_ONLY, Confinement, ResourceLimits, Sandbox, detect

    sandbox = Sandbox(UID_ONLY, drop_uid=True) if sys.argv[2] == "uid-only" else detect()
    sandbox.popen(["/bin/sleep", "30"], Confinement(Path(sys.argv[1]), ResourceLimits(cpu_s=30, processes=64)))
    os._exit(0)
""")

LEVELS = ["strongest", pytest.param("uid-only", marks=pytest.mark.skipif(
    os.geteuid() != 0, reason="hardware: only a root grader drops to another uid"))]


@pytest.mark.parametrize("level", LEVELS)
def test_a_grader_killed_as_it_starts_any_sandboxed_run_leaves_nothing_running(tmp_path, level):
    """No help from the program inside (a plain sleep): the guard alone ends it, ten times of ten."""
    with scratch_folder("sgemm-orphan-test-") as root:
        before = set(live_children())
        for attempt in range(10):
            workdir = root / f"run{attempt}"
            with open(tmp_path / "spawner.log", "w+") as log:  # a file: a pipe would stay open in what is left
                spawner = subprocess.run([sys.executable, "-c", BARE_SPAWNER, str(workdir), level], cwd=ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, timeout=60)
            assert spawner.returncode == 0, (tmp_path / "spawner.log").read_text()
            _assert_nothing_left(before, f"attempt {attempt + 1}")
