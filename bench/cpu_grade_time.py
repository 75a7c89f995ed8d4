"""Wall time of `grade --backend cpu` per submission, cold and warm build cache (target: < 10 s on 2 cores).

Usage: python3 bench/cpu_grade_time.py [SUBMISSION ...]   (default: four corpus kernels of different shapes)
Prints one line per submission and cache state, with the emulated cases' own seconds beside the wall time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

TARGET_S = 10.0
DEFAULT = ["good_basic", "good_tile8_renamed", "good_tile32_macro_sync", "missing_use_barrier"]


def timed_grade(submission: Path, config: Path, out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", str(submission), "-o", str(out), "--config", str(config),
                    "--backend", "cpu"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    return wall, json.loads((out / f"{submission.name}.json").read_text())


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or [ROOT / "tests" / "submissions" / name for name in DEFAULT]
    print(f"{os.cpu_count()} CPU cores; target {TARGET_S:g} s per submission")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        config = config_with_cache(work / "cache", work)
        for submission in paths:
            for label in ("cold cache", "warm cache"):
                wall, result = timed_grade(submission, config, work / label.replace(" ", "_"))
                cases = [c for c in result["checks"] if c["kind"] == "case" and "seconds" in c["metrics"]]
                emulated = sum(c["metrics"]["seconds"] for c in cases)
                slowest = max(cases, key=lambda c: c["metrics"]["seconds"]) if cases else None
                verdict = "meets" if wall < TARGET_S else "MISSES"
                print(f"{submission.name:24s} {label}: wall {wall:5.2f} s ({verdict} target), "
                      f"{len(cases)} cases emulated in {emulated:.2f} s"
                      + (f", slowest {slowest['name']} {slowest['metrics']['seconds']:.2f} s" if slowest else "")
                      + f", score {result['score']:g}/{result['max_score']:g}")


if __name__ == "__main__":
    main()
