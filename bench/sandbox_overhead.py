"""What the sandbox costs: one submission graded with and without it, side by side, and one bare launch.

Usage (on the GPU machine): python3 bench/sandbox_overhead.py [SUBMISSION] [ROUNDS]
Targets: the sandboxed grade at most 5% slower than the unsandboxed one, and at most 50 ms per child.
Rounds alternate the two, warm compile cache, so drift on the machine hits both alike.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

from grader.cases import load_cases
from grader.config import load_config
from grader.execute.confine.sandbox import HARNESS_LIMITS, NONE, Confinement, Sandbox, detect, scratch_folder
from grader.execute.gpu.detect import gpu_unavailable_reason
from grader.pipeline import CPU, GPU, RunPlan, grade

TARGET_RATIO, TARGET_MS_PER_CHILD = 1.05, 50.0


def launch_ms(sandbox: Sandbox, rounds: int = 20) -> float:
    """The median wall time of starting /bin/true and waiting for it."""
    times = []
    with scratch_folder("sgemm-bench-") as folder:
        confinement = Confinement(folder, HARNESS_LIMITS, seccomp=True)
        for _ in range(rounds):
            started = time.perf_counter()
            sandbox.popen(["/bin/true"], confinement, stdout=subprocess.DEVNULL).wait()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    submission = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "submissions" / "good_basic"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    backend = GPU if gpu_unavailable_reason() is None else CPU
    sandboxed, bare = detect(), Sandbox(NONE)
    with tempfile.TemporaryDirectory() as work:
        config = load_config(config_with_cache(Path(work, "cache"), Path(work)))
        cases = load_cases(config.testcases_dir)
        walls = {sandboxed.level: [], NONE: []}
        for round_number in range(rounds + 1):
            for sandbox in (sandboxed, bare) if round_number % 2 else (bare, sandboxed):
                started = time.perf_counter()
                result = grade(submission, config, cases, RunPlan(backend, sandbox=sandbox))
                if round_number:  # the first round warms the compile cache
                    walls[sandbox.level].append(time.perf_counter() - started)
                assert result.sandbox == sandbox.level and result.graded, result.message
    inside, outside = statistics.median(walls[sandboxed.level]), statistics.median(walls[NONE])
    ratio = inside / outside
    per_child = launch_ms(sandboxed) - launch_ms(bare)
    print(f"backend {backend}, sandbox {sandboxed.level}, {rounds} rounds of {submission.name}")
    print(f"  grade wall, median: sandboxed {inside:.3f} s, unsandboxed {outside:.3f} s: ratio {ratio:.3f} "
          f"({'meets' if ratio <= TARGET_RATIO else 'MISSES'} the {TARGET_RATIO:g} target)")
    print(f"  all rounds: sandboxed {[round(w, 3) for w in walls[sandboxed.level]]}, "
          f"unsandboxed {[round(w, 3) for w in walls[NONE]]}")
    print(f"  one launch of /bin/true: {per_child:.1f} ms more in the sandbox "
          f"({'meets' if per_child <= TARGET_MS_PER_CHILD else 'MISSES'} the {TARGET_MS_PER_CHILD:g} ms target)")


if __name__ == "__main__":
    main()
