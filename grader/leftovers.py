"""Temporary folders named for the process that owns them, and clearing what dead owners left.

A grade's scratch folder holds the student's code and the run's outputs (up to tens of MB). A process killed
by `kill -9` cannot remove it, and nothing else knew whose it was. So each such folder is named for its
owner: `sgemm-grade-<pid namespace>.<pid>.<start time>-XXXXXXXX` (the start time, in clock ticks since boot,
tells a pid reused later from its first owner). `grade batch`, `grade serve` and `grade worker` clear, as
they start, every such folder under the temporary root whose owner is no longer running, and the folders of
the grader's other short-lived runs (made before folders carried an owner, or by code that still names them
by prefix alone) once they are a day old: no run lives that long. Only this user's own folders are touched,
never through a link; a folder whose owner is in another pid namespace is kept, as this process cannot
tell whether it runs. A run killed with kill -9 takes a moment to end (its workers die after it, with
PR_SET_PDEATHSIG): a batch started at once may find them still running, so a batch keeps sweeping while it
runs (`Sweeper`), and at its end waits a few seconds for owners that are ending to be gone.

Root graders also copy what the sandbox's uid must reach (execute/confine/reachable.py), one copy per grader
version, 100-200 MB each: `prune_copies` keeps the newest few of each kind and removes the rest once they
are a day old (a grader of another version may be starting a sandbox from one; a grader whose copy was
removed makes it again when it next needs it).
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

GRADE, TASK = "sgemm-grade-", "sgemm-task-"  # a grade's scratch folder (execute/child_run.py), a cluster task's
QUERY = "sgemm-query-"  # the temporary files of a compiler the grader asks (source/include_policy.py)
WORKER = "sgemm-worker-"  # `grade worker`'s: its Dask workers' local directory (their spill and lock files)
SCHEDULER = "sgemm-scheduler-"  # `grade scheduler`'s: Dask's scratch space, not /tmp/dask-scratch-space
PREPARE = "sgemm-prepare-"  # `grade prepare`'s and a grade's start's builds of what every grade shares (prepare.py)
# execute/confine/sandbox.py's scratch_folder: one sandboxed run's (a compile's, a probe's, ...), named for its owner
SCRATCH = tuple(f"sgemm-{kind}-" for kind in ("compile", "resources", "sanitize", "sanitize-group", "safety",
                                               "profile", "profile-ref", "sandbox-probe", "expand", "prepare"))
OWNED_BY = (GRADE, TASK, WORKER, SCHEDULER, QUERY, *SCRATCH)
# The same folders as graders before owners were named made them (the prefix and mkdtemp's 8 random
# characters): cleared by age alone.
UNOWNED = re.compile(r"^sgemm-(?:grade|task|compile|resources|sanitize|sanitize-group|safety|profile|profile-ref|"
                     r"sandbox-probe|expand)-[A-Za-z0-9_]{8}$")
UNOWNED_AGE_S = 24 * 3600
KEEP_COPIES = 3  # of each kind: the running grader's, and the ones before it a rollback would use
COPY_MIN_AGE_S = 24 * 3600  # a younger copy may be another grader's, about to start a sandbox from it


def owner(pid: int | None = None) -> str:
    """`<pid namespace>.<pid>.<start time>` of a process (this one by default); "" once it has ended."""
    pid = os.getpid() if pid is None else pid
    started = _start_time(pid)
    return f"{_pid_namespace()}.{pid}.{started}" if started is not None else ""


def owned_folder(prefix: str, root: Path | None = None) -> Path:
    """A new folder under `root` (the temporary root by default), named for this process (mode 0700, as
    mkdtemp makes it)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner()}-", dir=root))


@contextmanager
def owned_scratch(prefix: str) -> Iterator[Path]:
    """owned_folder(), removed when done."""
    folder = owned_folder(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_removing: list[threading.Thread] = []  # removed_soon()'s, until removals_done() has waited for them


def removed_soon(folder: str | Path) -> None:
    """The folder removed on a thread: a sandboxed run's leaves a few dozen folders, whose removal (40 ms on these
    machines) the grade's result assembly need not wait for. Not a daemon: the process ends once it is done (a
    process that ends with os._exit calls removals_done() first); killed meanwhile, it is a dead owner's folder."""
    thread = threading.Thread(target=shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True},
                              name="remove-scratch")
    _removing[:] = [*(pending for pending in _removing if pending.is_alive()), thread]  # a service's, not every one
    thread.start()


def removals_done() -> None:
    """Wait for every removed_soon() folder to be gone."""
    while _removing:
        try:
            thread = _removing.pop()
        except IndexError:  # another thread took the last meanwhile
            return
        thread.join()


def clear_dead(root: Path | None = None, prefixes: tuple[str, ...] = OWNED_BY,
               unowned: re.Pattern | None = UNOWNED) -> list[Path]:
    """Removes what dead owners left under `root` (the temporary root by default): the folders named for an
    owner with one of `prefixes`, and those `unowned` matches once a day old. The folders removed."""
    root = Path(root or tempfile.gettempdir())
    owned = _owned_pattern(prefixes)
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    removed = []
    for entry in entries:
        if _left_behind(entry, owned.match(entry.name), bool(unowned and unowned.match(entry.name))):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _owned_pattern(prefixes: tuple[str, ...]) -> re.Pattern:
    """A folder named for its owner: groups (pid namespace, pid, start time)."""
    return re.compile("^(?:" + "|".join(map(re.escape, prefixes)) + r")(\d+)\.(\d+)\.(\d+)-")


