"""Entry points whose imports run with the garbage collector paused: the `grade` command and the CPU driver.

Importing numpy and the grader makes tens of thousands of objects and no garbage, yet sets off collections that
walk all of them: about a tenth of a process's start (this 2-core machine, five runs each: `import grader.cli`
0.19 against 0.17 CPU-s, the CPU driver's imports 0.116 against 0.098). Every grade starts both. What the imports
made is then frozen (gc.freeze), so that later collections skip it too.
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from . import blas_threads  # noqa: F401 - before numpy loads in the grade process (blas_threads.py says why)


@contextmanager
def paused_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def grade() -> int:
    """The `grade` command (console script and `python -m grader`)."""
    with paused_collection():
        from .cli import closed_stdout, main
    try:
        code = main()
    except BrokenPipeError:  # stdout's reader left (`… | head`) while a command that cannot go on printed
        closed_stdout()
        print("grade: stopped: stdout was closed before the command finished; run it again without the pipe",
              file=sys.stderr)
        return 1
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left before the last line (`grade sub/ | head`): the grade stands
        closed_stdout()
    if sys.argv[1:2] not in LONG_LIVED and sys.getprofile() is None and sys.gettrace() is None:
        ended_now(code)  # a profiler or a debugger (`python -m cProfile -m grader`) reports after the command
    return code


# Commands that start workers, services or pools of their own: they end the interpreter's own way.
LONG_LIVED = [["batch"], ["serve"], ["worker"], ["scheduler"]]


def ended_now(code: int) -> NoReturn:
    """The end of a command that grades (and writes) a submission or a few: what the interpreter's own end does
    but tear down every module and object, which writes nothing and took 20-40 ms after a grade (numpy's, the
    grader's, rich's). The threads that are no daemons are waited for and the atexit functions run, as at any
    end; the files a grade writes are closed by then (write_outputs), and stdout and stderr are flushed here."""
    current = threading.current_thread()
    try:
        while pending := [t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()]:
            for thread in pending:
                thread.join()
    except KeyboardInterrupt:
        # A Ctrl-C while a thread finishes (a build): end now, as 130, not with a traceback (the interpreter's own
        # end said "Exception ignored" and ended too)
        code = 130
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, or a stream closed: nothing more can reach it
            pass
    os._exit(code)


def cpu_driver() -> int:
    """`python -m grader.execute.cpu JOB_FILE EVENT_FD CONTROL_FD` (execute/cpu/harness_driver.py)."""
    with paused_collection():
        from .execute.cpu.harness_driver import main
    return main(sys.argv)
