"""`grade batch`: a whole class in one command, without losing a result when something breaks.

intake → one grade() per student, each in a worker process of its own (batch_worker), several at once,
spread over the GPUs → each result written atomically by this process, the only one that writes results,
as it finishes → the class-wide files, all rendered from the stored results. Grading in a batch is
grading alone, side by side: every case, timing measurement and sanitizer launch has its GPU alone for
a short turn (execute/gpu/device_lock.py), and no wait for a turn or a CPU counts against a student. A
worker that dies costs its student a "grader error" row, which `--resume` grades again. `--resume` skips
every student whose stored result has the same fingerprint (their kernel, the config, cases, reference
and grader) and an intact signature (an HMAC with a key only the grader holds, so an edited result is
graded again). A stored result of the same submission graded by another grader, config or cases is never
passed off as this run's: it is listed (BatchOutcome.older) and graded again, or kept with --keep-older.
With --against, the class files also compare this grading with an earlier one (report/regrade.py).
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..cache_file import write_whole
from ..cases import Case, whole_truths
from ..config import Config
from ..diagnose.groups import GROUP_SIZE, SanitizerGroups
from ..execute.gpu.detect import local_gpus
from ..execute.runner import Placement
from ..intake.archive import refused_note, safe_name
from ..intake.intake import Entry, Intake, Refusal, discover
from ..judge import truths
from ..leftovers import Sweeper, clear_at_start
from ..pipeline import CPU, GPU, RunPlan, device_lock, not_graded, sandbox_of
from ..prepare import prepare
from ..provenance import class_provenance, grader_digest, sha256_of
from ..report.canvas_csv import RosterRow, roster_match
from ..report.exports import REGRADE_CSV, ExportOptions, class_files
from ..report.points import full_marks
from ..report.regrade import NOT_RECORDED, Regrade, compare, provenance_differences
from ..result import GRADER_ERROR, NEEDS_GPU_GRADE, Provenance, SubmissionResult
from .store import KEY_FILE, ResultStore
from .workers import Workers, emulator_share

STUDENTS = "students"  # per-student files, each written when that student is done


@dataclass
class BatchOptions:
    outdir: Path
    resume: bool = False
    force: bool = False
    jobs: int = 0  # 0: one per CPU core
    cluster: str = ""  # a Dask scheduler's address: each submission a task there (cluster.py); "" grades here
    security: object | None = None  # distributed.Security for a TLS cluster
    worker_wait_s: float = 60.0  # how long a cluster batch waits with no worker connected before it stops
    no_worker: bool = False  # a cluster batch none of whose workers joined in worker_wait_s: it stops at once
    exports: ExportOptions = field(default_factory=ExportOptions)
    keep_older: bool = False  # --resume keeps results of another grader or config (listed as kept)
    # --against: an earlier grading's results (read before this one stores anything), compared with this one
    previous: list[SubmissionResult] | None = None


@dataclass
class OlderResult:
    """A stored result of the same submission, graded with another grader, config or cases (--resume)."""

    key: str
    differences: list[str]  # what differs, in words (report/regrade.py's)
    kept: bool = False  # kept with --keep-older rather than graded again


@dataclass
class BatchOutcome:
    results: list[SubmissionResult]
    graded_now: int
    reused: int
    interrupted: bool = False
    stopped: str = ""  # why a cluster batch stopped before grading everyone (its workers were gone)
    older: list[OlderResult] = field(default_factory=list)  # --resume: graded again, or kept with --keep-older
    regrade: Regrade | None = None  # --against: who this grading changed, and why


def fingerprint(config: Config, cases: list[Case], backend: str | None, source: bytes) -> str:
    """Everything a grade depends on; a stored result with the same fingerprint is still right. The config as
    graded (a file's keys over the project's config.yaml), not the file alone: a change to either counts."""
    digest = hashlib.sha256()
    for part in (grader_digest(), backend or "none", json.dumps(asdict(config), sort_keys=True, default=str),
                 config.reference_path.read_bytes(), json.dumps([vars(c) for c in cases], sort_keys=True), source):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def run_batch(paths: list[Path], config: Config, cases: list[Case], plan: RunPlan, options: BatchOptions,
              console: Console) -> BatchOutcome:
    (options.outdir / STUDENTS).mkdir(parents=True, exist_ok=True)
    # What graders killed mid-grade left here (a cluster's workers clear their own): cleared now, and again
    # while this batch runs and at its end, however it ends (a run killed just before this one ends late).
    sweeper = Sweeper()
    for line in clear_at_start(sweeper.start()):
        console.print(line, highlight=False)
    try:
        return _run_batch(paths, config, cases, plan, options, console)
    finally:
        sweeper.stop()


def _run_batch(paths: list[Path], config: Config, cases: list[Case], plan: RunPlan, options: BatchOptions,
               console: Console) -> BatchOutcome:
    outdir = options.outdir
    intake = discover(paths, outdir / "submissions", handed_in=config.compile.handed_in_headers)
    _write_intake_notes(intake, outdir)
    rows: dict[str, SubmissionResult] = {}
    for refusal in intake.refused:
        if refusal.key:
            rows[refusal.key] = _refused(refusal, config, cases)
            results_of(outdir).put(refusal.key, rows[refusal.key])
    todo: list[tuple[Entry, str]] = []
    older: list[OlderResult] = []
    now = class_provenance(config, cases) if options.resume and not options.force else None
    for entry in intake.submissions:
        submitted = entry.submitted(config.compile.handed_in_headers)
        mark = fingerprint(config, cases, plan.backend, submitted)
        earlier = results_of(outdir).get(entry.key) if now is not None else None
        if earlier is not None and earlier.outcome != GRADER_ERROR and earlier.fingerprint == mark:
            rows[entry.key] = earlier
            continue
        other = _graded_otherwise(entry.key, earlier, now, plan.backend, submitted)
        if other is not None:
            older.append(other)
            if options.keep_older and earlier.provenance is not None:
                other.kept, rows[entry.key] = True, earlier
                continue
        todo.append((entry, mark))
    reused = len(rows) - sum(1 for r in intake.refused if r.key)
    graded, interrupted, stopped = _grade_all(todo, config, cases, plan, options, console, rows)
    _add_intake(intake, rows, outdir)
    rows.update(_roster_rows(options.exports.canvas.roster or [], rows, config, cases))
    results = [rows[key] for key in sorted(rows)]
    if not interrupted:
        write_class_files(results, outdir, replace(options.exports, previous=options.previous))
    regrade = compare(options.previous, results) if options.previous is not None and not interrupted else None
    return BatchOutcome(results, graded, reused, interrupted, stopped, older, regrade)


def _graded_otherwise(key: str, earlier: SubmissionResult | None, now: Provenance | None, backend: str | None,
                      submitted: bytes) -> OlderResult | None:
    """For --resume: a stored result of this very submission graded by another grader, config or cases (what
    differs), or None (nothing stored, a grader error, or the student handed in something else since)."""
    if earlier is None or now is None or earlier.outcome == GRADER_ERROR:
        return None
    if earlier.provenance is None:  # a grader from before records were kept: nobody can tell what differs
        return OlderResult(key, [f"what it was graded with: {NOT_RECORDED} (an earlier grader)"])
    if earlier.provenance.submission_sha256 != sha256_of(submitted):
        return None
    differences = provenance_differences(earlier.provenance, now)
    if earlier.backend != (backend or "none"):
        differences.append(f"backend: {earlier.backend} → {backend or 'none'}")
    return OlderResult(key, differences or ["the cases' seeds (another --secret-file?)"])


IDENTITY = ("student_id", "student_name", "canvas_user_id", "sis_user_id", "sis_login_id", "late")


def _identified(result: SubmissionResult, who: Entry | Refusal) -> bool:
    """What intake knows of the student (who they are to a gradebook, whether the LMS marked them late, which
    file it took and what it refused) set in their result, so every export renders it from the results alone,
    for a student refused as for one graded; whether anything changed."""
    known = {**{name: getattr(who, name) for name in IDENTITY}, "intake_notes": list(who.notes)}
    changed = any(getattr(result, name) != value for name, value in known.items())
    for name, value in known.items():
        setattr(result, name, value)
    return changed


def _add_intake(intake: Intake, rows: dict[str, SubmissionResult], outdir: Path) -> None:
    """Stored results kept from an earlier run get what this run's intake knows; stored again where it changed."""
    for entry in intake.submissions:
        result = rows.get(entry.key)
        if result is not None and _identified(result, entry):  # None: interrupted before it was graded
            results_of(outdir).put(entry.key, result)


