"""The CPU-seconds a batch spends in its per-student Python (the worker processes that each grade one
student, and the template they are forked from), on a CPU batch of COUNT generated students. Target: <= 0.3 s
per student (issue 50).

Usage: python3 bench/batch_worker_cpu.py [COUNT] [--jobs=N] [--code=DIR]
--code=DIR runs the grader found in DIR (an earlier checkout: `git archive integ | tar -x -C DIR`) with the
same class and config, for a before/after side by side. Processes are sampled from /proc every 100 ms
(batch_300's CpuUse): the figures are lower bounds, a process that lives less than that is missed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batch_300 import CpuUse
from benchlib import ROOT, config_with_cache, generate

WORKER_LABELS = ("batch_worker", "grader.classroom.batch_worker")  # a forked worker's name; a started one's module
TEMPLATE_LABELS = ("batch_zygote", "grader.classroom.zygote")


def _labelled(name: str, labels: tuple[str, ...]) -> bool:
    """CpuUse's label is the program, or for Python "python MODULE": this bench's own is not a worker."""
    return name.split()[-1] in labels


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 12
    jobs = next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith("--jobs=")), "2")
    code = Path(next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith("--code=")), ROOT)).resolve()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        generate(work / "class", count)
        config = config_with_cache(work / "cache", work, code)
        started = time.perf_counter()
        with CpuUse() as cpu:
            subprocess.run([sys.executable, "-m", "grader", "batch", str(work / "class"), "-o", str(work / "out"),
                            "--config", str(config), "--backend", "cpu", "--jobs", jobs], check=True, cwd=code,
                           stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(code)})
        wall = time.perf_counter() - started
    seconds = cpu.by_name()
    workers = sum(s for name, s in seconds.items() if _labelled(name, WORKER_LABELS))
    template = sum(s for name, s in seconds.items() if _labelled(name, TEMPLATE_LABELS))
    print(f"{code}: {count} students, --jobs {jobs}: wall {wall:.1f} s; workers {workers:.2f} CPU-s "
          f"({workers / count:.3f} s per student), template {template:.2f} CPU-s; "
          f"per student with the template's share {(workers + template) / count:.3f} s")
    # The grader's own Python only: a process older than the batch (a kernel thread) counts all its life here.
    ours = [(name, s) for name, s in seconds.most_common() if name.startswith(("python", "batch_"))]
    print("  its Python's CPU s by program (lower bound): " + ", ".join(f"{name} {s:.1f}" for name, s in ours[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
