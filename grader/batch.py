"""`grade batch`: a whole class in one command, without losing a result when something breaks.

intake → one grade() per student, several at once → each result written atomically as it finishes →
the class-wide files, all rendered from the stored results. Submissions run in parallel worker processes,
each with its own child, so compiles, static checks and judging use every core; correctness runs share a
GPU; a timed run holds its GPU's lock file, so two are never timed at once on one GPU. `--resume` skips every student
whose stored result has the same fingerprint (their kernel, the config, cases, reference and grader).
"""
from __future__ import annotations

import functools
import glob
import hashlib
import json
import multiprocessing
import os
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import __version__
from .cases import Case
from .config import Config
from .intake import Entry, Intake, Refusal, discover
from .pipeline import GPU, RunPlan, grade, not_graded
from .report.exports import ExportOptions, class_files
from .report.json_report import to_json
from .report.junit_report import to_junit_xml
from .result import SUBMISSION_ERROR, SubmissionResult
from .runner import FileLock, Placement

STUDENTS = "students"  # per-student files, each written when that student is done


@dataclass
class BatchOptions:
    outdir: Path
    resume: bool = False
    force: bool = False
    jobs: int = 0  # 0: one per CPU core
    exports: ExportOptions = field(default_factory=ExportOptions)


@dataclass
class BatchOutcome:
    results: list[SubmissionResult]
    graded_now: int
    reused: int
    interrupted: bool = False


