"""Where a batch worker's own CPU goes: one submission graded as a batch worker grades it (GPU, sanitizer on),
in this process under cProfile, twice (the second with the truths and compile caches warm, as in a batch).

Usage: python3 bench/parent_cpu.py [NAME ...]   (corpus names; default good_basic missing_load_barrier)
Prints this process's CPU seconds per grade (children excluded) and the functions that took most of it.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

from grader.cases import load_cases
from grader.config import load_config
from grader.judge.truths import warm
from grader.pipeline import GPU, RunPlan, grade

TOP = 18


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as work:
        config = load_config(config_with_cache(Path(work) / "cache", Path(work)))
        cases = load_cases(config.testcases_dir)
        started = own_cpu()
        warm(cases, config)
        print(f"truths computed once per machine: {own_cpu() - started:.2f} CPU s")
        for name in names:
            for label in ("first", "again"):
                profile = cProfile.Profile(time.process_time)  # CPU, not the waits for children
                cpu, wall = own_cpu(), time.perf_counter()
                profile.enable()
                result = grade(ROOT / "tests" / "submissions" / name, config, cases, RunPlan(GPU, sanitize=True))
                profile.disable()
                cpu, wall = own_cpu() - cpu, time.perf_counter() - wall
                print(f"\n{name} ({label}): {result.score:g}/{result.max_score:g}, parent CPU {cpu:.2f} s, "
                      f"wall {wall:.2f} s")
                if label == "again":
                    text = io.StringIO()
                    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(TOP)
                    print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))


if __name__ == "__main__":
    main(sys.argv[1:] or ["good_basic", "missing_load_barrier"])