def _left_behind(entry: os.DirEntry, owned: re.Match | None, unowned: bool) -> bool:
    if not (owned or unowned):
        return False
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False  # only this user's own folders, and never through a link
    if owned:
        namespace, pid, started = owned.groups()
        return namespace == str(_pid_namespace()) and owner(int(pid)) != f"{namespace}.{pid}.{started}"
    return time.time() - info.st_mtime > UNOWNED_AGE_S


PF_EXITING = 0x4  # proc(5)'s flags: the process is in do_exit
SWEEP_EVERY_S = 1.0
SETTLE_S = 10.0  # at the end, how long to wait for owners that are ending (a killed run's workers) to be gone


class Sweeper:
    """clear_dead() now, then every `every_s` in a thread of its own, and once more when stopped, after waiting
    (at most `settle_s`) for the owners still holding folders that are ending: a run killed just before this
    one started leaves nothing, whenever its processes end. `removed` counts what was cleared after the start."""

    def __init__(self, root: Path | None = None, every_s: float = SWEEP_EVERY_S, settle_s: float = SETTLE_S):
        self.root, self.every_s, self.settle_s = root, every_s, settle_s
        self.removed: list[Path] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sweep_until_stopped, name="leftovers-sweeper", daemon=True)

    def start(self) -> list[Path]:
        """The first sweep (what the caller reports as it starts), then the sweeping thread."""
        first = clear_dead(self.root)
        self._thread.start()
        return first

    def stop(self) -> list[Path]:
        """The last sweep, once the owners that are ending have ended; what every sweep after the first removed."""
        self._stop.set()
        self._thread.join()
        deadline = time.monotonic() + self.settle_s
        while _ending_owners(self.root) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.removed += clear_dead(self.root)
        return self.removed

    def _sweep_until_stopped(self) -> None:
        while not self._stop.wait(self.every_s):
            self.removed += clear_dead(self.root)


def _ending_owners(root: Path | None) -> list[int]:
    """The pids owning folders under `root` (in this pid namespace) that are ending: exiting, sent SIGKILL, or
    whose parent is exiting or gone (a grader's workers die with it: execute/confine/proc.py's die_with_parent).
    A long-lived owner (a `grade worker`, a service's worker) is none of these: nobody waits for it."""
    owned = _owned_pattern(OWNED_BY)
    try:
        names = os.listdir(root or tempfile.gettempdir())
    except OSError:
        return []
    here = str(_pid_namespace())
    pids = {int(found[2]) for found in map(owned.match, names) if found and found[1] == here}
    return sorted(pid for pid in pids if _ending(pid))


def _ending(pid: int) -> bool:
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False  # ended already: clear_dead takes its folder
    parent = _stat_fields(int(fields[1]))
    return _exiting(fields) or _kill_pending(pid) or parent is None or _exiting(parent)


def _exiting(fields: list[str]) -> bool:
    return bool(int(fields[6]) & PF_EXITING)


def _kill_pending(pid: int) -> bool:
    """SIGKILL sent and not yet acted on (a worker whose batch died: its parent-death signal)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            masks = [line.split()[1] for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError):
        return False
    return any(int(mask, 16) & (1 << (9 - 1)) for mask in masks)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (state, ppid, ..., flags at [6], starttime at [19])."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()  # the command may hold spaces and ")"
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> int | None:
    """When a running process started; None once it has ended (a zombie has ended: only its exit status is
    left for its parent to collect)."""
    fields = _stat_fields(pid)
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[19])  # starttime: proc(5)'s 22nd


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


# --- the sandbox's copies of the grader ----------------------------------------------------------------------


@dataclass
class Pruned:
    removed: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


COPY = re.compile(r"^(?P<kind>[a-z]+)-[0-9a-f]{32}$")  # execute/confine/reachable.py's `<kind>-<key>`


def prune_copies(keep: int = KEEP_COPIES) -> Pruned:
    """Of each kind of the sandbox's reachable copies (grader, env, python, bwrap), the newest `keep` kept
    and the rest removed. Only a root grader makes copies, and only it may remove them; elsewhere, or where
    the folder of copies cannot be trusted, nothing is done."""
    if os.geteuid() != 0:
        return Pruned()
    from .execute.confine.reachable import CopyUnsafe, copies_root

    try:
        root = copies_root()
    except CopyUnsafe:
        return Pruned()
    by_kind: dict[str, list[os.DirEntry]] = {}
    for entry in os.scandir(root):
        found = COPY.match(entry.name)
        if found and entry.is_dir(follow_symlinks=False):
            by_kind.setdefault(found["kind"], []).append(entry)
    pruned = Pruned()
    now = time.time()
    for copies in by_kind.values():
        made = {entry.path: entry.stat(follow_symlinks=False).st_mtime for entry in copies}
        copies.sort(key=lambda entry: made[entry.path], reverse=True)
        for index, entry in enumerate(copies):
            if index < keep or now - made[entry.path] < COPY_MIN_AGE_S:
                pruned.kept.append(Path(entry.path))
            else:
                shutil.rmtree(entry.path, ignore_errors=True)
                pruned.removed.append(Path(entry.path))
    return pruned


def clear_at_start(dead: list[Path] | None = None) -> list[str]:
    """What `grade batch`, `grade serve` and `grade worker` clear as they start, in lines that say so (`dead`:
    what a Sweeper's first sweep removed, where one was started)."""
    lines = []
    dead = clear_dead() if dead is None else dead
    if dead:
        lines.append(f"removed {len(dead)} temporary folders that graders which ended without cleaning up (kill -9) "
                     f"left in {tempfile.gettempdir()}")
    pruned = prune_copies()
    if pruned.removed:
        lines.append(f"removed {len(pruned.removed)} sandbox copies of other grader versions "
                     f"({', '.join(path.name for path in pruned.removed)}); kept the newest {KEEP_COPIES} of each "
                     f"kind ({', '.join(path.name for path in pruned.kept)})")
    return lines
