"""The `grade` command.

    grade PATH [PATH ...]                 grade submissions, print each, write JSON and JUnit XML per submission
    grade batch PATH [PATH ...]           a whole class: folders, LMS zips, Gradescope exports; --resume, --against
    grade diff OLD NEW                    two gradings of a class compared: who changed, and why
    grade reproduce RESULT.json SUBMISSION  grade again; does every verdict match, and if not why
    grade prepare                         build what every grade shares into the cache (install, LMS image set-up)
    grade gradescope SUBMISSION RESULTS   the Gradescope autograder entry (run_autograder calls it)
    grade prairielearn SUBMISSION RESULTS the PrairieLearn external-grader entry
    grade serve --tokens FILE             the grading service: LMS containers post archives over HTTP
    grade cluster-certs DIR               a Dask cluster's CA and certificates (mutual TLS)
    grade scheduler --certs DIR           the cluster's Dask scheduler, requiring those certificates
    grade worker --scheduler tls://…      Dask workers grading on this host's GPUs

Exit codes (docs/instructors.md lists them): 0 whenever grading ran (whatever the score), 1 below --fail-under (or
`grade prepare` could not make a build),
2 for misuse (and optional libraries not installed), 3 when a cluster batch stopped because no worker was
connected for --worker-wait, 4 when `grade PATH` could not grade a submission, 5 when --remote got no grade,
6 when a regrade lowered a student's total (batch --against, diff), 7 when `grade reproduce` did not reproduce
every verdict, 130 on Ctrl-C. Every code but 0 comes with a line on stderr saying why and what to do.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .cases import load_cases, mix_seed, whole_truths, with_secret
from .config import load_config, preset_names, preset_path
from .errors import UsageError
from .phases import Phases, describe, merged, since_process_start
from .regrade_commands import DIFF, REPRODUCE
from .report.gradescope import DEFAULT_HIDDEN_VISIBILITY, HIDDEN_VISIBILITIES
from .report.points import HOLD, WITHOUT_GPU, format_points, run_gpu_note, run_total
from .result import GRADER_ERROR, SUBMISSION_ERROR, SubmissionResult

# What only some commands or a later stage of a grade use is imported where it is used (issue 50): `grade PATH`
# starts its children before the pipeline, Rich and the reporters, the class's and the cluster's modules are imported.
if TYPE_CHECKING:
    from rich.console import Console

    from .execute.spawn import EarlyChildren
    from .pipeline import RunPlan
    from .report.canvas_csv import RosterRow
    from .report.exports import ExportOptions

EXIT_OK, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_NOT_GRADED = 4  # `grade PATH`: not graded (no kernel.cu, an empty or binary one; a submission error)
EXIT_NO_WORKERS = 3  # a cluster batch stopped: no worker was connected for --worker-wait
EXIT_REMOTE_NOT_GRADED = 5  # --remote: the service gave no grade; the results file says it is not one
SECRET_VARIABLE = "SGEMM_GRADER_SECRET"
# The LMS entries' commands (report/exports.py's LMS_ENTRIES, imported where one runs: the exports are no grade's)
LMS_COMMANDS = ("gradescope", "prairielearn")


# Every command, one line each: `grade --help` lists them; each one's own --help gives its options.
COMMANDS = {
    "grade": "grade submissions: a folder holding kernel.cu, or the .cu file",
    "batch": "grade a class: a folder of student folders, a Canvas or Gradescope zip, with the class's files",
    "prepare": "build what every grade of this grader and config shares into the cache (the CPU emulator's "
               "harness, the reference's emulation, the cases' truths), so no student waits for it",
    "gradescope": "grade one submission inside Gradescope's autograder (writes results.json)",
    "prairielearn": "grade one submission inside PrairieLearn's external grader (writes results.json)",
    "diff": DIFF,
    "reproduce": REPRODUCE,
    "serve": "the grading service LMS containers send submissions to (--remote)",
    "cluster-certs": "make the TLS certificates of a grading cluster, one role each",
    "scheduler": "the cluster's Dask scheduler, on TLS",
    "worker": "this host's Dask workers for a cluster's batches (one per GPU)",
}


def _sentence(line: str) -> str:
    """A command's line as its --help's description: a capital first letter, the rest as written (not
    str.capitalize, which writes canvas, gradescope and gpu for Canvas, Gradescope and GPU)."""
    return line[:1].upper() + line[1:] + "."


def _commands_epilog() -> str:
    lines = [f"  grade {'PATH ...' if name == 'grade' else name:<15} {what}" for name, what in COMMANDS.items()]
    return "commands (`grade COMMAND --help` for each one's options):\n" + "\n".join(lines)


def _common(parser: argparse.ArgumentParser) -> None:
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="grader configuration (default: the project's config.yaml)")
    chosen.add_argument("--preset", default=None, metavar="NAME",
                        help=f"a configuration shipped in presets/: {', '.join(preset_names())}")
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
                        help="compute-sanitizer's diagnosis (racecheck, memcheck, synccheck; GPU only, worth no "
                             "points). Default: where it sees what the CPU emulator cannot (a case that faulted on "
                             "the GPU, or hung there where the emulator did not hang too; a kernel the emulator "
                             "cannot build); --sanitize: on every kernel, a hung one too; "
                             "--no-sanitize: no diagnosis (the tools still judge the cases of a kernel the emulator "
                             "cannot build)")
    parser.add_argument("--profile", action="store_true",
                        help="also measure the kernel and the reference with Nsight Compute (ncu) on the timing "
                             "shape and say how to make it faster (GPU only; a second or two per submission)")


def _tls_options(group) -> None:
    group.add_argument("--certs", type=Path, default=None, metavar="DIR",
                       help="the cluster's TLS certificates (`grade cluster-certs DIR`): the CA and this side's "
                            "certificate and key")
    group.add_argument("--tls-ca-file", type=Path, default=None, metavar="FILE", help="TLS: the CA certificate")
    group.add_argument("--tls-cert", type=Path, default=None, metavar="FILE", help="TLS: this side's certificate")
    group.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="TLS: this side's private key")
    group.add_argument("--insecure", action="store_true",
                       help="allow a plain tcp:// scheduler: no TLS, and anyone who reaches it runs code on the "
                            "workers. Only on a network nobody else can reach")


def _misuse(error: UsageError) -> int:
    say_error(error_console(), error)
    return EXIT_USAGE


def say_error(errors: Console, error: UsageError | str) -> None:
    from .report.terminal import say_error as said

    said(errors, error)


def error_console() -> Console:
    """stderr, for everything but the results."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


