"""The same class through `grade batch` several times (sanitizer on, as batch defaults): a kernel's timing
verdict may change between runs only when its ratio sits within 3% of the limit in one of them.

Usage: python3 bench/timing_flips.py [COUNT] [REPEATS]
Correct kernels (about 1× the reference's time), a correct but 4× slow one, and the usual mistakes, each
made unique as in batch_300.py. Prints each run's wall time and every flip; exits 1 on a flip that the
3% rule does not allow.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache, generate

from grader.config import load_config
from grader.judge.timing import CLOSE
from grader.result import TIMING, SubmissionResult

MIX = [("good_basic", 8), ("good_tile8_renamed", 4), ("good_tile32_macro_sync", 4), ("slow_uncoalesced", 8),
       ("missing_load_barrier", 4), ("call_counter", 2), ("b_wrong_stride", 2)]


def timing_of(result: SubmissionResult) -> tuple[str, float | None]:
    check = next((c for c in result.checks if c.kind == TIMING), None)
    return (check.status, check.metrics.get("ratio")) if check else ("absent", None)


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        students = generate(work / "class", count, MIX)
        config = config_with_cache(work / "cache", work)
        max_ratio = load_config(config).timing.max_ratio
        runs = []
        for run in range(repeats):
            started = time.perf_counter()
            out = work / f"out{run}"
            subprocess.run([sys.executable, "-m", "grader", "batch", str(work / "class"), "-o", str(out),
                            "--config", str(config), "--backend", "gpu"], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL)
            runs.append({p.stem: timing_of(SubmissionResult.from_dict(json.loads(p.read_text())))
                         for p in (out / "students").glob("*.json")})
            print(f"run {run + 1}: {len(runs[-1])} graded in {time.perf_counter() - started:.1f} s")
    allowed = unexplained = 0
    for student in sorted(s.name for s in students):
        seen = [run.get(student, ("missing", None)) for run in runs]
        if len({status for status, _ in seen}) == 1:
            continue
        close = any(ratio is not None and abs(ratio - max_ratio) <= CLOSE * max_ratio for _, ratio in seen)
        allowed, unexplained = allowed + close, unexplained + (not close)
        print(f"{'flip (within 3% of the limit)' if close else 'FLIP'} {student}: {seen}")
    ratios = sorted(r for run in runs for status, r in run.values() if r is not None)
    seen_range = f"{ratios[0]:.2f}–{ratios[-1]:.2f}×" if ratios else "none"
    print(f"{count} students × {repeats} batches: {unexplained} timing verdicts flipped further than 3% from "
          f"the {max_ratio:g}× limit, {allowed} within it; ratios seen {seen_range}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
