"""A class of 300 generated submissions through `grade batch` on one GPU host (target: < 3 min, H100, 16 cores).

Usage: python3 bench/batch_300.py [COUNT]
Variants of the corpus's correct and buggy kernels, each made unique (a student comment, renamed
accumulator) so that no compile is a cache hit. Prints the wall time, per-stage CPU and GPU time, and
the ratio of the wall time to max(compile CPU time / cores, GPU time): 1.0 would be a perfect schedule.
Runs without the compute-sanitizer pass, which bench/sanitizer_time.py measures on its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchlib import ROOT, config_with_cache

TARGET_S = 180.0
# (corpus kernel, how many in 300): mostly correct, the usual mistakes, a few that crash or hang.
MIX = [("good_basic", 90), ("good_tile8_renamed", 30), ("good_tile32_macro_sync", 30), ("missing_use_barrier", 25),
       ("missing_load_barrier", 20), ("no_bounds_checks", 25), ("b_wrong_stride", 20), ("truncated_phases", 20),
       ("store_outside_c", 15), ("compile_error", 10), ("call_counter", 5), ("trap", 5), ("illegal_address", 3),
       ("conditional_barrier", 1), ("hang", 1)]


def generate(folder: Path, count: int) -> None:
    names = [name for name, share in MIX for _ in range(share)]
    for index in range(count):
        name = names[index % len(names)]
        source = (ROOT / "tests" / "submissions" / name / "kernel.cu").read_text()
        source = source.replace("sum", f"acc{index}") + f"\n// student {index:03d}\n"
        student = folder / f"student{index:03d}_{name}"
        student.mkdir(parents=True)
        (student / "kernel.cu").write_text(source)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        generate(work / "class", count)
        config = config_with_cache(work / "cache", work)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "grader", "batch", str(work / "class"), "-o", str(work / "out"),
                        "--config", str(config), "--backend", "gpu", "--no-sanitize"],
                       check=True, cwd=ROOT)
        wall = time.perf_counter() - started
        results = [json.loads(p.read_text()) for p in (work / "out" / "students").glob("*.json")]
    report(results, wall, cores)


def report(results: list[dict], wall: float, cores: int) -> None:
    checks = [c for r in results for c in r["checks"]]
    compile_cpu = sum(c["metrics"].get("child_cpu_s") or 0 for c in checks if c["kind"] == "compile")
    case_gpu = sum(c["metrics"].get("seconds") or 0 for c in checks if c["kind"] == "case")
    timing_gpu = sum(c["metrics"].get("phase_s") or 0 for c in checks if c["kind"] == "timing")
    gpu = case_gpu + timing_gpu
    bound = max(compile_cpu / cores, gpu)
    labels = Counter(r["status"] for r in results)
    print(f"{len(results)} submissions on {cores} cores: wall {wall:.1f} s "
          f"({'meets' if wall < TARGET_S else 'MISSES'} the {TARGET_S:g} s target); {dict(labels)}")
    print(f"  CPU, child start-up and compile (nvcc included): {compile_cpu:.1f} s total, "
          f"{compile_cpu / cores:.1f} s per core")
    print(f"  GPU: cases {case_gpu:.1f} s + timing {timing_gpu:.1f} s = {gpu:.1f} s")
    print(f"  wall / max(compile CPU / cores, GPU) = {wall:.1f} / {bound:.1f} = {wall / bound:.2f}")
    print(f"  per submission: {wall / len(results):.3f} s of wall")


if __name__ == "__main__":
    main()
