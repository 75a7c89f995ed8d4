"""Wall time of `grade` on one submission, cold and warm compile cache (target: < 3 s cold on an H100).

Usage: python3 bench/grade_time.py [SUBMISSION]   (default: the reference kernel as a submission)
Prints one line per run; run it on the GPU machine.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT, config_with_cache

TARGET_S = 3.0


def timed_grade(submission: Path, config: Path, out: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", str(submission), "-o", str(out), "--config", str(config),
                    "--backend", "gpu"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - started
    return wall, json.loads(next(out.glob("*.json")).read_text())


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        submission = Path(sys.argv[1]) if len(sys.argv) > 1 else work / "reference_as_submission"
        if len(sys.argv) == 1:
            submission.mkdir()
            shutil.copy(ROOT / "reference" / "kernel.cu", submission / "kernel.cu")
        config = config_with_cache(work / "cache", work)
        for label in ("cold cache", "warm cache"):
            out = work / label.replace(" ", "_")
            wall, result = timed_grade(submission, config, out)
            timing = next(c for c in result["checks"] if c["kind"] == "timing")
            compiled = next(c for c in result["checks"] if c["kind"] == "compile")
            verdict = "meets" if wall < TARGET_S else "MISSES"
            print(f"{label}: grade wall {wall:.2f} s ({verdict} the {TARGET_S:g} s target); "
                  f"score {result['score']}/{result['max_score']}; grading {result['duration_s']:.2f} s, of it "
                  f"child ready (imports, context, compile) {compiled['metrics'].get('ready_after_s')} s, "
                  f"child done timing {timing['metrics'].get('done_after_s')} s")
            print(f"  timing: {timing['message'].splitlines()[0]}")


if __name__ == "__main__":
    main()
