"""A sandboxed run ends with the grader process that started it, however early that process dies.

bubblewrap's --die-with-parent asks the kernel for a parent-death signal only once bwrap has set itself up,
and never checks whether its parent is already gone; dropping to the sandbox's uid (setpriv) clears any
such signal set before. A grader killed in that window (kill -9 of `grade serve` or of a batch) left the
run going until its CPU limit: nvcc on a student's file, or a run at uid-only, which had no signal at all.
So every run starts under a guard: the signal is set first, then the guard checks that the grader is still
its parent (one that died before that has handed it to another process), and the uid drop keeps it.
"""
from __future__ import annotations

import functools
import shutil
import subprocess

# Run by /bin/sh with the grader's pid as $0: $PPID is the parent it found when it started, after the signal.
STILL_THE_PARENT = 'test "$PPID" = "$0" && exec "$@"'


def guard(grader_pid: int) -> list[str]:
    """The command's first words: SIGKILL when the thread that started it ends, then the parent check. []
    where setpriv cannot set the signal (util-linux before 2.33); bwrap's own then stands alone."""
    setpriv = _setpriv_setting_the_signal()
    if setpriv is None:
        return []
    return [setpriv, "--pdeathsig", "SIGKILL", "--", "/bin/sh", "-c", STILL_THE_PARENT, str(grader_pid)]


def kept_through_the_uid_drop() -> list[str]:
    """setpriv's options that set the signal again once the uid has changed."""
    return ["--pdeathsig", "keep"] if _setpriv_setting_the_signal() else []


@functools.cache
def _setpriv_setting_the_signal() -> str | None:
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in usage else None