# What each optional part of the grader imports, and the pyproject extra that installs it.
EXTRAS = {"cluster": ("distributed", "cryptography"), "serve": ("fastapi", "uvicorn")}


def require_extra(command: str, extra: str) -> None:
    """Refuse, with the command that installs them, a command whose optional libraries are not installed
    (the README's install has no extras): one line, not a traceback from deep inside the command."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            raise UsageError(f"{command} needs the grader's {extra} libraries ({module} is not installed): "
                             f"pip install -e '.[{extra}]'") from None


def worker_main(argv: list[str]) -> int:
    """`grade worker --scheduler ADDRESS`: Dask workers for this host's GPUs (or its CPU emulator)."""
    parser = argparse.ArgumentParser(prog="grade worker", description=_sentence(COMMANDS["worker"]))
    parser.add_argument("--scheduler", required=True, metavar="ADDRESS", help="tls://HOST:8786 (tcp:// with "
                                                                              "--insecure)")
    parser.add_argument("--slots", type=int, default=0, metavar="N",
                        help="submissions each GPU's worker grades at once (default: CPU cores / GPUs); the "
                             "GPU's lock still gives out timing turns one at a time")
    parser.add_argument("--listen", default="", metavar="HOST",
                        help="the address the workers listen on, which the scheduler must reach (default: every "
                             "interface)")
    _tls_options(parser)
    args = parser.parse_args(argv)
    from .classroom.cluster import run_until_stopped, worker_commands
    from .classroom.cluster_tls import checked_files
    from .execute.gpu.detect import local_gpus
    from .leftovers import WORKER, clear_at_start, owned_scratch

    try:
        require_extra("grade worker", "cluster")
        files = checked_files(args.scheduler, "worker", args.certs, args.tls_ca_file, args.tls_cert, args.tls_key,
                              args.insecure, "--scheduler")
    except UsageError as exc:
        return _misuse(exc)
    tls = [] if files is None else [item for flag, path in zip(("--tls-ca-file", "--tls-cert", "--tls-key"), files)
                                    for item in (flag, str(path))]
    for line in [*clear_at_start(), _sandbox_words()]:
        print(f"grade worker: {line}", file=sys.stderr, flush=True)
    gpus = local_gpus()
    cores = os.cpu_count() or 2
    slots = args.slots or max(1, cores // max(len(gpus), 1))
    with owned_scratch(WORKER) as local:  # Dask's files: removed when it stops, by the next start after kill -9
        return run_until_stopped(worker_commands(args.scheduler, gpus, slots, cores, tls, args.listen, local))


def _sandbox_words() -> str:
    """Where a worker runs student code: this host's sandbox, said once at its start (a service or batch on
    a cluster does not know it)."""
    from .execute.confine.sandbox import SandboxUnavailable, detect

    try:
        sandbox = detect()
    except SandboxUnavailable as exc:
        return f"no sandbox can run student code here: {exc}"
    return f"student code runs in the sandbox at {sandbox.level}" + (f" ({sandbox.note})" if sandbox.note else "")


def scheduler_main(argv: list[str]) -> int:
    """`grade scheduler --certs DIR`: Dask's scheduler, requiring a certificate of the cluster's CA from every
    client and worker (mutual TLS), as a child that stopping this command stops (and a kill -9 of it kills).
    Its scratch space is a folder of this command's, removed when it ends (by the next start after kill -9)."""
    parser = argparse.ArgumentParser(prog="grade scheduler", description=_sentence(COMMANDS["scheduler"]))
    parser.add_argument("--certs", type=Path, required=True, metavar="DIR",
                        help="the folder `grade cluster-certs DIR` made (ca.pem, scheduler.pem, scheduler-key.pem)")
    parser.add_argument("--host", default="", help="address to listen on (default: every interface)")
    parser.add_argument("--port", type=int, default=8786, help="port to listen on (default: %(default)s)")
    parser.add_argument("--dashboard", action="store_true",
                        help="also serve Dask's dashboard on the HTTP address (no authentication)")
    parser.add_argument("--http", default="127.0.0.1:8787", metavar="HOST:PORT",
                        help="Dask's HTTP pages (health, metrics, worker info; the dashboard with --dashboard), which "
                             "have no authentication (default: %(default)s: this host only; reach it through SSH)")
    args = parser.parse_args(argv)
    from .classroom.cluster_tls import ROLE_GATE, tls_files

    try:
        require_extra("grade scheduler", "cluster")
        ca, cert, key = tls_files("scheduler", args.certs, None, None, None)
    except UsageError as exc:
        return _misuse(exc)
    command = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "tls", "--port", str(args.port),
               "--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key), "--dashboard-address",
               args.http, "--dashboard" if args.dashboard else "--no-dashboard", "--preload", ROLE_GATE]
    if args.host:
        command += ["--host", args.host]
    from .classroom.cluster import run_until_stopped
    from .leftovers import SCHEDULER, clear_at_start, owned_scratch

    for line in clear_at_start():  # what a kill -9 of an earlier scheduler (or grader) left
        print(f"grade scheduler: {line}", file=sys.stderr, flush=True)
    with owned_scratch(SCHEDULER) as scratch:
        return run_until_stopped([(command, {"DASK_TEMPORARY_DIRECTORY": str(scratch),
                                       "DASK_DISTRIBUTED__DASHBOARD__LINK": _http_words(args)})])