def _grade_all(todo, config, cases, plan, options, console, rows) -> tuple[int, bool, str]:
    """Each submission in a worker process of its own (the judging of outputs is numpy work that threads
    would serialise); this process only waits, and stores each result the moment it arrives. Returns how
    many were graded, whether Ctrl-C stopped it, and why a cluster batch stopped early ("" if it did not)."""
    jobs = options.jobs or os.cpu_count() or 2
    placements = _placements(plan, config)
    if plan.backend is not None:  # once, here, rather than in every worker at once; only the cases that run
        if options.cluster:  # the workers' hosts build the emulator's own into their caches
            truths.warm(whole_truths(cases, plan.backend == GPU), config)
        else:  # what no student's grade should build (a failure here is said by each grade)
            prepare(config, whole_truths(cases, plan.backend == GPU), sandbox_of(plan), plan.backend == GPU,
                    inputs=cases)
    counts = {"pass": 0, "fail": 0, "held": 0, "error": 0}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    workers = Workers(_sanitizer_groups(plan, config, placements, options, jobs), forked=not options.cluster)
    pool, client = _executor(options, plan, jobs)
    from .cluster import WorkerWatch, grade_task, remote_task, task_result  # Dask: imported only for a cluster

    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(_describe(counts, plan.backend), total=len(todo))
        marks = {entry.key: mark for entry, mark in todo}

        def record(entry: Entry, result: SubmissionResult) -> None:
            _identified(result, entry)
            result.fingerprint = marks[entry.key]
            results_of(options.outdir).put(entry.key, result)
            rows[entry.key] = result
            counts[_outcome(result)] += 1
            progress.update(task, advance=1, description=_describe(counts, plan.backend))

        pending: dict[Future, Entry] = {}
        for i, (entry, _) in enumerate(todo):
            if client is not None:
                pending[pool.submit(grade_task, remote_task(entry, config, cases, plan))] = entry
            else:
                placed = replace(plan, placement=placements[i % len(placements)],
                                 emulator_workers=emulator_share(jobs))
                pending[pool.submit(workers.grade, entry, config, cases, placed)] = entry
        watch = WorkerWatch(client, options.cluster, options.worker_wait_s, progress.console.print,
                            options.no_worker) if client else None
        try:
            while pending:
                done, _ = wait(pending, timeout=watch.poll_s if watch else None, return_when=FIRST_COMPLETED)
                for future in done:
                    entry = pending.pop(future)
                    record(entry, task_result(future, entry, config, cases, "it will be graded again with --resume")
                           if client is not None else future.result())
                if watch is not None and not done and watch.gone_for_good():
                    for future, entry in pending.items():  # saved as not graded, graded again by --resume
                        future.cancel()
                        record(entry, not_graded(entry.path, config, cases, watch.reason(), GRADER_ERROR))
                    return len(todo) - len(pending), False, watch.stopped()
        except KeyboardInterrupt:
            # Workers die at once, before they can report anything; their sandboxes die with them.
            workers.stop()
            pool.shutdown(wait=False, cancel_futures=True)
            return len(todo) - len(pending), True, ""
        finally:
            if client is not None:
                client.close()  # every future is done or given up: nothing left for the executor to wait on
    if client is None:
        pool.shutdown()
        workers.close()
    return len(todo), False, ""


