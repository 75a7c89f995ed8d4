"""A class through the grading service on a Dask cluster of this host's GPUs, against `grade batch` of the
same class on the same host (issue 14's proof: throughput >= 0.9x the batch's, the same verdicts).

Usage: python3 bench/service_cluster.py [COUNT] [SAMPLE] [--backend=cpu]

1. `grade batch` grades the generated class (sanitizer on, as batch defaults): its wall time.
2. A Dask scheduler, `grade worker` (one Dask worker per GPU) and `grade serve --cluster` start; once the
   workers have joined, every student's archive is POSTed to /v1/jobs and each job polled until done.
   The service's wall runs from the first POST to the last result.
3. Every service result is compared with the batch's, check by check; SAMPLE students are also graded
   alone (`grade`) and compared with the service's. Any difference fails the run.
Each of the three graders has its own fresh compile cache, so none reuses another's work.
`--backend=cpu` runs the same steps on the CPU emulator, for trying the bench where there is no GPU.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from benchlib import ROOT, archive, config_with_cache, generate, grade_alone

from grader.classroom.cluster import WORKER_CACHE
from grader.config import load_config
from grader.execute.gpu.detect import local_gpus
from grader.judge.verdicts import differences
from grader.result import SubmissionResult

THROUGHPUT_TARGET = 0.9  # the service's submissions per second over the batch's
POLL_S = 0.5
BACKEND = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--backend=")), "gpu")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def grade_batch(folder: Path, config: Path, outdir: Path) -> tuple[float, dict[str, SubmissionResult]]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "-o", str(outdir), "--config", str(config),
                    "--backend", BACKEND], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall, {p.stem: SubmissionResult.from_dict(json.loads(p.read_text()))
                  for p in (outdir / "students").glob("*.json")}


class Service:
    """The scheduler, the workers and the service, as an instructor starts them (docs/service-and-cluster.md),
    stopped on exit."""

    def __init__(self, work: Path, config: Path, stack: ExitStack):
        scheduler_port, service_port = str(free_port()), str(free_port())
        self.scheduler = f"tls://127.0.0.1:{scheduler_port}"
        self.certs = work / "certs"  # the cluster's mutual TLS, as docs/service-and-cluster.md sets it up
        subprocess.run([sys.executable, "-m", "grader", "cluster-certs", str(self.certs)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        tls = ["--certs", str(self.certs)]
        self.url = f"http://127.0.0.1:{service_port}"
        self.token = secrets.token_hex(24)
        tokens = work / "tokens.yaml"
        tokens.write_text(f"bench: {self.token}\n")
        tokens.chmod(0o600)
        self.logs = work / "logs"
        self.logs.mkdir()
        worker_env = {**os.environ, WORKER_CACHE: str(work / "worker-cache")}
        self._start(stack, "scheduler", [sys.executable, "-m", "grader", "scheduler", *tls, "--host", "127.0.0.1",
                                         "--port", scheduler_port, "--http", "127.0.0.1:0"])
        self._start(stack, "worker", [sys.executable, "-m", "grader", "worker", "--scheduler", self.scheduler, *tls,
                                      "--listen", "127.0.0.1"], worker_env)
        self._start(stack, "serve", [sys.executable, "-m", "grader", "serve", "--tokens", str(tokens), "--state",
                                     str(work / "state"), "--port", service_port, "--cluster", self.scheduler, *tls,
                                     "--config", str(config), "--backend", BACKEND])

    def _start(self, stack: ExitStack, name: str, command: list[str], env: dict | None = None) -> None:
        log = (self.logs / f"{name}.log").open("w")
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        log.close()  # the child has its own copy
        stack.callback(_stop, process)

    def wait_until_ready(self, workers: int, limit_s: float = 120) -> None:
        from distributed import Client

        from grader.classroom.cluster_tls import client_security

        with Client(self.scheduler, security=client_security(self.scheduler, self.certs, None, None, None, False),
                    timeout="60s") as client:
            client.wait_for_workers(workers, timeout=limit_s)
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                self.call("GET", "/v1/leaderboard")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise SystemExit(f"the service did not answer in {limit_s:g} s; see {self.logs}")

    def call(self, method: str, path: str, body: bytes | None = None) -> dict:
        request = urllib.request.Request(self.url + path, data=body, method=method,
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())

    def grade_all(self, students: list[Path]) -> dict[str, SubmissionResult]:
        jobs = {self.call("POST", f"/v1/jobs?student={s.name}", archive(s))["id"]: s.name for s in students}
        results = {}
        while jobs:
            time.sleep(POLL_S)
            for job_id, student in list(jobs.items()):
                answer = self.call("GET", f"/v1/jobs/{job_id}")
                if answer["status"] == "done":
                    results[student] = SubmissionResult.from_dict(answer["result"])
                    del jobs[job_id]
        return results


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)


def compare(left: dict[str, SubmissionResult], right: dict[str, SubmissionResult], names: list[str],
            max_ratio: float, label: str) -> int:
    differing = 0
    for name in names:
        found = ["missing"] if name not in left or name not in right else differences(left[name], right[name],
                                                                                         max_ratio)
        if found:
            differing += 1
            print(f"DIFFERS ({label}) {name}: " + "; ".join(found))
    print(f"{label}: {len(names) - differing} of {len(names)} with the same verdicts, {differing} differ")
    return differing


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 100
    sample_size = int(numbers[1]) if len(numbers) > 1 else 10
    gpus = len(local_gpus()) if BACKEND == "gpu" else 0
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        students = generate(work / "class", count)
        names = [s.name for s in students]
        batch_config = config_with_cache(work / "batch-cache", _folder(work / "batch"))
        batch_wall, batch = grade_batch(work / "class", batch_config, work / "batch" / "out")
        print(f"grade batch: {count} submissions in {batch_wall:.1f} s ({count / batch_wall:.2f}/s)")

        with ExitStack() as stack:
            service_config = config_with_cache(work / "service-cache", _folder(work / "service-config"))
            service = Service(_folder(work / "service"), service_config, stack)
            service.wait_until_ready(max(gpus, 1))
            started = time.perf_counter()
            served = service.grade_all(students)
            service_wall = time.perf_counter() - started
        ratio = batch_wall / service_wall
        print(f"grade serve --cluster ({max(gpus, 1)} worker(s)): {count} submissions in {service_wall:.1f} s "
              f"({count / service_wall:.2f}/s): {ratio:.2f}x the batch's throughput "
              f"({'meets' if ratio >= THROUGHPUT_TARGET else 'MISSES'} the target of {THROUGHPUT_TARGET}x)")
        print(f"service outcomes: {dict(Counter(r.outcome for r in served.values()))}")

        max_ratio = load_config(batch_config).timing.max_ratio
        differing = compare(batch, served, names, max_ratio, "service vs batch")
        sample = random.Random(11).sample(students, min(sample_size, count))
        alone_config = config_with_cache(work / "alone-cache", _folder(work / "alone"))
        alone = {s.name: grade_alone(s, alone_config, work / "alone" / "out", BACKEND, True) for s in sample}
        differing += compare(alone, served, [s.name for s in sample], max_ratio, "service vs graded alone")
    if differing:
        print("FAILED: the service did not grade every student as grading them alone does")
        return 1
    return 0 if ratio >= THROUGHPUT_TARGET else 2


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    sys.exit(main())
