"""The CPU emulator's harness runs at the background niceness, its cases' turn included.

In a batch the emulation is most of the CPU; the processes a GPU turn waits on (the GPU child holding it, the
parents reading events and handing turns out) must come first. The emulator's cases take a turn on the CPU's lock
that every emulation shares: it keeps nobody waiting, so it raises nothing. Raised (TURN_NICE) as a GPU turn is,
every emulation of a class ran ahead of the GPU children, their compilers and the parents. Real processes: the
hang kernel's harness is watched from /proc while its case spins.
"""
import os
import threading
import time
from pathlib import Path

from conftest import SUBMISSIONS
from hardware import needs_cxx

from grader.cases import Case
from grader.config import load_config
from grader.execute.child_run import run_child
from grader.execute.confine.proc import BACKGROUND_NICE
from grader.intake.submission import read_submission
from grader.plan import CPU, RunPlan

pytestmark = needs_cxx


def harness_niceness(root: int) -> dict[int, int]:
    """The niceness of each process named `harness` below `root`, as /proc shows them now."""
    parents, stats = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)], stats[int(entry.name)] = int(fields[1]), (name, int(fields[16]))

    def below(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == root:
                return True
        return False

    return {pid: nice for pid, (name, nice) in stats.items() if name == "harness" and below(pid)}


def test_the_harness_runs_at_the_background_niceness_while_its_case_runs(config_file):
    config = load_config(config_file)
    ran = threading.Thread(target=run_child, args=(read_submission(SUBMISSIONS / "hang"), config,
                                                   [Case("square_16", 16, 16, 16, 1, 10)], CPU, RunPlan(CPU)))
    ran.start()
    seen: dict[int, int] = {}
    while ran.is_alive():
        seen.update(harness_niceness(os.getpid()))
        time.sleep(0.05)
    ran.join()
    assert seen, "no harness was seen running"
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert set(seen.values()) == {min(own + BACKGROUND_NICE, 19)}, seen
