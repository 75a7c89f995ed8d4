"""Child processes that can be killed whole: each starts its own process group."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
IN_PID_NAMESPACE = "GRADER_IN_PID_NAMESPACE"  # set by the sandbox for what runs under bwrap
OUTPUT_CAP = 64 * 1024
# The niceness of work that holds no turn on a device (compilers, sanitizer tools; sandbox.Confinement):
# the GPU's holder then wins the CPUs, and a batch's GPU is never idle while its holder waits for a core.
BACKGROUND_NICE = 10
# The niceness of a child while it holds a turn on a device, where the grader may raise priorities (root):
# every other child waits for that turn, so the holder's CPU time is everyone's. Strong, because with
# autogroups it weighs the holder's whole session against each other session on its core.
TURN_NICE = -15


def set_tree_priority(root: int | ProcessTree, nice: int, session_nice: int | None = None) -> None:
    """Every thread of a process and of its descendants (listed now, or as a ProcessTree last listed them) at
    `nice`, and their session at `session_nice` (default `nice`); quietly nothing where that is not allowed."""
    tree = root if isinstance(root, ProcessTree) else ProcessTree(root)
    for process in tree.members():
        for thread in listdir(f"/proc/{process}/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(thread), nice)
            except (OSError, ValueError):
                pass
    set_session_priority(tree.root, nice if session_nice is None else session_nice)


def set_session_priority(pid: int, nice: int) -> None:
    """The CPU weight of pid's whole session, where the kernel groups tasks by session (sched_autogroup):
    it then shares a core between sessions before any thread's niceness counts, and every sandbox runs in
    a session of its own. Quietly nothing without autogroups, or where not allowed."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:
        pass


def own_priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def process_tree(root: int) -> list[int]:
    """root and every process below it, from one listing of /proc."""
    children: dict[int, list[int]] = {}
    for entry in listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat_file:
                stat = stat_file.read()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])  # the command may hold spaces and ")"
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, ()))
    return tree


class ProcessTree:
    """A process and its descendants, listed from /proc again only when the last listing is older than
    `refresh_s`: a child's priority changes twice a case (its turns), and one listing reads every process's
    stat file, milliseconds on a busy host. A process started since the listing took its parent's priority
    when it was forked."""

    def __init__(self, root: int, refresh_s: float = 1.0):
        self.root, self.refresh_s = root, refresh_s
        self._listed: list[int] = []
        self._listed_at = -float("inf")

    def members(self) -> list[int]:
        if time.monotonic() - self._listed_at > self.refresh_s:
            self._listed, self._listed_at = process_tree(self.root), time.monotonic()
        return self._listed


def listdir(path) -> list[str]:
    """A folder's names; none when it is gone (a process that ended)."""
    try:
        return os.listdir(path)
    except OSError:
        return []


TRUNCATION_MARKER = "\n[... output truncated by the grader ...]\n"


@dataclass
class Finished:
    returncode: int | None  # None when killed on timeout
    output: str
    timed_out: bool


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_killable(cmd: list[str], timeout: float, cwd: str | None = None, env: dict | None = None,
                 start=None) -> Finished:
    """Run cmd with stdout+stderr merged; on timeout kill its whole process group (nvcc forks cicc, ptxas).
    `start(cmd, **popen_options)` starts it instead of Popen (a sandbox's popen)."""
    options = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if start is None:
        proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True, **options)
    else:
        proc = start(cmd, **options)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return Finished(None, "", True)
    return Finished(proc.returncode, cap(out.decode("utf-8", "replace")), False)


def cap(text: str, limit: int = OUTPUT_CAP) -> str:
    return text if len(text) <= limit else text[:limit] + TRUNCATION_MARKER


def name_this_process(name: bytes) -> None:
    """Linux: the name ps and /proc/PID/comm show for this process (at most 15 bytes); elsewhere nothing."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name))
    except (OSError, AttributeError):
        pass  # not Linux: only the name in ps differs


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when the grader that started it dies, even by kill -9,
    so no orphaned child keeps a GPU busy with a hung kernel."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # not Linux: the parent's timeouts and Ctrl-C handling still apply
    # Orphaned already, before the request took effect? (In a bwrap sandbox pid 1 is bwrap itself, our
    # rightful parent, which dies with the grader on its own: --die-with-parent.)
    if os.getppid() == 1 and os.environ.get(IN_PID_NAMESPACE) != "1":
        os._exit(1)
