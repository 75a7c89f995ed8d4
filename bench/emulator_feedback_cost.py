"""What the emulator's access feedback (issue 26) adds to a CPU grade's wall time (target: at most +0.5 s).

Usage: python3 bench/feedback_cost.py [ROUNDS] [SUBMISSION ...]
    (default: 5 rounds of good_basic (tile 16) and bank_conflict_tile (tile 32))
Grades each submission with `feedback: {emulator: true}` and `false`, alternating in the same run on one warm
cache (one grade of each first, untimed: it builds the kernel's and the reference's emulation and caches the
reference's profile). Prints the median wall of each and the difference, and the median seconds the driver
spent on the profile after the last case (the compile check's `feedback_s`: the part of the difference that
is not the host's noise; on a shared 2-core machine the walls of one grade vary by seconds).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

TARGET_S = 0.5
DEFAULT = ["good_basic", "bank_conflict_tile"]


def grade(submission: Path, config: Path, out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", str(submission), "-o", str(out), "--config", str(config),
                    "--backend", "cpu"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    return wall, json.loads((out / f"{submission.name}.json").read_text())


def configs(work: Path) -> dict[bool, Path]:
    """The shipped config on one cache, with the emulator's feedback on and off."""
    made = {}
    for on in (True, False):
        folder = work / f"feedback_{on}"
        folder.mkdir()
        path = config_with_cache(work / "cache", folder)
        path.write_text(path.read_text().replace("emulator: true", f"emulator: {'true' if on else 'false'}"))
        made[on] = path
    return made


def main() -> None:
    args = sys.argv[1:]
    rounds = int(args.pop(0)) if args and args[0].isdigit() else 5
    paths = [Path(p) for p in args] or [ROOT / "tests" / "submissions" / name for name in DEFAULT]
    print(f"{os.cpu_count()} CPU cores; {rounds} rounds; target +{TARGET_S:g} s per grade")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        config = configs(work)
        for submission in paths:
            for on in (True, False):
                grade(submission, config[on], work / "warmup")
            walls: dict[bool, list[float]] = {True: [], False: []}
            findings, inside = 0, []
            for index in range(rounds):
                for on in ((True, False) if index % 2 == 0 else (False, True)):
                    wall, result = grade(submission, config[on], work / f"out_{on}")
                    walls[on].append(wall)
                    if on:
                        findings = len(result["feedback"])
                        compiled = next(c for c in result["checks"] if c["kind"] == "compile")
                        inside.append(compiled["metrics"].get("feedback_s") or 0.0)
            with_s, without_s = statistics.median(walls[True]), statistics.median(walls[False])
            verdict = "meets" if with_s - without_s <= TARGET_S else "MISSES"
            print(f"{submission.name:22s} with feedback {with_s:5.2f} s, without {without_s:5.2f} s: "
                  f"{with_s - without_s:+.2f} s ({verdict} target); {findings} findings; the profile itself "
                  f"{statistics.median(inside):.2f} s after the last case (median)")


if __name__ == "__main__":
    main()
