"""`grade serve` with a real uvicorn server on localhost (CPU backend): jobs posted over HTTP come back
graded, every refusal gets its code, and a restart mid-queue loses no job."""
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

TOKEN, OTHER_TOKEN = "course-token-0123456789abcdef", "other-course-token-0123456789"
GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
BROKEN = (SUBMISSIONS / "compile_error" / "kernel.cu").read_text()


def zipped(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Service:
    def __init__(self, tmp_path, *extra: str):
        self.tmp_path, self.extra, self.port = tmp_path, extra, free_port()
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(f"ece: {TOKEN}\nother: {OTHER_TOKEN}\n")
        tokens.chmod(0o600)
        self.command = [sys.executable, "-m", "grader", "serve", "--tokens", str(tokens), "--state",
                        str(tmp_path / "state"), "--port", str(self.port), "--backend", "cpu", *extra]

    def start(self) -> "Service":
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.get("/v1/jobs/none")
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
                continue
            return self
        raise AssertionError(f"the service did not start: {self.process.stderr.read1().decode()}")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)  # the server, its runner and the workers grading
        self.process.wait()

    def request(self, method: str, path: str, body: bytes | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        if body is not None:
            request.add_header("Content-Type", "application/zip")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, dict]:
        return self.request("GET", path, token=token)

    def submit(self, student: str, archive: bytes, token: str | None = TOKEN) -> tuple[int, dict]:
        return self.request("POST", f"/v1/jobs?student={student}", archive, token)

    def result(self, job_id: str, timeout_s: float = 240, query: str = "") -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code, answer = self.get(f"/v1/jobs/{job_id}{query}")
            assert code == 200, answer
            if answer["status"] == "done":
                return answer
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not done in {timeout_s} s")


@pytest.fixture
def service(tmp_path):
    running = Service(tmp_path, "--per-hour", "2", "--max-mb", "0.05").start()
    yield running
    running.kill()


@needs_cxx
def test_a_job_posted_over_http_comes_back_graded(service):
    code, queued = service.submit("alice", zipped({"kernel.cu": GOOD}))
    assert code == 202 and queued["status"] == "queued" and queued["position"] >= 1
    done = service.result(queued["id"])
    result = done["result"]
    assert result["submission"] == result["student_id"] == "alice" and result["status"] == "graded"
    assert result["score"] == sum(c["max_score"] for c in result["checks"] if not c["needs_gpu"])
    gradescope = service.result(queued["id"], query="?format=gradescope")["result"]
    assert gradescope["score"] == result["score"] and gradescope["tests"]
    code, _ = service.get(f"/v1/jobs/{queued['id']}", token=OTHER_TOKEN)
    assert code == 404  # another course's token does not see it


def test_every_refusal_gets_its_code(service):
    archive = zipped({"kernel.cu": BROKEN})
    assert service.submit("bob", archive, token=None)[0] == 401
    assert service.submit("bob", archive, token="not-a-token-of-any-course")[0] == 401
    assert service.get("/v1/jobs/anything", token=None)[0] == 401
    assert service.submit("bob", b"x" * 60_000)[0] == 413  # over --max-mb 0.05
    code, answer = service.submit("bob", b"this is not a zip archive")
    assert code == 400 and "zip" in answer["detail"]
    assert service.submit("../../etc", archive)[0] == 400
    assert service.submit("", archive)[0] == 400
    assert service.get("/v1/jobs/x?format=canvas")[0] == 400


def test_one_job_in_flight_per_student_and_a_rate_limit(service):
    archive = zipped({"kernel.cu": BROKEN})  # a compile error: graded in a second or two
    code, first = service.submit("carol", archive)
    assert code == 202
    code, answer = service.submit("carol", archive)
    assert code == 429 and "already has a job" in answer["detail"]
    assert service.submit("dave", archive)[0] == 202  # another student is not held up
    assert service.result(first["id"])["result"]["outcome"] == "compile error"
    code, second = service.submit("carol", archive)
    assert code == 202
    service.result(second["id"])
    code, answer = service.submit("carol", archive)
    assert code == 429 and "2 times in the last 60 minutes" in answer["detail"]


def test_a_hostile_archive_is_a_refused_row_not_a_failed_service(service):
    code, queued = service.submit("mallory", zipped({"../../escape.cu": GOOD}))
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["status"] == "error" and result["score"] == 0 and result["student_id"] == "mallory"
    assert not (service.tmp_path.parent / "escape.cu").exists()