def _executor(options: BatchOptions, plan: RunPlan, jobs: int):
    """Where the submissions are graded: worker processes of this host, or a Dask cluster's workers."""
    if not options.cluster:
        return ThreadPoolExecutor(max_workers=jobs), None
    from .cluster import connect, task_resources

    client = connect(options.cluster, options.security)
    return client.get_executor(resources=task_resources(plan), pure=False), client


def _sanitizer_groups(plan: RunPlan, config: Config, placements: list[Placement], options: BatchOptions,
                      jobs: int) -> SanitizerGroups | None:
    """Where this host's workers check kernels under the sanitizer in groups (diagnose/groups.py). A
    group holds no more students than are graded at once: nobody waits for one who cannot come."""
    if plan.backend != GPU or not plan.sanitize or options.cluster:
        return None
    return SanitizerGroups(placements, sandbox_of(plan), config.cache_dir, size=min(GROUP_SIZE, max(1, jobs)))


def _placements(plan: RunPlan, config: Config) -> list[Placement]:
    """One placement per GPU (students go round robin), each with the lock that gives out its turns."""
    if plan.backend != GPU:
        return [Placement(lock=device_lock(config, CPU))]
    return [Placement(gpu=g, lock=device_lock(config, g)) for g in local_gpus() or [0]]


