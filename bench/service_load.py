"""A class posting to `grade serve` within seconds of each other, as a deadline brings them (issue 28's load
proof), against `grade batch` of the same class on the same host.

Usage: python3 bench/service_load.py [COUNT] [--spread=S] [--backend=cpu|gpu] [--jobs=N] [--mix=quick]

1. `grade serve` starts on 127.0.0.1 with a fresh state folder and compile cache. COUNT students (100) each
   POST their archive at an even pace over S seconds (10), from threads of their own, and poll their job
   until it is done: time to result is from a student's POST to the answer that holds their result.
2. Checked: every POST was taken (202), every job is done with its own student's result, the queue's
   database holds COUNT jobs all done (none lost, none superseded) and the log has one `done` line per job.
   Printed: p50, p95 and the slowest time to result, and the service's wall (first POST to last result).
3. `grade batch` grades the same class (fresh cache): its wall, the throughput ratio (batch wall / service
   wall; at least 0.9 is the target on a GPU host), and every student's verdicts compared.
`--backend=gpu` grades on this host's GPU (the sanitizer on, as both default to); `--mix=quick` leaves out
the kernels that hang or crash, whose timeouts dominate a small class on a CPU.
Exit status: 0 all checks hold and the ratio meets the target, 1 a job lost or verdicts differ, 2 the ratio
misses it.
"""
from __future__ import annotations

import json
import secrets
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlib import MIX, ROOT, archive, config_with_cache, generate

from grader.config import load_config
from grader.judge.verdicts import differences
from grader.result import SubmissionResult

THROUGHPUT_TARGET = 0.9
POLL_S = 0.5
QUICK = {"hang", "trap", "illegal_address", "call_counter"}  # seconds of timeouts each on a CPU
OPTIONS = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--") and "=" in arg)
BACKEND = OPTIONS.get("backend", "cpu")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))  # loopback only: nothing of the bench listens beyond this host
        return probe.getsockname()[1]


class Service:
    def __init__(self, work: Path, config: Path, jobs: str):
        self.port, self.token = free_port(), secrets.token_hex(24)
        self.url = f"http://127.0.0.1:{self.port}"
        tokens = work / "tokens.yaml"
        tokens.write_text(f"bench: {self.token}\n")
        tokens.chmod(0o600)
        self.state, self.log = work / "state", work / "serve.log"
        command = [sys.executable, "-m", "grader", "serve", "--tokens", str(tokens), "--state", str(self.state),
                   "--host", "127.0.0.1", "--port", str(self.port), "--config", str(config), "--backend", BACKEND,
                   "--per-hour", "1000", *(["--jobs", jobs] if jobs else [])]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def wait_until_ready(self, limit_s: float = 120) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                self.call("GET", "/v1/health", token=False)
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise SystemExit(f"the service did not answer in {limit_s:g} s; see {self.log}")

    def call(self, method: str, path: str, body: bytes | None = None, token: bool = True) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {self.token}"} if token else {}
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def one_student(service: Service, student: Path, at: float, start: float) -> dict:
    """Posts at `start + at`, polls until done: what happened, and when."""
    time.sleep(max(0.0, start + at - time.monotonic()))
    posted = time.monotonic()
    code, queued = service.call("POST", f"/v1/jobs?student={student.name}", archive(student))
    if code != 202:
        return {"student": student.name, "posted": posted - start, "code": code, "error": queued}
    while True:
        time.sleep(POLL_S)
        code, answer = service.call("GET", f"/v1/jobs/{queued['id']}")
        if code != 200 or answer.get("status") not in ("queued", "running"):
            return {"student": student.name, "id": queued["id"], "posted": posted - start, "code": code,
                    "status": answer.get("status"), "seconds": time.monotonic() - posted,
                    "done_at": time.monotonic() - start, "result": answer.get("result")}


def run_service(students: list[Path], work: Path, spread: float, jobs: str) -> tuple[list[dict], Service, float]:
    service = Service(work, config_with_cache(work / "cache", work), jobs)
    try:
        service.wait_until_ready()
        start = time.monotonic()
        pace = spread / max(len(students), 1)
        with ThreadPoolExecutor(max_workers=len(students)) as pool:
            rows = list(pool.map(lambda pair: one_student(service, pair[1], pair[0] * pace, start),
                                 enumerate(students)))
        wall = max(row.get("done_at", 0.0) for row in rows)
    finally:
        service.stop()
    return rows, service, wall


