"""Where a batch worker's own CPU goes, exactly: a batch's template (zygote.preload and zygote.warm, as the batch
asks) made in this process, then a worker forked from it per student, one at a time, which runs the batch
worker's own code (grade_the_task_on_stdin: the task unpickled, the grade, the result as JSON) with the batch's
plan, and reports its process's CPU-s (user + system of all its threads, not its children's: the CPU driver, g++,
the GPU child and the harness are theirs) from os.times. Issue 50's target: <= 0.3 s per student.

Usage: python3 bench/worker_profile.py [COUNT] [--backend=cpu|gpu] [--profile=FILE] [--results=DIR]
--backend=gpu (on a GPU host): the plan `grade batch --backend gpu --no-sanitize` makes; compute-sanitizer's
groups are the batch parent's work, which this bench does not run. --profile=FILE: each worker's main thread
under cProfile (its CPU time, not its waits), the stats of all merged into FILE (pstats; it inflates the CPU
figures, so read its shares, not its seconds). --results=DIR: each worker's result JSON there, to compare two
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
from grader.classroom.batch import _placements  # noqa: E402
from grader.classroom.workers import emulator_share  # noqa: E402
from grader.cli import parse_args, run_plan  # noqa: E402
from grader.config import load_config  # noqa: E402
from grader.pipeline import GPU, sandbox_of  # noqa: E402
from grader.prepare import prepare  # noqa: E402
from grader.provenance import class_provenance  # noqa: E402

JOBS = 2  # the batch's --jobs whose share of the cores each worker's emulator gets
# Where a worker's main thread goes: (stage, file, function, its caller or None for any); disjoint but for a GPU
# grade's second emulator run (a large case the GPU found wrong), in both the judging and the runs.
WORKER = "grade_the_task_on_stdin"
STAGES = (
    ("task unpickled", "~", "<built-in method _pickle.loads>", WORKER),
    ("source: unneeded headers dropped", "before_compile.py", "drop_unneeded_headers", None),
    ("source: kernels found", "static_check.py", "find_kernels", "_grade"),
    ("source: static checks", "static_check.py", "static_checks", "_graded"),
    ("source: refusal before compiling", "before_compile.py", "refusal_before_compiling", None),
    ("source: launch and kernel said", "settle.py", "say_how_launched", None),
    ("compile check (nvcc, or g++'s without it)", "without_gpu.py", "compile_without_gpu", None),
    ("the GPU run judged by both engines", "on_gpu.py", "_judged_by_both", None),
    ("the children's runs: job, events, turns, judging", "child_run.py", "run_child", None),
    ("compiler feedback", "resources.py", "add_compiler_feedback", None),
    ("speed model", "on_cpu.py", "_timing_without_gpu", None),
    ("result to JSON", "result.py", "to_dict", WORKER),
    ("result to JSON", "json/__init__.py", "dumps", WORKER),
)


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


def _seconds(stats: pstats.Stats, suffix: str, function: str, caller: str | None) -> float:
    found = 0.0
    for (file, _, name), (_, _, _, seconds, callers) in stats.stats.items():
        if name == function and file.endswith(suffix):
            found += seconds if caller is None else sum(figures[3] for (_, _, by), figures in callers.items()
                                                        if by == caller)
    return found


def stage_breakdown(stats: pstats.Stats) -> list[str]:
    """Each stage's share of the profiled main threads' CPU (the cumulative time of its functions)."""
    total = _seconds(stats, "batch_worker.py", WORKER, None)
    shares: dict[str, float] = {}
    for stage, suffix, function, caller in STAGES:
        shares[stage] = shares.get(stage, 0.0) + _seconds(stats, suffix, function, caller)
    shares["the rest (provenance, the emulator's feedback, the grade's own)"] = total - sum(shares.values())
    return [f"  the main threads' profiled CPU by stage ({total:.2f} s in all, inflated by the profiler):",
            *(f"    {stage}: {100 * seconds / total:.0f}%" for stage, seconds in shares.items() if total)]


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 12
    profile, results, backend = _option("profile"), _option("results"), _option("backend") or "cpu"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        students = generate(work / "class", count)
        config_file = config_with_cache(work / "cache", work)
        config = load_config(config_file)
        cases = load_cases(config.testcases_dir, config.kernel.square)
        plan = run_plan(parse_args(["batch", str(work / "class"), "-o", str(work / "out"), "--config", str(config_file),
                                    "--backend", backend, *(["--no-sanitize"] if backend == GPU else [])]))
        on_gpu = plan.backend == GPU
        prepare(config, whole_truths(cases, on_gpu), sandbox_of(plan), on_gpu, inputs=cases)  # the batch's, before
        plan = replace(plan, placement=_placements(plan, config)[0], emulator_workers=emulator_share(JOBS),
                       provenance=class_provenance(config, cases))
        zygote.preload()
        gc.freeze()
        zygote.warm(pickle.dumps((config, cases, on_gpu)))
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
            print("\n".join(stage_breakdown(stats)))
    print(f"{count} students ({backend}), one worker at a time: worker CPU-s per student mean "
          f"{statistics.mean(seconds):.3f}, median {statistics.median(seconds):.3f}, min {min(seconds):.3f}, "
          f"max {max(seconds):.3f}")
    print(f"  of it the main thread's mean {statistics.mean(mains):.3f} (the rest: the worker's other threads)")
    print("  each: " + " ".join(f"{s:.2f}" for s in seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
