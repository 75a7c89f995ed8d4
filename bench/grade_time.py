"""Wall time of `grade` on one submission, cold and warm caches, and where it went (issue 50's targets on an
H200, sandbox on: a new submission <= 1.4 s, warm <= 1.0 s, the first grade after install <= 3 s).

Usage: python3 bench/grade_time.py [SUBMISSION] [--backend gpu|cpu] [--warm N]
  (default: the reference kernel as a submission, on the GPU, two warm runs)
Prints one line per run and its phases (SubmissionResult.phases, grader/phases.py); run it on the GPU machine.
"Cold" is a fresh cache folder (compile cache, float64 truths, toolchain hint); "warm" grades again with it;
"new submission" then grades the same kernel with a comment added: the student's cubin is compiled, the rest
is as on a machine that has graded before (a class's next student). "after install" is the first grade on a fresh
cache that `grade prepare` (the README's first command, the LMS images) filled (issue 50's target: <= 3 s); a tree
without that command says so and grades on the cold cache.
Every figure depends on whether the modules a grade's processes import have their bytecode: where they lack it (an
image that installed them `--no-compile`, or uv's default, with PYTHONDONTWRITEBYTECODE set) each process compiles
them at every import, about 0.1-0.3 s of each grade on the H200 host. The first line says how many lack it; `grade
prepare` compiles them (the "after install" run comes after it, and so does every later run of this bench).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

from grader.phases import DESCRIBED, ordered

TARGET_S = {"cold": 1.4, "warm": 1.0, "install": 3.0}  # issue 50: a new submission, warm, first after install


def timed_grade(submission: Path, config: Path, out: Path, backend: str) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", str(submission), "-o", str(out), "--config", str(config),
                    "--backend", backend], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    return wall, json.loads(next(out.glob("*.json")).read_text())


def report(label: str, wall: float, result: dict) -> None:
    target = TARGET_S["install" if "install" in label else "cold" if label.startswith("cold") else "warm"]
    verdict = "meets" if wall <= target else "MISSES"
    checks = {c["kind"]: c for c in result["checks"]}
    compiled = checks.get("compile", {}).get("metrics", {})
    print(f"{label}: grade wall {wall:.2f} s ({verdict} the {target:g} s target); "
          f"score {result['score']}/{result['max_score']}; grading {result['duration_s']:.2f} s")
    phases = result.get("phases", {})
    for name, seconds in ordered(phases):
        print(f"  {seconds:6.3f} s  {DESCRIBED.get(name, name)}")
    print(f"  {wall - sum(phases.values()):6.3f} s  not stored: report written, interpreter exit")
    child = {key: compiled[key] for key in ("init_s", "context_s", "student_compile_s", "reference_compile_s")
             if key in compiled}
    if child:
        print("  the child's own figures: " + ", ".join(f"{key} {value:.3f}" for key, value in child.items())
              + f"; compiled ahead (while the child started) by: {compiled.get('compiled_ahead', 'no')}")
    if "emulator_phases" in compiled:  # the CPU emulator's run beside the GPU child, on its own clock
        print("  the emulator beside it: " + ", ".join(f"{name} {seconds:.3f}"
                                                     for name, seconds in compiled["emulator_phases"].items())
              + f"; its unit built ahead by: {compiled.get('emulator_compiled_ahead', 'no')}")
    if "timing" in checks and checks["timing"]["status"] != "skipped":
        print(f"  timing: {checks['timing']['message'].splitlines()[0]}")


def bytecode_state() -> str:
    """How many of the modules a grade imports have no bytecode for this interpreter: the grader's own, and those of
    the installed distributions it and its children import."""
    from grader.execute.confine import bytecode
    from grader.execute.confine.reachable import child_distributions

    own = [str(path) for path in (ROOT / "grader").rglob("*.py")]
    own_lacking = sum(not bytecode.has_bytecode(path) for path in own)
    installed_lacking, installed = bytecode.lacking(child_distributions())
    unwritten = os.environ.get("PYTHONDONTWRITEBYTECODE", "")
    return (f"bytecode missing: the grader's {own_lacking} of {len(own)} modules, the installed distributions' "
            f"{installed_lacking} of {installed} (PYTHONDONTWRITEBYTECODE={unwritten!r}; `grade prepare` compiles "
            "them)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submission", nargs="?", type=Path)
    parser.add_argument("--backend", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--warm", type=int, default=2, help="warm runs after the cold one (default: 2)")
    args = parser.parse_args()
    print(bytecode_state())
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        submission = args.submission or work / "reference_as_submission"
        if args.submission is None:
            submission.mkdir()
            shutil.copy(ROOT / "reference" / "kernel.cu", submission / "kernel.cu")
        config = config_with_cache(work / "cache", work)
        for run, label in enumerate(["cold cache", *(f"warm cache {i + 1}" for i in range(args.warm))]):
            wall, result = timed_grade(submission, config, work / f"run{run}", args.backend)
            report(label, wall, result)
        variant = work / "new_submission"
        variant.mkdir()
        kernel = submission / "kernel.cu" if submission.is_dir() else submission
        (variant / "kernel.cu").write_text(kernel.read_text() + "\n// another student's file\n")
        wall, result = timed_grade(variant, config, work / "variant", args.backend)
        report("cold new submission", wall, result)
        (work / "installed").mkdir()
        installed = config_with_cache(work / "installed-cache", work / "installed")
        prepared = subprocess.run([sys.executable, "-m", "grader", "prepare", "--config", str(installed), "--backend",
                                   args.backend], capture_output=True, text=True, cwd=ROOT)
        if prepared.returncode != 0:
            print(f"grade prepare: exit {prepared.returncode} ({(prepared.stderr or prepared.stdout).strip()[-200:]})")
        wall, result = timed_grade(submission, installed, work / "installed-run", args.backend)
        report("cold after install (grade prepare)", wall, result)


if __name__ == "__main__":
    main()