def _outcome(result: SubmissionResult) -> str:
    if not result.graded or any(c.kind == "compile" and c.status == "error" for c in result.checks):
        return "error"
    if result.outcome == NEEDS_GPU_GRADE:
        return "held"  # its CPU score is not its grade: neither full marks nor points lost
    return "pass" if full_marks(result) else "fail"  # without a GPU, every point it could check


def _describe(counts: dict[str, int], backend: str | None) -> str:
    held = f" [cyan]{counts['held']} need a GPU grade[/]" if counts["held"] else ""
    # Without a GPU, timing and the large cases are not checked: full marks are every point that could be.
    checkable = " (of the points checkable without a GPU)" if backend == CPU else ""
    return (f"[green]{counts['pass']} full marks[/]{checkable} [red]{counts['fail']} lost points[/]{held} "
            f"[magenta]{counts['error']} errors[/]")


def _refused(refusal: Refusal, config: Config, cases: list[Case]) -> SubmissionResult:
    result = not_graded(Path(refusal.key), config, cases, f"not graded: {refusal.reason}")
    result.submission = refusal.key
    _identified(result, refusal)
    # Why they are not graded comes first in their notes, so grades.csv's "intake notes" cell says it too.
    result.intake_notes.insert(0, refused_note(refusal.entry or refusal.source, refusal.reason))
    return result


NO_SUBMISSION = "no submission: on the roster (--roster), nothing of theirs was handed in"


def _roster_rows(roster: list[RosterRow], rows: dict[str, SubmissionResult], config: Config,
                 cases: list[Case]) -> dict[str, SubmissionResult]:
    """A "submission error" row for each roster student no submission matched: a roster line names a student,
    who is then a row in every class file. Not stored in students/: the roster given to each run makes them."""
    matched = {roster_match(result, roster) for result in rows.values()}
    taken = {key.casefold() for key in rows}
    added: dict[str, SubmissionResult] = {}
    for row in roster:
        if row in matched:
            continue
        key = base = safe_name(f"{row.student}_{row.canvas_id}")
        n = 1
        while key.casefold() in taken:
            n += 1
            key = f"{base}-{n}"
        taken.add(key.casefold())
        result = not_graded(Path(key), config, cases, NO_SUBMISSION)
        result.submission, result.student_id, result.student_name = key, row.canvas_id, row.student
        result.canvas_user_id, result.sis_user_id = row.canvas_id, row.sis_user_id
        result.sis_login_id = row.sis_login_id
        result.intake_notes = [NO_SUBMISSION]
        added[key] = result
    return added


# --- files ------------------------------------------------------------------------------------------------


def results_of(outdir: Path) -> ResultStore:
    """The batch's store: outdir/students/, signed with outdir/.results-key."""
    return ResultStore(outdir / STUDENTS, outdir / KEY_FILE)


def write_class_files(results: list[SubmissionResult], outdir: Path, options: ExportOptions) -> None:
    """Every class export of the one table (report/exports.py), each file replaced atomically; a regrade.csv
    of an earlier --against run is removed when this one compares nothing (it would describe other results)."""
    if options.previous is None:
        (outdir / REGRADE_CSV).unlink(missing_ok=True)
    for name, content in class_files(results, options).items():
        path = outdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, content)


def _write_intake_notes(intake: Intake, outdir: Path) -> None:
    lines = [*intake.notes, *(f"refused: {refusal.message}" for refusal in intake.refused)]
    write_whole(outdir / "intake.txt", "\n".join(lines) + "\n" if lines else "")