def _http_words(args: argparse.Namespace) -> str:
    """What Dask's start-up line `dashboard at:` says: what the HTTP address serves (it named a dashboard's page
    at the scheduler's public address, where nothing is served without --dashboard)."""
    if args.dashboard:
        return f"http://{args.http}/status (no authentication: reach it through SSH)"
    return f"none (--dashboard serves one); health and metrics at http://{args.http}/health"


def certs_main(argv: list[str]) -> int:
    """`grade cluster-certs DIR`: the cluster's CA and the scheduler's, workers' and clients' certificates."""
    from .classroom.cluster_tls import DEFAULT_DAYS, make_certificates

    parser = argparse.ArgumentParser(prog="grade cluster-certs",
                                     description=_sentence(COMMANDS["cluster-certs"]))
    parser.add_argument("folder", type=Path, metavar="DIR", help="a new folder for them (made mode 700)")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help="how long they are valid (default: %(default)s)")
    parser.add_argument("--host", action="append", default=[], metavar="NAME",
                        help="a host name to note in the certificates (Dask checks the CA, not names)")
    args = parser.parse_args(argv)

    try:
        require_extra("grade cluster-certs", "cluster")
        made = make_certificates(args.folder, args.days, tuple(args.host))
    except UsageError as exc:
        return _misuse(exc)
    print("\n".join(str(path) for path in made))
    print("Copy to each host only what it needs: ca.pem and worker.pem, worker-key.pem to grading hosts (`grade "
          "worker`); ca.pem and client.pem, client-key.pem where `grade batch`/`grade serve` run; ca.pem and "
          "scheduler.pem, scheduler-key.pem to the scheduler's host. Whoever holds client-key.pem can run code on "
          "the workers (a worker's or the scheduler's key cannot: their roles are refused); any key lets its holder "
          "join the cluster in its role: keep the keys mode 600.")
    return EXIT_OK


