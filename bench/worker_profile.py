"""Where a batch worker's own CPU goes, exactly: a CPU batch's template (zygote.preload and zygote.warm, as the batch
asks) made in this process, then a worker forked from it per student, one at a time, which runs the batch
worker's own code (grade_the_task_on_stdin: the task unpickled, the grade, the result as JSON) and reports its
process's CPU-s (user + system of its own threads, not its children's: the CPU driver, g++ and the harness are
theirs) from os.times. Issue 50's target: <= 0.3 s per student.

Usage: python3 bench/worker_profile.py [COUNT] [--profile=FILE] [--results=DIR]
--profile=FILE: each worker's main thread under cProfile (its CPU time, not its waits), the stats of all merged into FILE (pstats; it inflates the
CPU figures, so read its shares, not its seconds). --results=DIR: each worker's result JSON there, to compare two
checkouts' verdicts and words (copy this script into the other checkout's bench/ and run it there).
"""
from __future__ import annotations

import cProfile
import gc
import os
import pickle
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchlib import config_with_cache, generate

from grader.execute.confine.sandbox import ONE_BLAS_THREAD

if any(os.environ.get(name) != value for name, value in ONE_BLAS_THREAD.items()):  # as the batch starts its template
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ONE_BLAS_THREAD})

from grader.cases import load_cases, whole_truths  # noqa: E402 - after the environment is the batch's
from grader.classroom import zygote  # noqa: E402
from grader.classroom.workers import emulator_share  # noqa: E402
from grader.config import load_config  # noqa: E402
from grader.pipeline import CPU, CPU_NOTE, RunPlan, sandbox_of  # noqa: E402
from grader.plan import device_lock  # noqa: E402
from grader.prepare import prepare  # noqa: E402
from grader.provenance import class_provenance  # noqa: E402
from grader.execute.runner import Placement  # noqa: E402


def _option(name: str) -> str | None:
    return next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith(f"--{name}=")), None)


def worker(task: Path, cpu_file: Path, profile: Path | None, result: Path | None) -> None:
    """In the forked worker: the batch worker's code on its task, its CPU-s written to cpu_file. Never returns."""
    code = 1
    try:
        os.dup2(os.open(task, os.O_RDONLY), 0)
        os.dup2(os.open(result or os.devnull, os.O_WRONLY | os.O_CREAT, 0o644), 1)
        before, main_before = os.times(), time.thread_time()
        profiler = cProfile.Profile(time.thread_time) if profile else None  # CPU, not waits
        if profiler:
            profiler.enable()
        zygote.grade_the_task_on_stdin()
        sys.stdout.flush()
        if profiler:
            profiler.disable()
        after, main_thread = os.times(), time.thread_time() - main_before
        cpu_file.write_text(f"{after.user - before.user + after.system - before.system:.4f} {main_thread:.4f}")
        if profiler:
            profiler.dump_stats(str(profile))
        code = 0
    finally:
        os._exit(code)


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 12
    profile, results = _option("profile"), _option("results")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        students = generate(work / "class", count)
        config = load_config(config_with_cache(work / "cache", work))
        cases = load_cases(config.testcases_dir, config.kernel.square)
        plan = RunPlan(CPU, note=CPU_NOTE)  # `--backend cpu`, as cli's run_plan makes it
        prepare(config, whole_truths(cases, False), sandbox_of(plan), False, inputs=cases)  # the batch's, before
        plan = replace(plan, placement=Placement(lock=device_lock(config, CPU)), emulator_workers=emulator_share(2),
                       provenance=class_provenance(config, cases))
        zygote.preload()
        gc.freeze()
        zygote.warm(pickle.dumps((config, cases, False)))
        seconds, mains, stats = [], [], None
        for index, student in enumerate(students):
            task, cpu_file, prof = work / "task", work / "cpu", work / f"{index}.prof"
            task.write_bytes(pickle.dumps((student, config, cases, plan)))
            out = Path(results, f"{student.name}.json") if results else None
            if out:
                out.parent.mkdir(parents=True, exist_ok=True)
            pid = os.fork()
            if pid == 0:
                worker(task, cpu_file, prof if profile else None, out)
            os.waitpid(pid, 0)
            process, main_thread = map(float, cpu_file.read_text().split())
            seconds.append(process)
            mains.append(main_thread)
            if profile:
                stats = pstats.Stats(str(prof)) if stats is None else stats.add(str(prof))
        if stats is not None:
            stats.dump_stats(profile)
    print(f"{count} students, one worker at a time: worker CPU-s per student mean {statistics.mean(seconds):.3f}, "
          f"median {statistics.median(seconds):.3f}, min {min(seconds):.3f}, max {max(seconds):.3f}")
    print(f"  of it the main thread's mean {statistics.mean(mains):.3f} (the rest: the worker's other threads)")
    print("  each: " + " ".join(f"{s:.2f}" for s in seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