@functools.cache
def grader_digest() -> str:
    """The grader's own code, hashed: any change to it (an upgrade, a fix) makes --resume grade again,
    which a version string that nobody bumps would not."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".h", ".cpp"):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def fingerprint(config: Config, cases: list[Case], backend: str | None, source: bytes) -> str:
    """Everything a grade depends on; a stored result with the same fingerprint is still right."""
    digest = hashlib.sha256()
    for part in (grader_digest(), backend or "none", Path(config.source).read_bytes() if config.source else b"",
                 config.reference_path.read_bytes(), json.dumps([vars(c) for c in cases], sort_keys=True), source):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def run_batch(paths: list[Path], config: Config, cases: list[Case], plan: RunPlan, options: BatchOptions,
              console: Console) -> BatchOutcome:
    outdir = options.outdir
    (outdir / STUDENTS).mkdir(parents=True, exist_ok=True)
    intake = discover(paths, outdir / "submissions")
    _write_intake_notes(intake, outdir)
    rows: dict[str, SubmissionResult] = {}
    for refusal in intake.refused:
        if refusal.key:
            rows[refusal.key] = _refused(refusal, config, cases)
            _store(rows[refusal.key], outdir, refusal.key)
    todo: list[tuple[Entry, str]] = []
    for entry in intake.submissions:
        mark = fingerprint(config, cases, plan.backend, entry.kernel.read_bytes())
        stored = None if options.force or not options.resume else _stored(outdir, entry.key, mark)
        if stored is not None:
            rows[entry.key] = stored
        else:
            todo.append((entry, mark))
    reused = len(rows) - sum(1 for r in intake.refused if r.key)
    graded, interrupted = _grade_all(todo, config, cases, plan, options, console, rows)
    _add_intake(intake, rows, outdir)
    results = [rows[key] for key in sorted(rows)]
    if not interrupted:
        write_class_files(results, outdir, options.exports)
    return BatchOutcome(results, graded, reused, interrupted)


def _add_intake(intake: Intake, rows: dict[str, SubmissionResult], outdir: Path) -> None:
    """What intake knows of each student (gradebook ids, which file it took, what it refused) goes into their
    stored result, so every export can render it from the results alone; stored again only where it changed."""
    for entry in intake.submissions:
        result = rows.get(entry.key)
        if result is None:
            continue  # interrupted before this student was graded
        known = {"canvas_user_id": entry.canvas_user_id, "sis_user_id": entry.sis_user_id,
                 "sis_login_id": entry.sis_login_id, "intake_notes": list(entry.notes)}
        if any(getattr(result, name) != value for name, value in known.items()):
            for name, value in known.items():
                setattr(result, name, value)
            _store(result, outdir, entry.key)


def _grade_all(todo, config, cases, plan, options, console, rows) -> tuple[int, bool]:
    """Each submission in a worker process of its own (no lock shared on the parent's side: the judging of
    outputs is numpy work that threads would serialise); every result is stored by the worker that made it."""
    jobs = options.jobs or os.cpu_count() or 2
    placements = _placements(plan, options.outdir)
    counts = {"pass": 0, "fail": 0, "error": 0}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    # Spawned, not forked: the parent has threads (the progress bar's), and a fork would copy their locks.
    context = multiprocessing.get_context("spawn")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")  # many workers: a few BLAS threads each
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(_describe(counts), total=len(todo))
        pending: dict[Future, str] = {
            pool.submit(grade_and_store, entry, mark, config, cases,
                        replace(plan, placement=placements[i % len(placements)]), options.outdir): entry.key
            for i, (entry, mark) in enumerate(todo)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    key = pending.pop(future)
                    rows[key] = future.result()
                    counts[_outcome(rows[key])] += 1
                    progress.update(task, advance=1, description=_describe(counts))
        except KeyboardInterrupt:
            # Workers die at once, before they can store anything; their children die with them.
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            return len(todo) - len(pending), True
    pool.shutdown()
    return len(todo), False


def grade_and_store(entry: Entry, mark: str, config: Config, cases: list[Case], plan: RunPlan,
                    outdir: Path) -> SubmissionResult:
    """Runs in a worker process: grade one student and store their files before reporting back."""
    result = grade(entry.path, config, cases, plan)
    result.student_id, result.student_name, result.fingerprint = entry.student_id, entry.student_name, mark
    _store(result, outdir, entry.key)
    return result


def _placements(plan: RunPlan, outdir: Path) -> list[Placement]:
    """One placement per GPU (round robin), each with the lock file that serialises timing on it."""
    if plan.backend != GPU:
        return [Placement()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = ([int(g) for g in visible.split(",") if g.strip().isdigit()] if visible
            else list(range(len(glob.glob("/dev/nvidia[0-9]*")))))
    return [Placement(gpu=g, timing_lock=FileLock(outdir / f".timing-gpu{g}.lock")) for g in gpus or [0]]


def _outcome(result: SubmissionResult) -> str:
    if result.status == SUBMISSION_ERROR or any(c.kind == "compile" and c.status == "error" for c in result.checks):
        return "error"
    return "pass" if result.score >= result.max_score else "fail"


def _describe(counts: dict[str, int]) -> str:
    return (f"[green]{counts['pass']} full marks[/] [red]{counts['fail']} lost points[/] "
            f"[magenta]{counts['error']} errors[/]")


def _refused(refusal: Refusal, config: Config, cases: list[Case]) -> SubmissionResult:
    result = not_graded(Path(refusal.key), config, cases, f"not graded: {refusal.reason}")
    result.submission, result.student_id, result.student_name = refusal.key, refusal.student_id, refusal.student_name
    return result


# --- files ------------------------------------------------------------------------------------------------


def _store(result: SubmissionResult, outdir: Path, key: str) -> None:
    """The student's files, each replaced atomically; the JSON last, as the mark that the result is whole."""
    folder = outdir / STUDENTS
    if result.log.strip():
        _atomic_write(folder / f"{key}.log", result.log)
    _atomic_write(folder / f"{key}.junit.xml", to_junit_xml([result]))
    _atomic_write(folder / f"{key}.json", to_json(result))


def _stored(outdir: Path, key: str, mark: str) -> SubmissionResult | None:
    path = outdir / STUDENTS / f"{key}.json"
    try:
        result = SubmissionResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None  # missing, or not ours: grade again
    return result if result.fingerprint == mark else None


def write_class_files(results: list[SubmissionResult], outdir: Path, options: ExportOptions) -> None:
    """Every class export of the one table (report/exports.py), each file replaced atomically."""
    for name, content in class_files(results, options).items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, content)


def _write_intake_notes(intake: Intake, outdir: Path) -> None:
    lines = [*intake.notes, *(f"refused: {refusal.message}" for refusal in intake.refused)]
    _atomic_write(outdir / "intake.txt", "\n".join(lines) + "\n" if lines else "")


def _atomic_write(path: Path, content: str | bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    if isinstance(content, bytes):
        temporary.write_bytes(content)
    else:
        temporary.write_text(content, encoding="utf-8")
    os.replace(temporary, path)
