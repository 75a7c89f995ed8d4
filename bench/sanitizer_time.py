"""What the compute-sanitizer diagnosis adds per submission (target: < 30 s), on a GPU machine.

Usage: python3 bench/sanitizer_time.py [NAME ...]   (default: five corpus kernels)
The three tools run side by side, so the wall time is about the slowest tool's.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from grader.diagnose.run import sanitize

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 30.0
DEFAULT = ["good_basic", "missing_load_barrier", "missing_use_barrier", "no_bounds_checks", "conditional_barrier"]


def main() -> None:
    for name in sys.argv[1:] or DEFAULT:
        source = (ROOT / "tests" / "submissions" / name / "kernel.cu").read_text()
        started = time.perf_counter()
        check = sanitize(source, "mysgemm", 16, 20, None)
        wall = time.perf_counter() - started
        tools = ", ".join(f"{key[:-2]} {value:.1f} s" for key, value in check.metrics.items() if key.endswith("_s"))
        print(f"{name:22s} {wall:5.1f} s ({'meets' if wall < TARGET_S else 'MISSES'} the {TARGET_S:g} s target; "
              f"{tools}): {check.status}: {check.message.splitlines()[0][:110]}")


if __name__ == "__main__":
    main()