def _serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=Path, required=True, metavar="FILE",
                        help="`course: token` lines (YAML, mode 600): each course's bearer token")
    parser.add_argument("--state", type=Path, default=Path("grader-service"), metavar="DIR",
                        help="where the job queue (SQLite) lives; a restart picks it up (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=0, metavar="N",
                        help="submissions graded at once (default: one per CPU core)")
    parser.add_argument("--max-mb", type=float, default=8, metavar="MB",
                        help="largest archive accepted (default: %(default)s MB)")
    parser.add_argument("--per-hour", type=int, default=20, metavar="N",
                        help="uploads one student may make per hour (default: %(default)s); a resubmission while "
                             "an earlier one waits is queued and supersedes it, but counts")
    parser.add_argument("--rate-window", type=float, default=3600.0, metavar="S",
                        help="the window --per-hour counts uploads in, in seconds (default: %(default)g)")
    parser.add_argument("--cluster", default="", metavar="ADDRESS",
                        help="a Dask scheduler: jobs are graded on its workers (`grade worker`) instead of here")
    _tls_options(parser)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in ("batch", "serve", "reproduce", "prepare", *LMS_COMMANDS) else "grade"
    rest = argv[1:] if command != "grade" else argv
    parser = argparse.ArgumentParser(prog="grade" if command == "grade" else f"grade {command}",
                                     description=_sentence(COMMANDS.get(command, COMMANDS["grade"])),
                                     epilog=_commands_epilog() if command == "grade" else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if command == "serve":
        _serve_options(parser)
    elif command == "prepare":
        pass  # the common options alone: which config (its cache, reference and cases), which backend
    elif command in LMS_COMMANDS:
        parser.add_argument("submission", type=Path, help="the folder the LMS put the student's files in "
                                                          "(kernel.cu is found anywhere below it)")
        parser.add_argument("results", type=Path, help="where the LMS reads results.json")
    elif command == "reproduce":
        parser.add_argument("result", type=Path, help="the stored result (a student's JSON, from `grade` or a batch)")
        parser.add_argument("submission", type=Path, help="the submission it graded: a folder holding kernel.cu, or "
                                                          "the file (graded with this run's config and cases)")
    else:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                            help="a folder holding kernel.cu, or the .cu file itself" if command == "grade" else
                            "a folder of student folders, a class zip (Canvas, Gradescope export), or one student")
        parser.add_argument("-o", "--output", type=Path, default=Path("results"), metavar="OUTDIR",
                            help="where the result files go (default: results/)")
    _common(parser)
    if command == "grade":
        parser.add_argument("--fail-under", type=float, default=None, metavar="SCORE",
                            help="exit with 1 when a submission scores below SCORE (points out of the full "
                                 "total; without a GPU, scaled to the points that could be checked)")
        parser.add_argument("--phases", action="store_true",
                            help="after each result, print where the grade's time went: start, sandbox set-up, "
                                 "compile, CUDA context, cases, timing, report (also stored as the JSON's phases)")
    if command in LMS_COMMANDS:
        remote = parser.add_argument_group("remote grading")
        remote.add_argument("--remote", default="", metavar="URL",
                            help="send the kernel to a `grade serve` service and write its result")
        remote.add_argument("--token-file", type=Path, default=None, metavar="FILE", help="the course's token")
        remote.add_argument("--student", default="", metavar="ID",
                            help="the student's LMS id; the service keeps each student's newest upload by it "
                                 + ("(default: Gradescope's submission_metadata.json)" if command == "gradescope"
                                    else "(required with --remote: PrairieLearn's container does not say who "
                                         "submitted)"))
        remote.add_argument("--submitted-at", default="", metavar="ISO",
                            help="when the LMS took the submission (ISO 8601 with its zone), so the service grades "
                                 "the student's newest (default: Gradescope's submission_metadata.json, or the time "
                                 "the PrairieLearn question stamps in its job data)")
        remote.add_argument("--remote-timeout", type=float, default=600, metavar="S",
                            help="how long to wait for the service's result (default: %(default)s s)")
        remote.add_argument("--remote-fallback", choices=("cpu", "fail"), default="fail",
                            help="when the service cannot grade it: grade here on the CPU with a note, or write a "
                                 "grader error (default: %(default)s)")
    if command in LMS_COMMANDS:
        parser.add_argument("--without-gpu", choices=WITHOUT_GPU, default=HOLD,
                            help="the score from a run without a GPU (timing and the large cases not checked): "
                                 "hold (default) scores the points checked, for an assignment worth the points "
                                 "checkable without a GPU; scale scores their share of the full total, for an "
                                 "assignment worth the full total (docs/instructors.md: which total to give the "
                                 "assignment)")
    if command == "gradescope":
        parser.add_argument("--hidden-visibility", choices=HIDDEN_VISIBILITIES, default=DEFAULT_HIDDEN_VISIBILITY,
                            help="Gradescope visibility of hidden cases (default: %(default)s); students see only "
                                 "their verdict even then")
    if command == "batch":
        again = parser.add_mutually_exclusive_group()
        again.add_argument("--resume", action="store_true",
                           help="grade only students with no stored result for this kernel and configuration")
        again.add_argument("--force", action="store_true", help="grade everyone again")
        parser.add_argument("--keep-older", action="store_true",
                            help="with --resume, keep the stored results graded by another grader version, config "
                                 "or cases instead of grading them again (the summary lists them either way)")
        parser.add_argument("--against", type=Path, default=None, metavar="PREVIOUS",
                            help="compare this grading with an earlier one (a results folder; may be -o's own): the "
                                 "students whose grade changed and why, in the terminal, regrade.csv and the "
                                 "summary page; exit 6 when any total went down")
        parser.add_argument("--jobs", type=int, default=0, metavar="N",
                            help="submissions graded at once (default: one per CPU core)")
        cluster = parser.add_argument_group("cluster")
        cluster.add_argument("--cluster", default="", metavar="ADDRESS",
                             help="a Dask scheduler (tls://HOST:8786, with --certs DIR): each submission is graded "
                                  "on its workers (`grade worker`); results are written here as always")
        cluster.add_argument("--worker-wait", type=float, default=60.0, metavar="S",
                             help="how long to wait for a worker, at the start and whenever none is connected; "
                                  "after that the batch stops, keeping what was graded (default: %(default)g s)")
        _tls_options(cluster)
        canvas = parser.add_argument_group("canvas.csv")
        canvas.add_argument("--assignment", default="SGEMM lab", metavar="TITLE",
                            help="the Canvas assignment's title (the column is headed 'TITLE (ID)')")
        canvas.add_argument("--assignment-id", default="", metavar="ID",
                            help="the Canvas assignment's id, so the import updates that assignment")
        canvas.add_argument("--points-possible", type=float, default=None, metavar="N",
                            help="the assignment's points in Canvas: scores are rescaled to N")
        canvas.add_argument("--roster", type=Path, default=None, metavar="FILE",
                            help="Canvas's gradebook export (CSV): names, ids and sections come from it, and "
                                 "students with no submission are listed")
        canvas.add_argument("--without-gpu", choices=WITHOUT_GPU, default=HOLD,
                            help="scores from a run without a GPU: hold (default) leaves their cells empty; "
                                 "scale writes them scaled to the points that could be checked")
    args = parser.parse_args(rest)
    args.command = command
    return args


def load_secret(path: Path | None) -> str:
    """The instructor's secret; the children never see it (their environment is allow-listed)."""
    if path is None:
        return os.environ.get(SECRET_VARIABLE, "")
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(f"--secret-file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--secret-file {path}: not UTF-8 text") from None
    if not secret:
        # An empty secret would silently grade with the published seeds, which students know.
        raise UsageError(f"--secret-file {path}: the file is empty; put the secret in it")
    return secret


def run_plan(args: argparse.Namespace) -> RunPlan:
    from .execute.confine.sandbox import SandboxUnavailable, detect

    try:
        sandbox = detect(allow_unsafe=args.unsafe_no_sandbox)
    except SandboxUnavailable as exc:
        if args.command != "prepare":
            raise UsageError(str(exc)) from None
        sandbox = None  # an image being built may have none: the grader's own builds are made, the reference's not
    return replace(_backend_plan(args), sandbox=sandbox)


def _started_early(args: argparse.Namespace, config, cases, plan: RunPlan) -> EarlyChildren:
    """The children of `grade PATH`'s first grade, started now and waiting for their jobs (execute/early.py);
    nothing for the other commands, whose grades start their own."""
    from .execute.early import start_early
    from .execute.spawn import EarlyChildren

    return start_early(config, cases, plan) if args.command == "grade" else EarlyChildren()


