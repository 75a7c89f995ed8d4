"""`grade PATH [PATH ...]`: grade submissions, print a summary, write JSON and JUnit XML per submission.

Exit codes: 0 whenever grading ran (whatever the score), 1 below --fail-under, 2 for misuse.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from .cases import load_cases
from .config import load_config
from .cpu.build import compiler
from .errors import UsageError
from .gpu_detect import gpu_unavailable_reason
from .pipeline import CPU, CPU_NOTE, GPU, RunPlan, grade
from .report import render, write_json, write_junit
from .result import SubmissionResult
from .submission import locate

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="grade", description="Grade tiled-SGEMM CUDA submissions.")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a folder holding kernel.cu, or the .cu file itself")
    parser.add_argument("-o", "--output", type=Path, default=Path("results"), metavar="OUTDIR",
                        help="where <name>.json and <name>.junit.xml go (default: results/)")
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="grader configuration (default: the project's config.yaml)")
    parser.add_argument("--backend", choices=("gpu", "cpu", "auto"), default="auto",
                        help="gpu: require a GPU; cpu: emulate the kernel on the CPU (correctness only, no timing); "
                             "auto (default): the GPU when there is one, otherwise the CPU")
    parser.add_argument("--no-run", action="store_true",
                        help="static check and compilation only; the GPU checks are reported as skipped")
    parser.add_argument("--fail-under", type=float, default=None, metavar="SCORE",
                        help="exit with 1 when a submission scores below SCORE")
    return parser.parse_args(argv)


def run_plan(args: argparse.Namespace) -> RunPlan:
    if args.no_run:
        return RunPlan(None, "not run: --no-run asks for the static check and compilation only")
    gpu_missing = gpu_unavailable_reason()
    if args.backend == GPU or (args.backend == "auto" and gpu_missing is None):
        if gpu_missing is not None:
            raise UsageError(f"--backend gpu: {gpu_missing}")
        return RunPlan(GPU)
    if compiler() is None:
        reason = "the CPU emulator needs a C++ compiler (g++), and none is on PATH"
        if args.backend == CPU:
            raise UsageError(f"--backend cpu: {reason}")
        return RunPlan(None, f"not run: {gpu_missing}, and {reason}. Only the static check and compilation ran")
    if args.backend == CPU:
        return RunPlan(CPU, note=CPU_NOTE)
    return RunPlan(CPU, note=f"{CPU_NOTE} ({gpu_missing})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console, errors = Console(), Console(stderr=True, soft_wrap=True)
    try:
        config = load_config(args.config)
        cases = load_cases(config.testcases_dir)
        plan = run_plan(args)
    except UsageError as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        return EXIT_USAGE
    code, names = EXIT_OK, set()
    for path in args.paths:
        if not path.exists():
            errors.print(f"[bold red]error:[/] {path}: no such file or folder", highlight=False)
            code = EXIT_USAGE
            continue
        try:
            result = grade(path, config, cases, plan)
        except KeyboardInterrupt:
            # The runner has already killed the child's process group; results so far are on disk.
            errors.print(f"[bold red]interrupted[/] while grading {path}", highlight=False)
            return EXIT_INTERRUPTED
        # Files first: a closed terminal (`grade ... | head`) must not cost the results.
        write_outputs(result, args.output, unique_name(locate(path)[0], names))
        render(result, console)
        if code == EXIT_OK and args.fail_under is not None and result.score < args.fail_under:
            code = EXIT_BELOW_THRESHOLD
    return code


def unique_name(name: str, taken: set[str]) -> str:
    """Two submissions named alike (a/sub, b/sub) must not overwrite each other's files."""
    candidate, counter = name, 1
    while candidate in taken:
        counter += 1
        candidate = f"{name}-{counter}"
    taken.add(candidate)
    return candidate


def write_outputs(result: SubmissionResult, outdir: Path, name: str) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    write_json(result, outdir / f"{name}.json")
    write_junit(result, outdir / f"{name}.junit.xml")
    if result.log.strip():
        # The child's raw output (printf, runtime messages) is for the instructor, not the summary.
        (outdir / f"{name}.log").write_text(result.log, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
