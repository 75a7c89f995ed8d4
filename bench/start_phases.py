"""Python's share of one warm `grade` (issue 50): the parent's start, what the parent does before its child starts,
and the child's start, each grade's phases as its result JSON stores them.

Usage: python3 bench/start_phases.py [--rounds N] [--backend cpu|gpu] [--before TREE] [SUBMISSION]
(default: good_basic, 7 rounds, --backend cpu). --before TREE grades with the grader in TREE (an earlier checkout)
right before each grade here, so both see the same load. A first grade per tree warms the caches (not reported).
Prints, per tree, the median and the best of the rounds: "start" (interpreter and imports, until main() runs),
"to child" (start, configuration, sandbox, static check: the parent's time before its child is started),
"child start", "assembly" (job set-up and result assembly: the grade's "grading_other"), "parent cpu" (the
grading process's own CPU seconds, all its threads, no child's: on a loaded machine steadier than its walls) and the
grade's wall.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

BEFORE_CHILD = ("start", "config", "sandbox", "static")
# `grade` as `python -m grader` runs it, saying its own CPU seconds as it ends (an atexit function: it runs at the
# interpreter's own end and at grade's quicker one alike).
OWN_CPU = ("import atexit, resource, sys\n"
           "def said():\n"
           "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
           "    sys.stderr.write(f'\\nown cpu: {usage.ru_utime + usage.ru_stime}\\n')\n"
           "atexit.register(said)\n"
           "from grader.startup import grade\n"
           "sys.exit(grade())\n")


def timed_grade(tree: Path, submission: Path, config: Path, out: Path, backend: str) -> dict[str, float]:
    started = time.perf_counter()
    finished = subprocess.run([sys.executable, "-c", OWN_CPU, str(submission), "-o", str(out), "--config",
                               str(config), "--backend", backend], check=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, cwd=tree)
    wall = time.perf_counter() - started
    phases = json.loads((out / f"{submission.name}.json").read_text())["phases"]
    own = [line for line in finished.stderr.splitlines() if line.startswith("own cpu: ")]
    return {"start": phases.get("start", 0.0), "to child": sum(phases.get(name, 0.0) for name in BEFORE_CHILD),
            "child start": phases.get("child_start", 0.0), "assembly": phases.get("grading_other", 0.0),
            "parent cpu": float(own[-1].split()[-1]), "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--before", type=Path, default=None, help="an earlier checkout to grade with too")
    parser.add_argument("submission", nargs="?", type=Path, default=ROOT / "tests" / "submissions" / "good_basic")
    options = parser.parse_args()
    trees = {"before": options.before.resolve(), "after": ROOT} if options.before else {"after": ROOT}
    submission = options.submission.resolve()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as work:
        configs = {}
        for name, tree in trees.items():
            (Path(work) / name).mkdir()
            configs[name] = config_with_cache(Path(work) / name / "cache", Path(work) / name, tree)
            timed_grade(tree, submission, configs[name], Path(work) / name / "warm-up", options.backend)
        for index in range(options.rounds):
            for name, tree in trees.items():
                runs[name].append(timed_grade(tree, submission, configs[name], Path(work) / name / str(index),
                                              options.backend))
    for name, found in runs.items():
        words = ", ".join(f"{key} {statistics.median(r[key] for r in found):.3f} s "
                          f"(best {min(r[key] for r in found):.3f})" for key in found[0])
        print(f"{name:6s} {trees[name]}: {words}")


if __name__ == "__main__":
    main()