def _backend_plan(args: argparse.Namespace) -> RunPlan:
    from .execute.cpu.compiler import compiler
    from .execute.gpu.detect import gpu_unavailable_reason
    from .plan import CPU, CPU_NOTE, GPU, RunPlan

    if args.no_run:
        return RunPlan(None, "not run: --no-run asks for the static check and compilation only")
    cluster = getattr(args, "cluster", "")
    gpu_missing = _cluster_gpu_missing(args) if cluster else gpu_unavailable_reason()
    if getattr(args, "no_worker", False):  # nothing will be graded: whichever backend was asked for
        return RunPlan(GPU if args.backend == GPU else CPU, note=gpu_missing)
    if args.backend == GPU or (args.backend == "auto" and gpu_missing is None):
        if gpu_missing is not None:
            raise UsageError(f"--backend gpu: {gpu_missing}")
        return RunPlan(GPU, sanitize=args.sanitize is not False, sanitize_always=args.sanitize is True,
                       profile=getattr(args, "profile", False))
    if not cluster and compiler() is None:  # a cluster's workers compile with their own
        reason = "the CPU emulator needs a C++ compiler (g++), and none is on PATH"
        if args.backend == CPU:
            raise UsageError(f"--backend cpu: {reason}")
        return RunPlan(None, f"not run: {gpu_missing}, and {reason}. Only the static check and compilation ran")
    if args.backend == CPU:
        return RunPlan(CPU, note=CPU_NOTE)
    return RunPlan(CPU, note=f"{CPU_NOTE} ({gpu_missing})")


def _cluster_security(args: argparse.Namespace):
    """Dask's `Security` for --cluster (None: no cluster, or plain TCP that --insecure allowed)."""
    if not args.cluster:
        if args.certs or args.tls_ca_file or args.tls_cert or args.tls_key or args.insecure:
            raise UsageError("--certs, --tls-* and --insecure are for --cluster")
        return None
    require_extra(f"grade {args.command} --cluster", "cluster")
    from .classroom.cluster_tls import client_security

    return client_security(args.cluster, args.certs, args.tls_ca_file, args.tls_cert, args.tls_key, args.insecure)


def _cluster_gpu_missing(args: argparse.Namespace) -> str | None:
    """With --cluster the workers grade, so their GPUs count, not this host's: why none can, or None."""
    from .classroom.cluster import cluster_gpus, no_worker_words

    wait_s = getattr(args, "worker_wait", 60.0)
    gpus = cluster_gpus(args.cluster, args.security, wait_s)
    if gpus is None:  # a batch stops at once (exit 3: a grader-error row for each student, the class files)
        if args.command != "batch":
            raise UsageError(no_worker_words(args.cluster, wait_s))
        args.no_worker = True
        return no_worker_words(args.cluster, wait_s)
    if gpus:
        return None
    return f"no worker of the cluster at {args.cluster} has a GPU (`grade worker` on a GPU host offers one)"


def main(argv: list[str] | None = None) -> int:
    phases = Phases()
    before_main = since_process_start()  # the interpreter's start and the imports: the first phase
    if before_main is not None:
        phases.add("start", before_main)
    argv = sys.argv[1:] if argv is None else argv
    cluster_commands = {"worker": worker_main, "scheduler": scheduler_main, "cluster-certs": certs_main}
    if argv[:1] and argv[0] in cluster_commands:
        return cluster_commands[argv[0]](argv[1:])
    if argv[:1] == ["diff"]:
        console, errors = result_console(), error_console()
        from .regrade_commands import diff_main

        return diff_main(argv[1:], console, errors)
    args = parse_args(argv)
    if args.command in ("grade", "reproduce", *LMS_COMMANDS):  # graded here: what its grades read, asked ahead
        from .provenance import known_soon
        from .source.include_policy import ask_folders_soon

        ask_folders_soon()
        known_soon()
    try:
        config = load_config(preset_path(args.preset) if args.preset else args.config)
        cases = load_cases(config.testcases_dir, config.kernel.square)
        secret = load_secret(args.secret_file)
        if secret:
            cases = with_secret(cases, secret)
            config.timing.seed = mix_seed(config.timing.seed, secret)
        phases.mark("config")
        fail_under_checked(getattr(args, "fail_under", None), config, cases)
        if args.command in ("batch", "serve"):
            args.security = _cluster_security(args)
        plan = run_plan(args)
        phases.mark("sandbox")
        # `grade PATH`'s children start now, before the pipeline's imports and the static check: their own start
        # (interpreter, imports, CUDA) is the longest wait of a grade, and it overlaps all that
        early = _started_early(args, config, cases, plan)
        if early.pids():  # --no-run starts nothing
            phases.mark("child_spawn")
        console, errors = result_console(), error_console()
        # A class's and an LMS entry's exports only: `grade PATH` writes its JSON and JUnit files alone
        args.exports = export_options(args, config) if args.command in ("batch", *LMS_COMMANDS) else None
    except UsageError as exc:
        say_error(error_console(), exc)
        return EXIT_USAGE
    # Said once, before anything is graded (a service says it in its first log line: serve/main.py's announce).
    # A cluster's workers run the student code, in their own hosts' sandboxes: this host's level is not theirs.
    if plan.sandbox is not None and plan.sandbox.note and args.command != "serve" and not getattr(args, "cluster", ""):
        from rich.text import Text

        errors.print(Text("Sandbox: ", style="bold yellow").append(plan.sandbox.note), highlight=False)
    if args.command == "batch":
        return grade_batch(args, config, cases, plan, console, errors)
    if args.command == "serve":
        return grade_serve(args, config, cases, plan, errors)
    if args.command in LMS_COMMANDS:
        return lms_entry(args, config, cases, plan)
    if args.command == "reproduce":
        from .regrade_commands import reproduce

        return reproduce(args, config, cases, plan, console, errors)
    if args.command == "prepare":
        return prepare_cache(config, cases, plan, console, errors)
    with early:  # closed here too where no grade took them (no such path, an interruption)
        return grade_paths(args, config, cases, plan, phases, console, errors, early)


