"""What issue 26's feedback adds to one grade (targets: +0.5 s on a CPU grade, +1.5 s on a GPU grade alone).

CPU part (any machine with nvcc): the compiled kernel's resources and occupancy (diagnose/resources.py) on
a cubin nvcc built, with the reference's resources not yet cached (a class's first grade: one sandboxed
nvcc of the reference) and cached (every later grade). GPU part (with a GPU and ncu): one grade with and
without --profile, the reference's ncu figures cached after the first.

    python bench/feedback_cost.py [--gpu]
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

from grader.config import load_config
from grader.diagnose.resources import add_compiler_feedback
from grader.execute.confine.sandbox import detect
from grader.execute.nvcc.compile import compile_check
from grader.result import COMPILE, SubmissionResult, passed

KERNEL = ROOT / "tests" / "feedback_kernels" / "register_heavy" / "kernel.cu"


def compiler_part(folder: Path) -> None:
    config = load_config(config_with_cache(folder / "cache", folder))
    sandbox = detect()
    cubin = compile_check(KERNEL.read_text(), "sm_90", config.compile.options, 120, sandbox,
                          config.kernel.contract()).cubin
    times = []
    for _ in range(6):
        result = SubmissionResult("bench", "graded")
        started = time.perf_counter()
        add_compiler_feedback(result, passed("compile", COMPILE, 0), cubin, config, sandbox, 16)
        times.append(time.perf_counter() - started)
    print(f"compiled-kernel feedback: first (reference compiled) {times[0]:.3f} s; "
          f"cached: median {statistics.median(times[1:]) * 1000:.1f} ms; findings: {[f.what for f in result.feedback]}")


def gpu_part(folder: Path) -> None:
    from grader.cases import load_cases
    from grader.pipeline import GPU, RunPlan, grade

    config = load_config(config_with_cache(folder / "cache", folder))
    cases = load_cases(config.testcases_dir)
    student = folder / "student"
    student.mkdir()
    (student / "kernel.cu").write_text(KERNEL.read_text())
    for profile in (False, True, True):
        started = time.perf_counter()
        result = grade(student, config, cases, RunPlan(GPU, profile=profile))
        timing = next((c for c in result.checks if c.kind == "timing"), None)
        ncu = timing.metrics.get("ncu", {}) if timing else {}
        print(f"GPU grade, profile={profile}: {time.perf_counter() - started:.2f} s; ncu {ncu.get('seconds')} s")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        compiler_part(Path(tmp))
        if "--gpu" in sys.argv:
            gpu_part(Path(tmp))
