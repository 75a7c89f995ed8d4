"""What the compute-sanitizer diagnosis adds per submission (target: < 30 s), on a GPU machine.

Usage: python3 bench/sanitizer_time.py [NAME ...]   (default: five corpus kernels)
Each kernel is graded on one small case with the diagnosis on, as a batch grades it; the figure is the
diagnosis alone. The three tools run side by side, so its wall time is about the slowest tool's.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benchlib import ROOT, config_with_cache

from grader.cases import load_cases
from grader.config import load_config
from grader.pipeline import GPU, RunPlan, grade
from grader.result import SANITIZER

TARGET_S = 30.0
DEFAULT = ["good_basic", "missing_load_barrier", "missing_use_barrier", "no_bounds_checks", "conditional_barrier"]


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        config = load_config(config_with_cache(Path(work) / "cache", Path(work)))
        cases = [case for case in load_cases(config.testcases_dir) if not case.gpu_only][:1]
        for name in sys.argv[1:] or DEFAULT:
            result = grade(ROOT / "tests" / "submissions" / name, config, cases, RunPlan(GPU, sanitize=True))
            check = next(c for c in result.checks if c.kind == SANITIZER)
            seconds = {key[:-2]: value for key, value in check.metrics.items() if key.endswith("_s")}
            wall = max(seconds.values(), default=0.0)
            seconds = {tool: value for tool, value in seconds.items() if tool in ("racecheck", "memcheck", "synccheck")}
            tools = ", ".join(f"{tool} {value:.1f} s" for tool, value in seconds.items())
            tools += f"; GPU held {check.metrics.get('turn_held_s', 0):.2f} s"
            print(f"{name:22s} {wall:5.1f} s ({'meets' if wall < TARGET_S else 'MISSES'} the {TARGET_S:g} s target; "
                  f"{tools}): {check.status}: {' | '.join(check.message.splitlines())[:300]}")


if __name__ == "__main__":
    main()