def prepare_cache(config, cases, plan, console: Console, errors: Console) -> int:
    """`grade prepare`: the per-version builds made into the cache, one line each; exit 1 where one could not be
    made (the grades then make it themselves, or fail saying why)."""
    if plan.backend is None:
        console.print(f"nothing to prepare: {plan.note}", highlight=False, markup=False)
        return EXIT_OK
    from .pipeline import GPU
    from .prepare import prepare

    made = prepare(config, whole_truths(cases, plan.backend == GPU), plan.sandbox, plan.backend == GPU, inputs=cases)
    for ok, what in made:
        if ok:
            console.print(f"ready: {what}", highlight=False, markup=False)
        else:
            say_error(errors, f"not prepared: {what}")
    console.print(f"cache: {config.cache_dir}", highlight=False, markup=False)
    return EXIT_OK if all(ok for ok, _ in made) else EXIT_BELOW_THRESHOLD


def grade_paths(args, config, cases, plan, phases: Phases, console: Console, errors: Console, early=None) -> int:
    """`grade PATH ...`: each graded, its files written, its result printed (and with --phases its time).
    `early`: the children started for the first grade (execute/early.py); each later one starts its own."""
    from rich.markup import escape

    from .intake.intake import looks_like_a_class
    from .intake.submission import at_the_door, locate
    from .pipeline import grade, not_graded
    from .report import render

    code, names = EXIT_OK, set()
    started = phases.last - sum(phases.seconds.values())  # the process's start (main()'s, off Linux)
    for path in args.paths:
        if not path.exists():
            say_error(errors, f"{path}: no such file or folder")
            code = EXIT_USAGE
            continue
        phases.mark("grading_other")  # between submissions: nothing but the loop
        begun = started if not names else phases.last
        hint = looks_like_a_class(path)
        if hint:  # a class, or a zip: `grade batch` reads it; grading it as one student would only mislead
            say_error(errors, hint)
            code = EXIT_USAGE
            continue
        door = at_the_door(path)
        if door.refusal:  # nothing there to grade: one line, not a table of skipped checks
            write_outputs(not_graded(path, config, cases, door.refusal), args.output, unique_name(
                locate(path)[0], names))
            say_error(errors, door.refusal)
            code = EXIT_NOT_GRADED
            continue
        try:
            result = grade(door.kernel, config, cases, plan, early)  # the file choose_kernel()'s rule took
            early = None
            result.submission = locate(path)[0]
            result.intake_notes += door.notes
        except KeyboardInterrupt:
            # The runner has already killed the child's process group; results so far are on disk.
            errors.print(f"[bold red]interrupted[/] while grading {escape(str(path))}", highlight=False)
            return EXIT_INTERRUPTED
        phases.last = time.perf_counter()
        # The first submission carries the process's own start and set-up; the grade's phases follow.
        if not names:
            result.phases = merged(phases.rounded(), result.phases)
        phases.seconds.clear()
        # Files first: a closed terminal (`grade ... | head`) must not cost the results.
        write_outputs(result, args.output, unique_name(locate(path)[0], names))
        render(result, console)
        report_s = phases.mark("report")
        phases.seconds.clear()
        if args.phases:
            print_phases(result, report_s, begun, errors)
        if result.outcome == SUBMISSION_ERROR:  # not graded (a tile size or kernel the lab does not take): exit 4
            code = EXIT_NOT_GRADED if code == EXIT_OK else code
        elif args.fail_under is not None and below(result, args.fail_under):
            say_error(errors, below_words(result, args.fail_under))
            code = EXIT_BELOW_THRESHOLD if code == EXIT_OK else code
    return code


def result_console() -> Console:
    """stdout for results: when its reader leaves (`grade … | head`), the rest is not printed and grading goes on
    (Rich's own answer is exit 1, unexplained, and the later submissions not graded)."""
    from rich.console import Console

    class ResultConsole(Console):
        def on_broken_pipe(self) -> None:
            closed_stdout()
            self.quiet = True

    return ResultConsole()


def closed_stdout() -> None:
    """Whatever is still to print goes nowhere once stdout's reader has gone, so neither a BrokenPipeError nor
    Python's flush at exit turns a finished grade into a failure."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def print_phases(result: SubmissionResult, report_s: float, started: float, errors: Console) -> None:
    """--phases: where this grade's time went, on stderr (stdout keeps the result alone)."""
    seconds = {**result.phases, "report": round(report_s, 3)}
    errors.print(f"Phases of {result.submission}:", highlight=False)
    for line in describe(seconds, time.perf_counter() - started):
        errors.print(f"  {line}", highlight=False, markup=False)


def below(result: SubmissionResult, threshold: float) -> bool:
    """--fail-under: the threshold is out of the full total; a run without a GPU compares the same share
    of what it could check (a correct kernel on a CPU scores 74 of 74 checkable, not 74 of 100)."""
    if result.needs_gpu_points and result.max_score > 0:
        threshold = threshold * result.checkable_max / result.max_score
    return result.score < threshold - 1e-9