def lost(rows: list[dict], service: Service, count: int) -> list[str]:
    """Everything that says a job was lost, refused or mixed up; [] when every student got their own result."""
    problems = [f"{row['student']}: POST answered {row['code']} {row.get('error')}" for row in rows
                if "id" not in row]
    problems += [f"{row['student']}: ended {row.get('status')!r} (HTTP {row['code']})" for row in rows
                 if "id" in row and (row.get("status") != "done" or not row.get("result"))]
    problems += [f"{row['student']}: got {row['result'].get('student_id')!r}'s result" for row in rows
                 if row.get("result") and row["result"].get("student_id") != row["student"]]
    with sqlite3.connect(service.state / "jobs.sqlite") as db:
        statuses = Counter(status for (status,) in db.execute("SELECT status FROM jobs"))
    if statuses != Counter({"done": count}):
        problems.append(f"the queue holds {dict(statuses)}, not {count} done")
    done_lines = sum(" done course=bench " in line for line in service.log.read_text().splitlines())
    if done_lines != count:
        problems.append(f"the log has {done_lines} `done` lines for {count} jobs")
    return problems


def run_batch(folder: Path, work: Path, jobs: str) -> tuple[float, dict[str, SubmissionResult], Path]:
    config = config_with_cache(work / "cache", work)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "-o", str(work / "out"), "--config",
                    str(config), "--backend", BACKEND, *(["--jobs", jobs] if jobs else [])], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    return wall, {p.stem: SubmissionResult.from_dict(json.loads(p.read_text()))
                  for p in (work / "out" / "students").glob("*.json")}, config


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 100
    spread = float(OPTIONS.get("spread", 10))
    jobs = OPTIONS.get("jobs", "")
    mix = [(name, share) for name, share in MIX if OPTIONS.get("mix") != "quick" or name not in QUICK]
    with tempfile.TemporaryDirectory(prefix="service-load-") as work:
        work = Path(work)
        students = generate(work / "class", count, mix)
        for folder in ("service", "batch"):
            (work / folder).mkdir()
        print(f"{count} students posting over {spread:g} s to grade serve on 127.0.0.1 (backend {BACKEND}, "
              f"--jobs {jobs or 'default'})", flush=True)
        rows, service, service_wall = run_service(students, work / "service", spread, jobs)
        problems = lost(rows, service, count)
        seconds = [row["seconds"] for row in rows if "seconds" in row]
        posted_in = max(row["posted"] for row in rows)
        print(f"service: {len(seconds)} of {count} results, all posted within {posted_in:.1f} s; time to result "
              f"p50 {percentile(seconds, 0.5):.1f} s, p95 {percentile(seconds, 0.95):.1f} s, slowest "
              f"{max(seconds):.1f} s; wall {service_wall:.1f} s ({count / service_wall:.2f}/s)")
        print("service: every job done, none lost" if not problems else
              "service: LOST OR WRONG:\n  " + "\n  ".join(problems[:20]))
        batch_wall, batch, config = run_batch(work / "class", work / "batch", jobs)
        ratio = batch_wall / service_wall
        print(f"grade batch: {count} in {batch_wall:.1f} s ({count / batch_wall:.2f}/s); the service's throughput "
              f"is {ratio:.2f}x the batch's ({'meets' if ratio >= THROUGHPUT_TARGET else 'misses'} "
              f"{THROUGHPUT_TARGET}x)")
        max_ratio = load_config(config).timing.max_ratio
        served = {row["student"]: SubmissionResult.from_dict(row["result"]) for row in rows if row.get("result")}
        differing = {name: differences(batch[name], served[name], max_ratio) if name in batch and name in served
                     else ["missing"] for name in (s.name for s in students)}
        differing = {name: found for name, found in differing.items() if found}
        for name, found in differing.items():
            print(f"DIFFERS {name}: " + "; ".join(found)[:400])
        print(f"verdicts: {count - len(differing)} of {count} the same in the service and the batch; outcomes "
              f"{dict(Counter(r.outcome for r in served.values()))}")
    print(json.dumps({"count": count, "spread_s": spread, "backend": BACKEND,
                      "p50_s": round(percentile(seconds, .5), 2), "p95_s": round(percentile(seconds, .95), 2),
                      "service_wall_s": round(service_wall, 1), "batch_wall_s": round(batch_wall, 1),
                      "ratio": round(ratio, 2), "lost": len(problems), "differing": len(differing)}))
    if problems or differing:
        return 1
    return 0 if ratio >= THROUGHPUT_TARGET else 2


if __name__ == "__main__":
    sys.exit(main())
