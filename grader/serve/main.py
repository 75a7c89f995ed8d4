"""`grade serve`: the job store, the runner and the HTTP server, started and stopped together."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from ..cases import Case, whole_truths
from ..config import Config
from ..errors import UsageError
from ..judge import truths
from ..leftovers import clear_at_start
from ..pipeline import GPU, RunPlan
from ..schema import load_yaml
from .store import JobStore

SCRATCH = "scratch"  # jobs' working folders, under --state; cleared at every start
log = logging.getLogger("grader.serve")
MIN_TOKEN_CHARS = 16  # a guessable token would let anyone queue jobs for a course


def load_tokens(path: Path) -> dict[str, str]:
    """The tokens file: `course: token` lines (YAML). Readable by the service's user only."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"--tokens {path}: {exc.strerror}") from None
    data = load_yaml(path)  # a UsageError naming the file and the line
    if mode & 0o077:
        raise UsageError(f"--tokens {path}: others can read it (mode {mode & 0o777:o}); chmod 600 {path}")
    if not isinstance(data, dict) or not data:
        raise UsageError(f"--tokens {path}: expected lines `course: token`")
    tokens = {}
    for course, token in data.items():
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
            raise UsageError(f"--tokens {path}: {course}: the token must be a string of at least "
                             f"{MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 24`)")
        tokens[str(course)] = token
    return tokens


def announce(plan: RunPlan, state: Path, host: str, port: int, workers: int, limits, cluster: str,
             tokens: dict[str, str], cleared: int) -> str:
    """The operator's first line: where it listens, what grades, with which limits."""
    backend = plan.backend or f"none ({plan.skip_reason})"
    sanitize = ", sanitizer on" if plan.backend == "gpu" and plan.sanitize else ""
    sandbox = plan.sandbox.level if plan.sandbox is not None else "default"
    if plan.sandbox is not None and plan.sandbox.note:
        sandbox += f" ({plan.sandbox.note})"
    if cluster:  # student code runs on the workers, confined as each worker's host allows, never here
        sandbox = "each worker's own (`grade worker` says it; each result's \"sandbox\" too)"
    where = f"on the Dask cluster at {cluster}" if cluster else f"here, {workers} at a time"
    leftovers = f"; cleared {cleared} jobs' scratch folders left by an earlier run" if cleared else ""
    return (f"listening on http://{host}:{port} (GET /v1/health needs no token); backend {backend}{sanitize}, "
            f"sandbox {sandbox}; grading {where}; limits: {limits.max_bytes / (1 << 20):.3g} MB per archive, "
            f"{limits.per_window} uploads per student per {limits.window_s / 60:g} minutes; courses: "
            f"{', '.join(sorted(tokens))}; state {state.resolve()}{leftovers}")


def _log_to_stderr() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s grade serve: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def serve(config: Config, cases: list[Case], plan: RunPlan, state: Path, tokens: dict[str, str], host: str,
          port: int, workers: int, limits, cluster: str = "", security=None) -> None:
    import uvicorn  # the service's dependencies load only for `grade serve`

    from .app import create_app
    from .runner import JobRunner, clear_scratch

    _log_to_stderr()
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)  # the archives and results of every student: nobody else's to read
    cleared = clear_scratch(state / SCRATCH)
    left = clear_at_start()  # what the grades of a service (or batch) killed mid-grade left in the temporary root
    store = JobStore(state / "jobs.sqlite")
    requeued = store.requeue_running()
    client = None
    if cluster:
        from ..classroom.cluster import connect

        client = connect(cluster, security)
    workers = workers or os.cpu_count() or 2
    if plan.backend is not None and client is None:  # as a batch does: once, before jobs race to compute them
        truths.warm(whole_truths(cases, plan.backend == GPU), config)
    runner = JobRunner(store, config, cases, plan, workers, state / SCRATCH, client)
    log.info(announce(plan, state, host, port, workers, limits, cluster, tokens, cleared))
    for line in left:
        log.info(line)
    if requeued:
        log.info("%d jobs that were being graded when the service stopped are queued again", requeued)
    runner.start()
    try:
        uvicorn.run(create_app(store, tokens, limits, runner.wake.set), host=host, port=port, log_level="warning",
                    access_log=False)
    finally:
        runner.stop()
        store.close()
        if client is not None:
            client.close()