def below_words(result: SubmissionResult, threshold: float) -> str:
    """Why --fail-under gives exit 1: the score against the threshold, on the same total."""
    if result.needs_gpu_points and result.max_score > 0:
        scaled = threshold * result.checkable_max / result.max_score
        return (f"{result.submission}: {format_points(result.score)} of the {format_points(result.checkable_max)} "
                f"points checkable without a GPU is below --fail-under {threshold:g} (scaled to "
                f"{format_points(scaled)} of them): exit 1")
    return (f"{result.submission}: {format_points(result.score)}/{format_points(result.max_score)} is below "
            f"--fail-under {threshold:g}: exit 1")


def fail_under_checked(threshold: float | None, config, cases) -> None:
    """--fail-under is out of the full total: a threshold outside 0..total would fail or pass every grade."""
    from .rubric import Rubric

    total = sum(check.points for check in Rubric.of(config, cases).checks)
    if threshold is not None and not 0 <= threshold <= total:
        raise UsageError(f"--fail-under {threshold:g}: give a score from 0 to {format_points(total)} (the full "
                         "total of this configuration's points)")


def unique_name(name: str, taken: set[str]) -> str:
    """Two submissions named alike (a/sub, b/sub) must not overwrite each other's files."""
    candidate, counter = name, 1
    while candidate in taken:
        counter += 1
        candidate = f"{name}-{counter}"
    taken.add(candidate)
    return candidate


def write_outputs(result: SubmissionResult, outdir: Path, name: str) -> None:
    from .report import write_json, write_junit

    outdir.mkdir(parents=True, exist_ok=True)
    write_json(result, outdir / f"{name}.json")
    write_junit(result, outdir / f"{name}.junit.xml")
    if result.log.strip():
        # The child's raw output (printf, runtime messages) is for the instructor, not the summary.
        (outdir / f"{name}.log").write_text(result.log, encoding="utf-8")


