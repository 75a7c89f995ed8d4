"""What a grader killed mid-run leaves in the temporary root, and the sandbox's copies of other grader
versions: real folders, real processes that end or keep running, real modes and owners (grader/leftovers.py).
The commands that clear them as they start (`grade batch`, `grade serve`, `grade worker`) are tested killed
and started again in test_batch.py, test_serve.py and test_cluster_tls.py."""
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT, SHM, orphaned_semaphores, semaphores_left

from grader.leftovers import GRADE, TASK, Pruned, Sweeper, clear_dead, owner, prune_copies

DAY_S = 24 * 3600


def folder_made_by_a_process(root, prefix: str, *, keep_running: bool) -> tuple[str, subprocess.Popen]:
    """A folder named for a process of its own, which then ends or keeps running: (its name, the process)."""
    code = ("import sys, time; from grader.leftovers import owned_folder; print(owned_folder(sys.argv[1]).name, "
            "flush=True); time.sleep(600 if sys.argv[2] == 'run' else 0)")
    process = subprocess.Popen([sys.executable, "-c", code, prefix, "run" if keep_running else "end"], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(root)})
    name = process.stdout.readline().strip()
    if not keep_running:
        process.wait(timeout=30)
    return name, process


def test_only_what_dead_owners_left_is_removed(temp_root):
    dead, _ = folder_made_by_a_process(temp_root, GRADE, keep_running=False)
    task, _ = folder_made_by_a_process(temp_root, TASK, keep_running=False)
    live, running = folder_made_by_a_process(temp_root, GRADE, keep_running=True)
    try:
        old, recent = temp_root / "sgemm-compile-abcd1234", temp_root / "sgemm-compile-efgh5678"  # no owner named
        for folder in (old, recent):
            folder.mkdir()
        os.utime(old, (time.time() - 2 * DAY_S,) * 2)
        elsewhere = temp_root / f"sgemm-grade-1.{os.getpid()}.1-abcdefgh"  # another pid namespace: cannot tell
        elsewhere.mkdir()
        others = temp_root / f"sgemm-grade-{owner().split('.')[0]}.1.1-abcdefgh"  # dead owner, but not ours
        others.mkdir()
        os.chown(others, 65534, 65534)
        target, link = temp_root / "kept", temp_root / f"sgemm-grade-{owner().split('.')[0]}.2.2-linklink"
        target.mkdir()
        link.symlink_to(target)  # never through a link
        removed = clear_dead(temp_root)
        assert sorted(path.name for path in removed) == sorted([dead, task, old.name])
        assert sorted(p.name for p in temp_root.iterdir()) == sorted(
            [live, recent.name, elsewhere.name, others.name, target.name, link.name])
    finally:
        running.kill()
        running.wait()
    assert [path.name for path in clear_dead(temp_root)] == [live]  # its owner has ended now


def test_a_sweeper_clears_a_folder_whose_owner_ends_after_it_started(temp_root):
    """A run killed just before this one started: its owner still runs at the first sweep, and ends later."""
    live, running = folder_made_by_a_process(temp_root, GRADE, keep_running=True)
    sweeper = Sweeper(temp_root, every_s=0.1)
    try:
        assert sweeper.start() == [] and (temp_root / live).is_dir()
    finally:
        running.kill()
        running.wait()
    deadline = time.monotonic() + 10
    while (temp_root / live).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    cleared_while_running = not (temp_root / live).exists()
    assert [path.name for path in sweeper.stop()] == [live]
    assert cleared_while_running


def test_a_pid_used_again_is_another_owner():
    """The start time in the name tells the folder's first owner from a later process given the same pid."""
    namespace, pid, started = owner().split(".")
    assert owner(int(pid)) == f"{namespace}.{pid}.{started}"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert owner(int(ended.stdout)) == ""


def test_the_sandbox_copies_of_other_versions_are_pruned_to_the_newest_few(temp_root, monkeypatch):
    """As root (only a root grader makes copies): of each kind, the newest three and any made in the last day
    are kept; older ones go. A grader that is not root makes none and removes none."""
    from grader.execute.confine import reachable

    if os.geteuid() != 0:
        assert prune_copies() == Pruned()
        return
    copies = temp_root / "copies"
    copies.mkdir(mode=0o755)
    monkeypatch.setenv(reachable.COPIES_VARIABLE, str(copies))
    reachable.copies_root.cache_clear()  # the folder of copies is found once per process
    ages = {f"grader-{index:032x}": age for index, age in enumerate((0.1, 0.2, 3, 4, 5))}
    ages[f"env-{9:032x}"] = 9
    for name, days in ages.items():
        (copies / name / "lib").mkdir(parents=True)
        os.utime(copies / name, (time.time() - days * DAY_S,) * 2)
    building = copies / ".grader-xyz"  # a copy being made: not a copy yet
    building.mkdir()
    try:
        pruned = prune_copies()
    finally:
        reachable.copies_root.cache_clear()
    assert sorted(path.name for path in pruned.removed) == [f"grader-{3:032x}", f"grader-{4:032x}"]
    assert sorted(p.name for p in copies.iterdir()) == sorted([".grader-xyz", f"env-{9:032x}",
                                                               *(f"grader-{i:032x}" for i in range(3))])


def test_the_suite_finds_and_removes_a_semaphore_its_processes_left():
    """A process using a multiprocessing lock killed with its resource tracker (what a SIGKILL of a whole
    process group does): its named semaphore stays in /dev/shm, mapped by nobody. The suite's end finds it,
    removes it and fails; one still in use is left alone."""
    code = ("import multiprocessing, sys; lock = multiprocessing.get_context('spawn').Lock(); "
            "print(lock._semlock.name, flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    path = SHM / f"sem.{holder.stdout.readline().strip().lstrip('/')}"
    try:
        assert path.exists() and path not in orphaned_semaphores()  # in use: mapped by its holder
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the holder and its tracker: nothing unlinks it now
        holder.wait()
    assert path.exists() and path in orphaned_semaphores()
    assert f"{path} (a named semaphore no process uses; removed)" in semaphores_left(grace_s=0)
    assert not path.exists()