@needs_cxx
def test_a_restart_mid_queue_loses_nothing(tmp_path):
    first = Service(tmp_path, "--jobs", "1").start()
    ids = []
    for student in ("erin", "frank", "grace"):
        code, queued = first.submit(student, zipped({"kernel.cu": BROKEN if student != "frank" else GOOD}))
        assert code == 202
        ids.append(queued["id"])
    time.sleep(1.0)  # the first job is being graded, the others wait
    first.kill()
    with sqlite3.connect(tmp_path / "state" / "jobs.sqlite") as db:
        left = [status for (status,) in db.execute("SELECT status FROM jobs")]
    assert len(left) == 3 and left.count("done") < 3  # the restart has jobs to pick up
    second = Service(tmp_path, "--jobs", "2")
    second.port = first.port
    second.command[second.command.index("--port") + 1] = str(second.port)
    second.start()
    try:
        outcomes = [second.result(job_id)["result"]["outcome"] for job_id in ids]
    finally:
        second.kill()
    assert outcomes == ["compile error", "graded", "compile error"]


@pytest.mark.parametrize("text, mode, words", [
    (f"ece: {TOKEN}\n", 0o644, "others can read it (mode 644); chmod 600"),
    ("ece: short\n", 0o600, "ece: the token must be a string of at least 16 characters"),
    ("- just a list\n", 0o600, "expected lines `course: token`"),
])
def test_a_bad_tokens_file_is_refused_before_the_service_starts(tmp_path, text, mode, words):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(text)
    tokens.chmod(mode)
    finished = subprocess.run([sys.executable, "-m", "grader", "serve", "--tokens", str(tokens), "--state",
                               str(tmp_path / "state"), "--backend", "cpu"], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert finished.returncode == 2 and words in " ".join(finished.stderr.split())
    assert not (tmp_path / "state").exists()


def lms_remote(tmp_path, url: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    submission = tmp_path / "autograder" / "submission"
    submission.mkdir(parents=True)
    (submission / "kernel.cu").write_text(BROKEN)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    results = tmp_path / "autograder" / "results" / "results.json"
    finished = subprocess.run([sys.executable, "-m", "grader", "gradescope", str(submission), str(results),
                               "--remote", url, "--token-file", str(token), "--student", "heidi",
                               "--remote-timeout", "120", *extra], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    return finished, json.loads(results.read_text())


def test_the_lms_entry_sends_the_kernel_to_the_service_and_writes_its_result(service, tmp_path):
    finished, results = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}")
    assert finished.returncode == 0, finished.stderr
    assert "compile error" in json.dumps(results) and "graded here" not in json.dumps(results)
    with sqlite3.connect(service.tmp_path / "state" / "jobs.sqlite") as db:
        assert db.execute("SELECT student, status FROM jobs").fetchall() == [("heidi", "done")]


@pytest.mark.parametrize("fallback", ["fail", "cpu"])
def test_a_service_that_cannot_be_reached_is_the_instructors_choice(tmp_path, fallback):
    finished, results = lms_remote(tmp_path, f"http://127.0.0.1:{free_port()}", "--remote-fallback", fallback)
    text = json.dumps(results)
    assert finished.returncode == 0 and "could not be reached" in text
    if fallback == "fail":
        assert "grader error" in text and "compile error" not in text
    else:
        assert "graded here, not by the grading service" in text and "compile error" in text


def test_the_leaderboard_ranks_each_students_best_timed_run(tmp_path):
    """Jobs finished before this start (a GPU host's timed runs), read back from the queue's database."""
    from grader.result import TIMING, SubmissionResult, passed, skipped
    from grader.serve.store import JobStore

    def timed(gflops: float | None) -> dict:
        timing = (passed("speed vs reference", TIMING, 10, metrics={"ratio": 900 / gflops, "student_gflops": gflops})
                  if gflops else skipped("speed vs reference", TIMING, 10, "not timed: a case failed"))
        return SubmissionResult("s", "graded", [timing]).to_dict()

    store = JobStore(tmp_path / "state" / "jobs.sqlite")
    for course, student, gflops in (("ece", "ivan", 700.0), ("ece", "judy", 910.0), ("ece", "ivan", 820.0),
                                    ("ece", "ken", None), ("other", "leo", 5000.0)):
        store.finish(store.add(course, student, b"").id, timed(gflops))
    store.close()
    running = Service(tmp_path).start()
    try:
        code, answer = running.get("/v1/leaderboard")
        assert running.get("/v1/leaderboard", token=None)[0] == 401
    finally:
        running.kill()
    assert code == 200
    assert [(row["student"], row["gflops"]) for row in answer["leaderboard"]] == [("judy", 910.0), ("ivan", 820.0)]