def load_roster(path: Path | None) -> list[RosterRow] | None:
    from .report.canvas_csv import read_roster

    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise UsageError(f"--roster {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--roster {path}: not UTF-8 text (export the gradebook from Canvas again)") from None
    try:
        return read_roster(text, f"--roster {path}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def export_options(args: argparse.Namespace, config) -> ExportOptions:
    from .report.canvas_csv import CanvasOptions
    from .report.exports import ExportOptions

    options = ExportOptions(compile_error_graded=config.prairielearn.compile_error_graded)
    if args.command == "gradescope":
        options.hidden_visibility = args.hidden_visibility
    if args.command in LMS_COMMANDS:
        options.without_gpu = args.without_gpu
    if args.command == "batch":
        if not args.assignment.strip():
            raise UsageError("--assignment: the title must not be empty")
        if args.points_possible is not None and not (args.points_possible > 0 and math.isfinite(args.points_possible)):
            raise UsageError(f"--points-possible: must be a positive number, got {args.points_possible}")
        options.canvas = CanvasOptions(args.assignment, args.assignment_id.strip(), args.points_possible,
                                       args.without_gpu, load_roster(args.roster))
    return options


def grade_batch(args, config, cases, plan, console: Console, errors: Console) -> int:
    from rich.markup import escape

    from .classroom.batch import BatchOptions, run_batch
    from .regrade_commands import batch_regrade_said, read_grading

    if args.keep_older and not args.resume:
        return _misuse(UsageError("--keep-older is for --resume: it keeps stored results of another grader"))
    try:  # read before anything is graded: PREVIOUS may be this run's own folder
        previous = read_grading(args.against, "--against", errors).results if args.against else None
    except UsageError as exc:
        return _misuse(exc)
    options = BatchOptions(args.output, resume=args.resume, force=args.force, jobs=args.jobs,
                           exports=args.exports, cluster=args.cluster, security=args.security,
                           worker_wait_s=args.worker_wait, no_worker=getattr(args, "no_worker", False),
                           keep_older=args.keep_older, previous=previous)
    try:
        outcome = run_batch(args.paths, config, cases, plan, options, console)
    except KeyboardInterrupt:  # before any worker started (reading the class, computing the truths)
        say_error(errors, "interrupted before grading began; run the same command to grade the class")
        return EXIT_INTERRUPTED
    if outcome.interrupted:
        errors.print(f"[bold red]interrupted[/]: {outcome.graded_now} submissions graded and saved in "
                     f"{escape(str(args.output))}/students; run the same command with --resume to grade the rest",
                     highlight=False)
        return EXIT_INTERRUPTED
    if outcome.stopped:
        left = sum(1 for result in outcome.results if result.outcome == GRADER_ERROR)
        errors.print(f"[bold red]stopped[/]: {escape(outcome.stopped)}. {outcome.graded_now} submissions graded and "
                     f"saved in {escape(str(args.output))}/students; {left} rows are grader errors: start a worker "
                     "and run the same command with --resume to grade them", highlight=False)
        write_summary_lines(args, outcome, console)
        return EXIT_NO_WORKERS
    write_summary_lines(args, outcome, console)
    return batch_regrade_said(outcome, console)


def write_summary_lines(args, outcome, console: Console) -> None:
    """After a batch: the counts, what a run without a GPU could check, where the class files are, and the
    rows Canvas will not take as they are."""
    from .report.exports import CLASS_EXPORTS
    from .report.status import status_label

    statuses = Counter(status_label(r) for r in outcome.results)
    console.print(f"{len(outcome.results)} students: {outcome.graded_now} graded now, {outcome.reused} kept from "
                  f"earlier runs; " + ", ".join(f"{n} {label}" for label, n in sorted(statuses.items())))
    gpu = run_gpu_note(outcome.results)
    if gpu:
        console.print(f"Graded without a GPU: every total is out of the {format_points(run_total(outcome.results))} "
                      f"points checkable here; {gpu}. canvas.csv: --without-gpu {args.without_gpu}.",
                      highlight=False)
    console.print(", ".join(f"{export.name}: {args.output / export.main_file}" for export in CLASS_EXPORTS
                            if (args.output / export.main_file).exists()))
    notes = (args.output / "canvas-notes.txt").read_text(encoding="utf-8").splitlines()
    if notes:
        console.print(f"canvas.csv: {len(notes)} notes (rows Canvas will not take as they are), in "
                      f"{args.output / 'canvas-notes.txt'}:", highlight=False)
        for line in notes[:20]:
            console.print(f"  {line}", highlight=False, markup=False)


def grade_serve(args, config, cases, plan, errors: Console) -> int:
    try:
        require_extra("grade serve", "serve")
        from .serve.app import ServiceLimits
        from .serve.main import load_tokens, serve

        tokens = load_tokens(args.tokens)
    except UsageError as exc:
        say_error(errors, exc)
        return EXIT_USAGE
    limits = ServiceLimits(max_bytes=int(args.max_mb * (1 << 20)), per_window=args.per_hour,
                           window_s=args.rate_window)
    serve(config, cases, plan, args.state, tokens, args.host, args.port, args.jobs, limits, args.cluster,
          args.security)
    return EXIT_OK


def _remote_grade(args, folder: Path, config, cases, plan) -> tuple[SubmissionResult, bool]:
    """The service's result; when it cannot give one, the instructor's --remote-fallback. Either way a result
    the service did not grade carries `regrade_reason`, so the instructor finds it and grades it again; and
    whether the student's newer upload is graded instead (nothing for anyone to do)."""
    from .classroom.remote import RemoteUnavailable, grade_remotely, mark_for_regrade, student_of, submitted_at_of
    from .intake.submission import SubmissionError, read_headers
    from .pipeline import grade, not_graded

    kernel = folder / "kernel.cu" if folder.is_dir() else folder
    try:
        token = args.token_file.read_text(encoding="utf-8").strip() if args.token_file else ""
        student = student_of(args.submission, args.student)
        if not token or not student:
            missing = " and ".join(what for what, given in (("--token-file FILE (a file holding the course's "
                                                           "token)", token), ("--student ID", student)) if not given)
            raise RemoteUnavailable(f"--remote needs {missing}" + (" (on Gradescope, or its "
                                    "submission_metadata.json beside the submission)" if not student and
                                    args.command == "gradescope" else ""))
        if not kernel.is_file():
            raise SubmissionError(f"{args.submission}: no kernel.cu to send")
        headers = {name: text.encode() for name, text in
                   read_headers(kernel.parent, config.compile.handed_in_headers).items()}
        return mark_for_regrade(grade_remotely(kernel, student, args.remote, token, args.remote_timeout,
                                               headers=headers,
                                               submitted_at=submitted_at_of(args.submission, args.submitted_at)),
                                args.remote), False
    except (RemoteUnavailable, OSError) as error:
        if not isinstance(error, RemoteUnavailable):
            error = RemoteUnavailable(f"--token-file {args.token_file}: {error.strerror}")
        if args.remote_fallback == "cpu":
            result = grade(folder, config, cases, plan)
            result.message = "; ".join(filter(None, [f"graded here, not by the grading service: {error}",
                                                     result.message]))
            result.regrade_reason = f"graded on the CPU in the LMS's container, not by the service: {error}"
            return result, False
        result = not_graded(folder, config, cases, error.student, GRADER_ERROR)
        result.regrade_reason = f"--remote {args.remote}: {error}"
        return result, error.superseded


def lms_entry(args, config, cases, plan) -> int:
    """One submission for an LMS: the results file is always written, whatever happened."""
    from .intake.submission import SubmissionError, find_kernel_noted
    from .pipeline import grade, not_graded
    from .report.exports import LMS_ENTRIES

    started = time.perf_counter()
    superseded = False
    try:
        # Students upload folders: kernel.cu may sit anywhere below the folder the LMS gives.
        folder, notes = find_kernel_noted(args.submission)
        if args.remote:
            result, superseded = _remote_grade(args, folder, config, cases, plan)
        else:
            result = grade(folder, config, cases, plan)
        result.intake_notes = notes + result.intake_notes
    except SubmissionError as exc:
        result = not_graded(args.submission, config, cases, str(exc))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    LMS_ENTRIES[args.command].write(result, args.results, time.perf_counter() - started, args.exports)
    return EXIT_OK if superseded else _remote_said(args, result)


def _remote_said(args, result: SubmissionResult) -> int:
    """--remote without the service's grade: the reason on stderr (the LMS's log), for the instructor, and exit 5
    where nothing graded it; a CPU fallback's grade stands (exit 0) with the reason said."""
    if not (args.remote and result.regrade_reason):
        return EXIT_OK
    from rich.text import Text

    errors = error_console()
    if result.outcome != GRADER_ERROR:
        errors.print(Text("warning: ", style="bold yellow").append(result.regrade_reason), highlight=False)
        return EXIT_OK
    say_error(errors, f"not graded: {result.regrade_reason}. {args.results} says so to the student; fix the cause "
                      "and grade this submission again (docs/service-and-cluster.md: when no grade comes)")
    return EXIT_REMOTE_NOT_GRADED


if __name__ == "__main__":
    sys.exit(main())
