"""`grade serve`: the job store, the runner and the HTTP server, started and stopped together."""
from __future__ import annotations

import os
from pathlib import Path

from ..cases import Case
from ..config import Config
from ..errors import UsageError
from ..pipeline import RunPlan
from ..schema import load_yaml
from .store import JobStore

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


def serve(config: Config, cases: list[Case], plan: RunPlan, state: Path, tokens: dict[str, str], host: str,
          port: int, workers: int, limits, cluster: str = "", security=None) -> None:
    import uvicorn  # the service's dependencies load only for `grade serve`

    from .app import create_app
    from .runner import JobRunner

    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)  # the archives and results of every student: nobody else's to read
    store = JobStore(state / "jobs.sqlite")
    store.requeue_running()
    client = None
    if cluster:
        from distributed import Client

        from ..cluster import CONNECT_TIMEOUT

        client = Client(cluster, security=security, timeout=CONNECT_TIMEOUT)
    runner = JobRunner(store, config, cases, plan, workers or os.cpu_count() or 2, client)
    runner.start()
    try:
        uvicorn.run(create_app(store, tokens, limits, runner.wake.set), host=host, port=port, log_level="warning")
    finally:
        runner.stop()
        store.close()
        if client is not None:
            client.close()
