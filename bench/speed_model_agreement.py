"""Does the speed model agree with the GPU? (issue 49) On a GPU host: every corpus kernel (tests/submissions,
tests/feedback_kernels) graded twice in batches, on the GPU (its timing check measures the ratio) and on the
CPU emulator (the speed model estimates it), each under the config it is graded with (the presets' kernels
under their preset); then one row per kernel both engines timed: the measured ratio, the modelled one, both
verdicts, and whether they contradict (the model passes what the GPU fails, or fails what it passes; held
never contradicts).

Usage: python3 bench/speed_model_agreement.py [--json FILE] [--jobs N] [NAME ...]
Prints the table and "N kernels, C contradict, H held"; exits 1 on a contradiction (2 when nothing was timed).
About 3–5 minutes on an H200 host with 16 cores (two batches per config, sanitizer off).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import ROOT

from grader.result import FAILED, PASSED, SKIPPED, TIMING, SubmissionResult

CORPUS = [ROOT / "tests" / "submissions", ROOT / "tests" / "feedback_kernels"]
# Kernels graded under another config than the project's (tests/submissions/README.md): the presets' own, and
# a launch over rows.
PRESET_KERNELS = {"ece408": ["ece408_mp3", "ece408_matrix_multiply"], "pmpp": ["pmpp_square"]}
ROWS_KERNELS = ["launch_x_rows"]
MEASURED = {PASSED: "pass", FAILED: "fail"}


def kernels(names: list[str]) -> dict[str, Path]:
    """Every corpus folder with a kernel.cu (a name in two corpora: the feedback kernel gets a prefix)."""
    found = {}
    for corpus in CORPUS:
        for folder in sorted(p for p in corpus.iterdir() if (p / "kernel.cu").is_file()):
            name = folder.name if folder.name not in found else f"{corpus.name}/{folder.name}"
            if not names or name in names or folder.name in names:
                found[name] = folder
    return found


def configs(work: Path) -> dict[str, list[str]]:
    """--config/--preset arguments per group of kernels: the project's config, each preset, the rows launch."""
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    (work / "rows.yaml").write_text(text.replace("    x: columns", "    x: rows"))
    (work / "default.yaml").write_text(text)
    return {"default": ["--config", str(work / "default.yaml")], "rows": ["--config", str(work / "rows.yaml")],
            **{preset: ["--preset", preset] for preset in PRESET_KERNELS}}


def group_of(name: str) -> str:
    for preset, names in PRESET_KERNELS.items():
        if name in names:
            return preset
    return "rows" if name in ROWS_KERNELS else "default"


def grade_class(folder: Path, out: Path, config: list[str], backend: str, jobs: int) -> dict[str, SubmissionResult]:
    command = [sys.executable, "-m", "grader", "batch", str(folder), "-o", str(out), *config, "--backend", backend,
               "--no-sanitize", "--force", "--jobs", str(jobs)]
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return {path.stem: SubmissionResult.from_dict(json.loads(path.read_text()))
            for path in (out / "students").glob("*.json")}


def timing_of(result: SubmissionResult | None):
    return next((check for check in result.checks if check.kind == TIMING), None) if result else None


def row(name: str, gpu: SubmissionResult | None, cpu: SubmissionResult | None) -> dict | None:
    """One kernel's measured and modelled timing; None when the GPU did not time it (its cases failed)."""
    measured, modelled = timing_of(gpu), timing_of(cpu)
    if measured is None or measured.status not in MEASURED or "ratio" not in measured.metrics:
        return None
    estimate = modelled.metrics.get("modelled_ratio") if modelled else None
    if estimate is None:
        model = "none"  # the emulator could not estimate (its cases failed, or no profile): no verdict to compare
    else:
        model = {PASSED: "pass", FAILED: "fail", SKIPPED: "held"}[modelled.status]
    gpu_verdict = MEASURED[measured.status]
    contradicts = model in ("pass", "fail") and model != gpu_verdict
    return {"kernel": name, "measured": measured.metrics["ratio"], "modelled": estimate, "gpu": gpu_verdict,
            "model": model, "contradicts": contradicts}


def agreement(names: list[str] | None = None, jobs: int = 0) -> list[dict]:
    """The table's rows, every corpus kernel (or those named) graded on both engines."""
    found = kernels(names or [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-model-") as work:
        work = Path(work)
        arguments = configs(work)
        for group, config in arguments.items():
            members = {name: folder for name, folder in found.items() if group_of(name) == group}
            if not members:
                continue
            folder = work / group / "class"
            for name, source in members.items():
                shutil.copytree(source, folder / name.replace("/", "_"))
            graded = {backend: grade_class(folder, work / group / backend, config, backend, jobs or 16)
                      for backend in ("gpu", "cpu")}
            for name in members:
                key = name.replace("/", "_")
                made = row(name, graded["gpu"].get(key), graded["cpu"].get(key))
                if made:
                    rows.append(made)
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'kernel':34} {'measured':>9} {'modelled':>9}  {'GPU':5} {'model':5} contradiction"]
    for r in sorted(rows, key=lambda r: r["measured"]):
        modelled = f"{r['modelled']:.2f}×" if r["modelled"] is not None else "-"
        lines.append(f"{r['kernel']:34} {r['measured']:8.2f}× {modelled:>9}  {r['gpu']:5} {r['model']:5} "
                     f"{'CONTRADICTS' if r['contradicts'] else ''}")
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    contradict = sum(r["contradicts"] for r in rows)
    held = sum(r["model"] == "held" for r in rows)
    unestimated = sum(r["model"] == "none" for r in rows)
    said = f"{len(rows)} kernels, {contradict} contradict, {held} held"
    return said + (f" ({unestimated} with no estimate)" if unestimated else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these corpus kernels")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--jobs", type=int, default=0, help="submissions graded at once (default 16)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = agreement(args.names, args.jobs)
    print(table(rows))
    print(f"{summary(rows)} ({time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if not rows:
        return 2
    return 1 if any(r["contradicts"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
