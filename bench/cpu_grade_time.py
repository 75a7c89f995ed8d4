"""Wall time of `grade --backend cpu` per submission, cold and warm build cache (target: < 10 s on 2 cores).

Usage: python3 bench/cpu_grade_time.py [--rounds N] [--before TREE] [SUBMISSION ...]   (default: four corpus
kernels of different shapes, one round). --before TREE also grades them with the grader in TREE (an earlier
checkout: `git worktree add TREE REV`), each submission there right before here, so that both see the same load.
Prints one line per submission and cache state: the wall time and the emulated
cases' own seconds (added up: cases that ran side by side overlap), and the slowest cases' seconds (a sampled
large case's: from its first part's start to its last part's end at most). With several rounds, each with a fresh
cache, the median and the best of the rounds (on a machine others share, the best is the least disturbed).
The harness's object, its precompiled header and the reference's build are made by a first grade of the
reference kernel in each round (not reported): "cold" is then a new submission's grade.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

TARGET_S = 10.0
DEFAULT = ["good_basic", "good_tile8_renamed", "good_tile32_macro_sync", "missing_use_barrier"]
LABELS = ("cold cache", "warm cache")


def timed_grade(submission: Path, config: Path, out: Path, root: Path = ROOT) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", str(submission), "-o", str(out), "--config", str(config),
                    "--backend", "cpu"], check=True, stdout=subprocess.DEVNULL, cwd=root)
    wall = time.perf_counter() - started
    return wall, json.loads((out / f"{submission.name}.json").read_text())


def emulated_s(result: dict) -> float:
    return sum(c["metrics"]["seconds"] for c in result["checks"] if c["kind"] == "case" and "seconds" in c["metrics"])


def one_round(paths: list[Path], before: Path | None) -> dict[tuple[str, str, str], tuple[float, dict]]:
    """Each submission's grade, cold then warm, here and (before it) in the tree `before`."""
    trees = {"before": before, "after": ROOT} if before else {"after": ROOT}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        configs = {name: tree_config(tree, work / name) for name, tree in trees.items()}
        for name, tree in trees.items():  # the harness's own builds, not a submission's
            timed_grade(tree / "reference", configs[name], work / name / "warm-up", tree)
        return {(tree, submission.name, label):
                timed_grade(submission, configs[tree], work / tree / f"{submission.name}-{label.replace(' ', '_')}",
                            trees[tree])
                for submission in paths for label in LABELS for tree in trees}


def tree_config(tree: Path, folder: Path) -> Path:
    """The tree's own config.yaml pointing at its cases and reference, with a cache of its own in `folder`."""
    folder.mkdir(parents=True)
    return config_with_cache(folder / "cache", folder, tree)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", type=Path, default=None, help="an earlier checkout to grade with too")
    parser.add_argument("submissions", nargs="*")
    options = parser.parse_args()
    paths = [Path(p) for p in options.submissions] or [ROOT / "tests" / "submissions" / name for name in DEFAULT]
    print(f"{os.cpu_count()} CPU cores; target {TARGET_S:g} s per submission; median of {options.rounds} rounds")
    before = options.before.resolve() if options.before else None  # the tree's grader runs from its own folder
    rounds = [one_round(paths, before) for _ in range(options.rounds)]
    for tree in ("before", "after") if options.before else ("after",):
        if options.before:
            print(f"-- {tree}: {options.before if tree == 'before' else ROOT}")
        for submission in paths:
            report(rounds, tree, submission)


def report(rounds: list[dict], tree: str, submission: Path) -> None:
    for label in LABELS:
        runs = [found[(tree, submission.name, label)] for found in rounds]
        wall, best = statistics.median(wall for wall, _ in runs), min(wall for wall, _ in runs)
        result = runs[-1][1]
        cases = [c for c in result["checks"] if c["kind"] == "case" and "seconds" in c["metrics"]]
        emulated = statistics.median(emulated_s(found) for _, found in runs)
        verdict = "meets" if wall < TARGET_S else "MISSES"
        print(f"{submission.name:24s} {label}: wall {wall:5.2f} s ({verdict} target), best {best:5.2f} s, "
              f"{len(cases)} cases emulated in {emulated:.2f} s, score {result['score']:g}/{result['max_score']:g}")
        slowest = sorted(cases, key=lambda c: c["metrics"]["seconds"])[-3:]  # the grade's last waits
        print(f"{'':24s} slowest cases (last round): "
              + ", ".join(f"{c['name']} {c['metrics']['seconds']:.2f} s" for c in reversed(slowest)))
        print(f"{'':24s} the emulator (last round): {emulator_phases(result)}")


def emulator_phases(result: dict) -> str:
    """The emulator's run on the parent's clock (child_start, compile, cases, ...), and whether the parent had
    built the student's unit as the driver started."""
    phases = result.get("phases", {})
    shown = ", ".join(f"{name} {phases[name]:.3f}" for name in ("child_start", "compile", "cases") if name in phases)
    compiled = next((c for c in result["checks"] if c["kind"] == "compile"), {}).get("metrics", {})
    return f"{shown}; unit built ahead by: {compiled.get('compiled_ahead', 'no')}"


if __name__ == "__main__":
    main()
