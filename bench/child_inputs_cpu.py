"""CPU seconds of the CPU driver child (`python -m grader.execute.cpu`) and of the grading parent per
`grade --backend cpu`, on a prepared cache: what storing the cases' seeded inputs once (judge/input_files.py)
saves each grade (issue 50). Exact figures, not samples: a sitecustomize on PYTHONPATH (which the runner passes to
its children) writes each process's own getrusage at its exit; the compilers and the harness it starts are not in it.

Usage: python3 bench/child_inputs_cpu.py [COUNT] [--code=DIR] [--submission=NAME]
COUNT grades of tests/submissions/NAME (good_basic) with the project's config (every shipped case); --code=DIR runs
the grader found in DIR (an earlier checkout) the same way first, for a before/after side by side.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import ROOT, config_with_cache

HOOK = """
import atexit, json, os, resource, sys

def _said():
    role = {"grader/execute/cpu/__main__.py": "driver", "grader/__main__.py": "parent"}
    program = sys.argv[0] if sys.argv else ""
    for ending, name in role.items():
        if program.endswith(ending):
            usage = resource.getrusage(resource.RUSAGE_SELF)
            with open(os.path.join(os.path.dirname(__file__), "usage.jsonl"), "a") as file:
                file.write(json.dumps({"role": name, "cpu_s": usage.ru_utime + usage.ru_stime}) + "\\n")

atexit.register(_said)
"""


def grades(code: Path, count: int, submission: Path, work: Path) -> dict[str, list[float]]:
    """Each role's CPU seconds per grade, for `count` grades after `grade prepare` (the first grade's, which
    stores what the prepare left out, is not counted)."""
    hook = work / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    config = config_with_cache(work / "cache", work, code)
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{hook}"}
    run = dict(cwd=code, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "grader", "prepare", "--config", str(config), "--backend", "cpu"], **run)
    for number in range(count + 1):
        if number == 1:
            (hook / "usage.jsonl").unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "grader", str(submission), "--config", str(config), "--backend", "cpu",
                        "-o", str(work / f"out{number}")], **run)
    found: dict[str, list[float]] = {}
    for line in (hook / "usage.jsonl").read_text().splitlines():
        entry = json.loads(line)
        found.setdefault(entry["role"], []).append(entry["cpu_s"])
    return found


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 5
    options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--") and "=" in arg)
    submission = ROOT / "tests" / "submissions" / options.get("submission", "good_basic")
    codes = [Path(options["code"]).resolve()] if "code" in options else []
    for code in [*codes, ROOT]:
        with tempfile.TemporaryDirectory() as work:
            found = grades(code, count, submission, Path(work))
        said = ", ".join(f"{role} median {statistics.median(s):.3f} CPU-s (mean {statistics.mean(s):.3f}, "
                         f"min {min(s):.3f}, n={len(s)})" for role, s in sorted(found.items()))
        print(f"{code}: {count} grades of {submission.name} --backend cpu: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
