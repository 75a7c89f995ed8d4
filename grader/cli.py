"""The `grade` command.

    grade PATH [PATH ...]                 grade submissions, print each, write JSON and JUnit XML per submission
    grade batch PATH [PATH ...]           a whole class: folders, LMS zips, Gradescope exports; --resume
    grade gradescope SUBMISSION RESULTS   the Gradescope autograder entry (run_autograder calls it)
    grade prairielearn SUBMISSION RESULTS the PrairieLearn external-grader entry

Exit codes: 0 whenever grading ran (whatever the score), 1 below --fail-under, 2 for misuse, 130 on Ctrl-C.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from .batch import BatchOptions, run_batch
from .cases import load_cases, mix_seed, with_secret
from .config import load_config
from .errors import UsageError
from .execute.cpu.build import compiler
from .execute.gpu_detect import gpu_unavailable_reason
from .execute.sandbox import SandboxUnavailable, detect
from .pipeline import CPU, CPU_NOTE, GPU, RunPlan, grade
from .report import render, write_json, write_junit
from .report.gradescope import write_gradescope
from .report.prairielearn import write_prairielearn
from .report.status import status_label
from .result import SubmissionResult
from .submission import locate

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
SECRET_VARIABLE = "SGEMM_GRADER_SECRET"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="grader configuration (default: the project's config.yaml)")
    parser.add_argument("--secret-file", type=Path, default=None, metavar="FILE",
                        help=f"mix this secret into every seed (default: ${SECRET_VARIABLE}, if set); "
                             "for graded runs, so inputs cannot be known in advance")
    parser.add_argument("--backend", choices=("gpu", "cpu", "auto"), default="auto",
                        help="gpu: require a GPU; cpu: emulate the kernel on the CPU (correctness only, no timing); "
                             "auto (default): the GPU when there is one, otherwise the CPU")
    parser.add_argument("--no-run", action="store_true",
                        help="static check and compilation only; the GPU checks are reported as skipped")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="where no sandbox can be built (no user namespaces and not root), run student code "
                             "with your own powers anyway; every report then says so. Only for your own code")
    parser.add_argument("--sanitize", action=argparse.BooleanOptionalAction, default=None,
                        help="also run compute-sanitizer (racecheck, memcheck, synccheck) on a small shape and "
                             "explain what it finds (GPU only; default: on in batch, off otherwise)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in ("batch", "gradescope", "prairielearn") else "grade"
    rest = argv[1:] if command != "grade" else argv
    parser = argparse.ArgumentParser(prog="grade" if command == "grade" else f"grade {command}",
                                     description="Grade tiled-SGEMM CUDA submissions.")
    if command in ("gradescope", "prairielearn"):
        parser.add_argument("submission", type=Path, help="the folder the LMS put the student's files in")
        parser.add_argument("results", type=Path, help="where the LMS reads results.json")
    else:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                            help="a folder holding kernel.cu, or the .cu file itself" if command == "grade" else
                            "a folder of student folders, a class zip (Canvas, Gradescope export), or one student")
        parser.add_argument("-o", "--output", type=Path, default=Path("results"), metavar="OUTDIR",
                            help="where the result files go (default: results/)")
    _common(parser)
    if command == "grade":
        parser.add_argument("--fail-under", type=float, default=None, metavar="SCORE",
                            help="exit with 1 when a submission scores below SCORE")
    if command == "batch":
        again = parser.add_mutually_exclusive_group()
        again.add_argument("--resume", action="store_true",
                           help="grade only students with no stored result for this kernel and configuration")
        again.add_argument("--force", action="store_true", help="grade everyone again")
        parser.add_argument("--jobs", type=int, default=0, metavar="N",
                            help="submissions graded at once (default: one per CPU core)")
        parser.add_argument("--assignment", default="SGEMM lab", metavar="TITLE",
                            help="the Canvas assignment column title in canvas.csv")
    args = parser.parse_args(rest)
    args.command = command
    return args


def load_secret(path: Path | None) -> str:
    """The instructor's secret; the children never see it (their environment is allow-listed)."""
    if path is None:
        return os.environ.get(SECRET_VARIABLE, "")
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"--secret-file {path}: {exc.strerror}") from None


def run_plan(args: argparse.Namespace) -> RunPlan:
    try:
        sandbox = detect(allow_unsafe=args.unsafe_no_sandbox)
    except SandboxUnavailable as exc:
        raise UsageError(str(exc)) from None
    return replace(_backend_plan(args), sandbox=sandbox)


def _backend_plan(args: argparse.Namespace) -> RunPlan:
    if args.no_run:
        return RunPlan(None, "not run: --no-run asks for the static check and compilation only")
    gpu_missing = gpu_unavailable_reason()
    if args.backend == GPU or (args.backend == "auto" and gpu_missing is None):
        if gpu_missing is not None:
            raise UsageError(f"--backend gpu: {gpu_missing}")
        sanitize = args.command == "batch" if args.sanitize is None else args.sanitize
        return RunPlan(GPU, sanitize=sanitize)
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
        secret = load_secret(args.secret_file)
        if secret:
            cases = with_secret(cases, secret)
            config.timing.seed = mix_seed(config.timing.seed, secret)
        plan = run_plan(args)
    except UsageError as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        return EXIT_USAGE
    if args.command == "batch":
        return grade_batch(args, config, cases, plan, console, errors)
    if args.command in ("gradescope", "prairielearn"):
        return lms_entry(args, config, cases, plan)
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


def grade_batch(args, config, cases, plan, console: Console, errors: Console) -> int:
    options = BatchOptions(args.output, resume=args.resume, force=args.force, jobs=args.jobs,
                           assignment=args.assignment)
    outcome = run_batch(args.paths, config, cases, plan, options, console)
    if outcome.interrupted:
        errors.print(f"[bold red]interrupted[/]: {outcome.graded_now} submissions graded and saved in "
                     f"{args.output}/students; run the same command with --resume to grade the rest", highlight=False)
        return EXIT_INTERRUPTED
    statuses = Counter(status_label(r) for r in outcome.results)
    console.print(f"{len(outcome.results)} students: {outcome.graded_now} graded now, {outcome.reused} kept from "
                  f"earlier runs; " + ", ".join(f"{n} {label}" for label, n in sorted(statuses.items())))
    console.print(f"grades: {args.output / 'grades.csv'}, Canvas: {args.output / 'canvas.csv'}, "
                  f"JUnit: {args.output / 'junit.xml'}, summary: {args.output / 'summary' / 'index.html'}")
    return EXIT_OK


def lms_entry(args, config, cases, plan) -> int:
    """One submission for an LMS: the results file is always written, whatever happened."""
    started = time.perf_counter()
    result = grade(args.submission, config, cases, plan)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    if args.command == "gradescope":
        write_gradescope(result, args.results, execution_time=time.perf_counter() - started)
    else:
        write_prairielearn(result, args.results)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
