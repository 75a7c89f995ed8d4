"""`grade serve` with a real uvicorn server on localhost (CPU backend): jobs posted over HTTP come back
graded, every refusal gets its code, a resubmission is queued (the newest wins), the `--remote` client waits
as told and marks what it could not get graded, the operator sees each request and job in the log, and a
restart or a kill -9 loses no job and leaves no process or scratch folder behind."""
import base64
import io
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS, descendants, left_in, live_children, owners_of
from hardware import needs_cxx, needs_gpu

TOKEN, OTHER_TOKEN = "course-token-0123456789abcdef", "other-course-token-0123456789"
WRONG_TOKEN = "not-a-token-of-any-course"
GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
BROKEN = (SUBMISSIONS / "compile_error" / "kernel.cu").read_text()
HANG = (SUBMISSIONS / "hang" / "kernel.cu").read_text()
TEMPLATE = (ROOT / "student_template" / "kernel.cu").read_text()


def zipped(members: dict[str, str], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
        for name, target in (links or {}).items():  # a symbolic link as `zip -y` stores one
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Service:
    config: Path | None = None  # here, the quick cases (services_grade_the_quick_cases); else the shipped config

    def __init__(self, tmp_path, *extra: str, env: dict[str, str] | None = None):
        self.tmp_path, self.extra, self.port, self.env = tmp_path, extra, free_port(), env
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(f"ece: {TOKEN}\nother: {OTHER_TOKEN}\n")
        tokens.chmod(0o600)
        self.state = tmp_path / "state"
        self.log = tmp_path / f"serve-{self.port}.log"
        self.command = [sys.executable, "-m", "grader", "serve", "--tokens", str(tokens), "--state",
                        str(self.state), "--port", str(self.port), "--backend", "cpu",
                        *(["--config", str(self.config)] if self.config else []), *extra]

    def start(self) -> "Service":
        with self.log.open("a") as log:  # a file, not a pipe nobody reads: the service logs every request
            self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
                                            start_new_session=True, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.get("/v1/health", token=None)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
                continue
            return self
        raise AssertionError(f"the service did not start: {self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text()

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
            return error.code, {**json.loads(error.read() or b"{}"), "headers": dict(error.headers)}

    def get(self, path: str, token: str | None = TOKEN) -> tuple[int, dict]:
        return self.request("GET", path, token=token)

    def submit(self, student: str, archive: bytes, token: str | None = TOKEN) -> tuple[int, dict]:
        return self.request("POST", f"/v1/jobs?student={student}", archive, token)

    def wait_for(self, job_id: str, statuses: tuple[str, ...] = ("done",), timeout_s: float = 240,
                 query: str = "") -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code, answer = self.get(f"/v1/jobs/{job_id}{query}")
            assert code == 200, answer
            if answer["status"] in statuses:
                return answer
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not {statuses} in {timeout_s} s")

    def result(self, job_id: str, timeout_s: float = 240, query: str = "") -> dict:
        return self.wait_for(job_id, ("done",), timeout_s, query)


@pytest.fixture(autouse=True)
def services_grade_the_quick_cases(quick_config_file, monkeypatch):
    """A service's queue, tokens, limits and restarts are what is tested here: a few cases per job."""
    monkeypatch.setattr(Service, "config", quick_config_file)


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
    assert service.submit("bob", archive, token=WRONG_TOKEN)[0] == 401
    assert service.get("/v1/jobs/anything", token=None)[0] == 401
    assert service.submit("bob", b"x" * 60_000)[0] == 413  # over --max-mb 0.05
    code, answer = service.submit("bob", b"this is not a zip archive")
    assert code == 400 and "zip" in answer["detail"]
    assert service.submit("../../etc", archive)[0] == 400
    assert service.submit("", archive)[0] == 400
    assert service.get("/v1/jobs/x?format=canvas")[0] == 400
    assert service.get("/v1/jobs/0123456789abcdef0123456789abcdef%0A")[0] == 400
    assert service.get("/v1/jobs/0123456789abcdef0123456789abcdef")[0] == 404
    for when in ("yesterday", "2026-03-01T14:22:32", "2999-01-01T00:00:00Z"):  # no zone; far ahead of the clock
        code, answer = service.request("POST", f"/v1/jobs?student=bob&submitted_at={when}", archive)
        assert code == 400 and answer["detail"].startswith("submitted_at: ")


@pytest.mark.parametrize("student", ["nl1%0A", "nl1%0D%0A", "nl1%00", "tab%09x", "a%20b", "x" * 129])
def test_an_id_is_validated_whole(service, student):
    """`nl1\n` would otherwise be a second identity of nl1 (re.match's `$` matches before a final newline)."""
    code, answer = service.submit(student, zipped({"kernel.cu": BROKEN}))
    assert code == 400 and "student" in answer["detail"]
    with sqlite3.connect(service.state / "jobs.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)


def test_health_answers_without_a_token(service):
    code, answer = service.get("/v1/health", token=None)
    assert code == 200 and answer == {"status": "ok", "queued": 0, "running": 0}


@needs_cxx
def test_a_resubmission_is_queued_and_the_newest_wins(tmp_path):
    """Gradescope resubmits while the first is still grading: each upload is taken (202), the one still waiting
    is superseded by the newer, and the student's jobs are graded one after the other, newest last."""
    service = Service(tmp_path, "--jobs", "2").start()
    try:
        code, first = service.submit("carol", zipped({"kernel.cu": GOOD}))
        assert code == 202
        service.wait_for(first["id"], ("running", "done"))
        code, second = service.submit("carol", zipped({"kernel.cu": BROKEN}))
        assert code == 202 and second["status"] == "queued" and second["supersedes"] == []
        code, third = service.submit("carol", zipped({"kernel.cu": BROKEN.replace("{", "{ ", 1)}))
        assert code == 202 and third["supersedes"] == [second["id"]]
        code, replaced = service.get(f"/v1/jobs/{second['id']}")
        assert code == 200 and replaced["status"] == "superseded" and replaced["superseded_by"] == third["id"]
        assert "uploaded again" in replaced["detail"] and "result" not in replaced
        assert service.result(first["id"])["result"]["outcome"] == "graded"
        assert service.result(third["id"])["result"]["outcome"] == "compile error"
        assert service.get(f"/v1/jobs/{second['id']}")[1]["status"] == "superseded"
    finally:
        service.kill()
    with sqlite3.connect(service.state / "jobs.sqlite") as db:
        times = dict(db.execute("SELECT id, started FROM jobs WHERE status = 'done'").fetchall())
        finished_first = db.execute("SELECT finished FROM jobs WHERE id = ?", (first["id"],)).fetchone()[0]
    assert times[third["id"]] >= finished_first  # never graded beside the student's earlier job
    log = service.log_text()
    assert f"job {second['id']} superseded course=ece student=carol by={third['id']}" in log


def test_the_hourly_limit_still_holds_with_a_retry_after(service):
    archive = zipped({"kernel.cu": BROKEN})  # a compile error: graded in a second or two
    assert service.submit("dave", archive)[0] == 202
    assert service.submit("dave", archive)[0] == 202  # the second supersedes the first; both count
    code, answer = service.submit("dave", archive)
    assert code == 429 and "2 times in the last 60 minutes" in answer["detail"]
    assert 3500 <= int(answer["headers"]["retry-after"]) <= 3600
    assert service.submit("erin", archive)[0] == 202  # another student is not held up


def test_a_hostile_archive_is_a_refused_row_not_a_failed_service(service):
    code, queued = service.submit("mallory", zipped({"../../escape.cu": GOOD}))
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["status"] == "error" and result["score"] == 0 and result["student_id"] == "mallory"
    assert result["outcome"] == "submission error" and "no kernel.cu" in result["message"]
    assert result["intake_notes"] == ["refused '../../escape.cu': climbs out of the archive's folder ('..' in its "
                                      "path), so it is not unpacked"]
    assert not (service.tmp_path.parent / "escape.cu").exists()


def test_refused_members_are_listed_beside_the_graded_kernel(service):
    archive = zipped({"kernel.cu": BROKEN, "../etc/passwd": "root:x:0:0\n", "/abs/kernel.h": "x"},
                     links={"notes/link.cu": "/etc/shadow"})
    code, queued = service.submit("oscar", archive)
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["outcome"] == "compile error"  # kernel.cu was graded
    notes = "\n".join(result["intake_notes"])
    assert "refused '../etc/passwd': climbs out of the archive's folder" in notes
    assert "refused '/abs/kernel.h': is an absolute path" in notes
    assert "refused 'notes/link.cu': is a symbolic link" in notes
    output = service.result(queued["id"], query="?format=gradescope")["result"]["output"]
    assert "Note: refused '../etc/passwd'" in output  # the student reads it too


def test_a_refused_kernel_is_never_replaced_by_another_file(service):
    code, queued = service.submit("olga", zipped({"src/kernel.cu": GOOD}, links={"kernel.cu": "/etc/passwd"}))
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["outcome"] == "submission error" and "kernel.cu is a symbolic link" in result["message"]


def test_two_kernels_in_two_folders_are_refused_naming_both(service):
    """The zip of issue 28: final/kernel.cu correct, backup/kernel.cu the template. Gradescope's rule: neither
    is at the top, so which one is meant cannot be known; the student is told both names."""
    code, queued = service.submit("paula", zipped({"final/kernel.cu": GOOD, "backup/kernel.cu": TEMPLATE}))
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["outcome"] == "submission error" and result["student_id"] == "paula"
    assert ("2 files named kernel.cu in your submission (backup/kernel.cu, final/kernel.cu): keep only the one "
            "to grade") in result["message"]
    gradescope = service.result(queued["id"], query="?format=gradescope")["result"]
    assert "backup/kernel.cu, final/kernel.cu" in gradescope["output"]


@needs_cxx
def test_one_kernel_in_a_folder_is_graded_and_the_student_told_which(service):
    code, queued = service.submit("quinn", zipped({"final/kernel.cu": BROKEN, "final/README.md": "my lab",
                                                   "__MACOSX/final/._kernel.cu": "junk"}))
    assert code == 202
    result = service.result(queued["id"])["result"]
    assert result["outcome"] == "compile error"
    assert result["intake_notes"] == ["graded final/kernel.cu, the only kernel.cu in your submission"]
    code, queued = service.submit("rita", zipped({"kernel.cu": BROKEN, "backup/kernel.cu": TEMPLATE}))
    result = service.result(queued["id"])["result"]
    assert result["outcome"] == "compile error"
    assert result["intake_notes"] == ["graded kernel.cu at the top of your submission; not graded: backup/kernel.cu"]


@needs_cxx
def test_the_operator_sees_where_it_listens_each_request_and_each_job(service, sandbox):
    code, queued = service.submit("sam", zipped({"kernel.cu": BROKEN}))
    service.result(queued["id"])
    service.submit("sam", zipped({"kernel.cu": BROKEN}), token=WRONG_TOKEN)
    service.get("/v1/health", token=None)
    service.get("/v1/jobs/x%0A2026-01-01%20grade%20serve:%20job%20forged", token=None)
    time.sleep(0.5)  # the last request's line is written once its answer is sent
    lines = service.log_text().splitlines()
    first = lines[0]
    assert f"listening on http://127.0.0.1:{service.port}" in first and "backend cpu" in first
    assert "0.05 MB per archive, 2 uploads per student per 60 minutes" in first and "courses: ece, other" in first
    assert f"state {service.state}" in first and "grading here" in first and f"sandbox {sandbox.level}" in first
    assert any("POST /v1/jobs student='sam' -> 202" in line for line in lines)
    assert any("POST /v1/jobs student='sam' -> 401" in line for line in lines)
    assert any("GET /v1/health -> 200" in line for line in lines)
    done = [line for line in lines if f"job {queued['id']} done" in line]
    assert len(done) == 1 and "course=ece student=sam outcome='compile error'" in done[0]
    assert " queued=" in done[0] and " graded=" in done[0]
    assert all(line[:4].isdigit() for line in lines)  # one line each: a %0A in a path starts none
    forged = [line for line in lines if "job forged" in line]
    assert len(forged) == 1 and "GET /v1/jobs/x" in forged[0] and forged[0].endswith("s")
    text = "\n".join(lines)
    assert TOKEN not in text and WRONG_TOKEN not in text and "Bearer" not in text


def test_a_logged_path_stays_on_its_line():
    from grader.serve.app import printable

    assert printable("/v1/jobs/x\n2026 job forged\r\x1b[2J") == "/v1/jobs/x\\n2026 job forged\\r\\x1b[2J"


@needs_cxx
def test_kill_9_of_the_service_leaves_no_process_and_the_next_start_clears_its_scratch(tmp_path, temp_root):
    """Its job's scratch under --state, and the grade's scratch folder in the temporary root (the student's
    code and the run's files): both cleared by the next start, which says so."""
    before = set(live_children())
    env = {**os.environ, "TMPDIR": str(temp_root)}
    first = Service(tmp_path, "--jobs", "1", env=env).start()
    code, queued = first.submit("tom", zipped({"kernel.cu": HANG}))  # busy for as long as its cases time out
    assert code == 202
    first.wait_for(queued["id"], ("running",))
    scratch = first.state / "scratch" / queued["id"]
    deadline = time.monotonic() + 30
    while not (scratch / "tom" / "kernel.cu").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (scratch / "tom" / "kernel.cu").read_text() == HANG  # the student's code, under --state
    time.sleep(1.0)  # its worker and sandbox are running
    os.kill(first.process.pid, signal.SIGKILL)  # the service alone, as an OOM killer or `kill -9 PID` does
    first.process.wait()
    deadline = time.monotonic() + 10
    while (left := set(live_children()) - before) and time.monotonic() < deadline:
        time.sleep(0.2)
        while True:  # orphans come to pytest (a subreaper): reap the ones that ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    assert not left, f"processes left running after kill -9 of grade serve: {left}"
    assert (scratch / "tom" / "kernel.cu").exists()  # what kill -9 leaves, until the next start
    graded_in = left_in(temp_root)
    # and the grade's folders (a CPU grade's emulator build ahead has one of its own), all one worker's
    assert graded_in and all(name.startswith("sgemm-grade-") for name in graded_in), graded_in
    assert len(owners_of(graded_in)) == 1, graded_in
    older = first.state / "scratch" / ("0" * 32)  # and what an earlier kill left, a job long since regraded
    older.mkdir()
    (older / "kernel.cu").write_text(GOOD)
    second = Service(tmp_path, "--jobs", "1", env=env)
    second.start()
    try:
        log = " ".join(second.log_text().split())
        assert "cleared 2 jobs' scratch folders left by an earlier run" in log
        assert f"removed {len(graded_in)} temporary folders that graders which ended without cleaning up (kill -9) " \
               f"left in {temp_root}" in log
        assert not older.exists() and not set(graded_in) & set(left_in(temp_root))
        second.wait_for(queued["id"], ("running", "done"))  # queued again and picked up after the restart
        # What is in the temporary root now is the running service's own grade: nothing of the dead one.
        assert owners_of(left_in(temp_root)) <= set(descendants(second.process.pid))
    finally:
        second.kill()


@needs_cxx
def test_a_restart_mid_queue_loses_nothing(tmp_path):
    first = Service(tmp_path, "--jobs", "1").start()
    ids = []
    for student in ("erin", "frank", "grace"):
        code, queued = first.submit(student, zipped({"kernel.cu": BROKEN if student != "frank" else GOOD}))
        assert code == 202
        ids.append(queued["id"])
    # Killed once the first job is picked up, not after a fixed time: once grading got faster, a fixed second
    # saw the whole queue done. The others wait behind it (--jobs 1).
    first.wait_for(ids[0], ("running", "done"))
    first.kill()
    with sqlite3.connect(first.state / "jobs.sqlite") as db:
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


@needs_cxx
def test_a_queue_from_the_first_release_is_picked_up(tmp_path):
    """A state folder written before jobs had start and finish times: its waiting job is graded after an
    upgrade, and timed in the log."""
    (tmp_path / "state").mkdir()
    with sqlite3.connect(tmp_path / "state" / "jobs.sqlite") as db:
        db.executescript("CREATE TABLE jobs (id TEXT PRIMARY KEY, course TEXT NOT NULL, student TEXT NOT NULL, "
                         "status TEXT NOT NULL, created REAL NOT NULL, archive BLOB, result TEXT);")
        db.execute("INSERT INTO jobs VALUES (?, 'ece', 'uma', 'queued', ?, ?, NULL)",
                   ("ab" * 16, time.time(), zipped({"kernel.cu": BROKEN})))
    service = Service(tmp_path).start()
    try:
        assert service.result("ab" * 16)["result"]["outcome"] == "compile error"
    finally:
        service.kill()
    assert f"job {'ab' * 16} done course=ece student=uma outcome='compile error'" in service.log_text()


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


def lms_remote(tmp_path, url: str, *extra: str, command: str = "gradescope", student: str = "heidi",
               token: str = TOKEN, kernel: str = BROKEN) -> tuple[subprocess.CompletedProcess, dict, float]:
    """The LMS's container: `grade gradescope|prairielearn SUBMISSION RESULTS --remote URL`, and its file."""
    submission = tmp_path / "autograder" / "submission"
    submission.mkdir(parents=True, exist_ok=True)
    (submission / "kernel.cu").write_text(kernel)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    results = tmp_path / "autograder" / "results" / "results.json"
    started = time.monotonic()
    finished = subprocess.run([sys.executable, "-m", "grader", command, str(submission), str(results),
                               "--remote", url, "--token-file", str(token_file), "--student", student,
                               "--remote-timeout", "120", *extra], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    return finished, json.loads(results.read_text()), time.monotonic() - started


def test_the_lms_entry_sends_the_kernel_to_the_service_and_writes_its_result(service, tmp_path):
    finished, results, _ = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}")
    assert finished.returncode == 0, finished.stderr
    assert "compile error" in json.dumps(results) and "graded here" not in json.dumps(results)
    assert "regrade_reason" not in results["extra_data"]
    with sqlite3.connect(service.state / "jobs.sqlite") as db:
        assert db.execute("SELECT student, status FROM jobs").fetchall() == [("heidi", "done")]


def assert_marked(results: dict, code_words: str, student_words: str) -> None:
    """A results file that is not a grade: the outcome says so, the instructor's field says what happened, the
    student reads why in words, and no check is shown failed."""
    extra = results["extra_data"]
    assert extra["outcome"] == "grader error" and code_words in extra["regrade_reason"]
    assert results["output"].startswith("Not graded (grader error)") and "Score:" not in results["output"]
    assert student_words in results["output"] and "This is not a grade" in results["output"]
    assert results["tests"] == [] and results["score"] == 0


def test_a_wrong_token_is_a_marked_grader_error_not_a_zero(service, tmp_path):
    finished, results, _ = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}", token=WRONG_TOKEN)
    assert finished.returncode == 5, finished.stderr  # not graded: said on stderr, for the LMS's log
    assert "--token-file must hold this course's token" in " ".join(finished.stderr.split())
    assert_marked(results, "answered 401 to POST /v1/jobs", "did not accept this course's key")
    assert WRONG_TOKEN not in json.dumps(results)


def test_an_archive_over_the_cap_is_a_marked_grader_error(service, tmp_path):
    noise = base64.b64encode(os.urandom(120_000)).decode()  # compresses to more than --max-mb 0.05
    finished, results, _ = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}",
                                      kernel=f"{BROKEN}\n/* {noise} */\n")
    assert finished.returncode == 5 and "answered 413" in finished.stderr, finished.stderr
    assert_marked(results, "answered 413", "too large")


def test_the_hourly_limit_past_the_timeout_is_a_marked_grader_error(service, tmp_path):
    for _ in range(2):  # --per-hour 2: the limit is reached
        assert service.submit("heidi", zipped({"kernel.cu": BROKEN}))[0] == 202
    finished, results, seconds = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}", "--remote-timeout", "20")
    assert finished.returncode == 5 and "answered 429" in finished.stderr, finished.stderr
    assert_marked(results, "answered 429", "more often in the last hour")
    assert "more than the 20 s left of --remote-timeout" in results["extra_data"]["regrade_reason"]
    assert seconds < 20  # an hour's Retry-After is not waited out in a 20 s budget


@needs_cxx
def test_the_client_waits_as_retry_after_says_and_then_gets_its_grade(tmp_path):
    service = Service(tmp_path, "--per-hour", "1", "--rate-window", "6").start()
    try:
        assert service.submit("ivan", zipped({"kernel.cu": BROKEN}))[0] == 202
        finished, results, seconds = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}", student="ivan")
    finally:
        service.kill()
    assert finished.returncode == 0, finished.stderr
    assert results["extra_data"]["outcome"] == "compile error" and "regrade_reason" not in results["extra_data"]
    assert seconds >= 3  # it waited for the window before asking again
    posts = [line.split("-> ")[1][:3] for line in service.log_text().splitlines()
             if "POST /v1/jobs student='ivan'" in line]
    assert posts[0] == "202" and "429" in posts and posts[-1] == "202"


@needs_cxx
def test_a_superseded_submission_tells_the_student_the_newer_one_is_graded(tmp_path):
    """Two Gradescope runs of one student while the service is busy: the older gets a marked file saying the
    newer upload is graded instead, the newer gets its grade."""
    service = Service(tmp_path, "--jobs", "1").start()
    try:
        code, busy = service.submit("walt", zipped({"kernel.cu": HANG}))  # holds the only grader for seconds
        assert code == 202
        older = subprocess.Popen([sys.executable, "-c", "import sys, json, test_serve as t, pathlib; "
                                  f"print(json.dumps(t.lms_remote(pathlib.Path({str(tmp_path / 'a')!r}), "
                                  f"'http://127.0.0.1:{service.port}', student='xena')[1]))"],
                                 cwd=Path(__file__).parent, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while "student='xena' -> 202" not in service.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        (tmp_path / "b").mkdir()
        finished, newer, _ = lms_remote(tmp_path / "b", f"http://127.0.0.1:{service.port}", student="xena",
                                        kernel=BROKEN.replace("{", "{ ", 1))
        first = json.loads(older.communicate(timeout=300)[0])
    finally:
        service.kill()
    assert finished.returncode == 0 and newer["extra_data"]["outcome"] == "compile error"
    assert_marked(first, "superseded by the student's newer upload", "your newest submission is graded instead")


def gradescope_metadata(folder: Path, student: str, created_at: str) -> None:
    """Gradescope's /autograder/submission_metadata.json, beside the submission (its documented fields)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission_metadata.json").write_text(json.dumps(
        {"id": 123456, "created_at": created_at, "users": [{"email": f"{student}@u.edu", "id": student,
                                                            "name": student}]}))


@needs_cxx
def test_submissions_count_in_the_lms_order_whatever_order_they_arrive_in(tmp_path):
    """Two Gradescope containers of one student post out of order: the newer submission (by Gradescope's
    created_at) arrives first and waits in the queue; the older arrives second. The older is superseded by
    the newer at once and its file says so; the newer is graded, never superseded by the older."""
    service = Service(tmp_path, "--jobs", "1").start()
    url = f"http://127.0.0.1:{service.port}"
    try:
        assert service.submit("walt", zipped({"kernel.cu": HANG}))[0] == 202  # the only grader is busy a while
        gradescope_metadata(tmp_path / "newer" / "autograder", "yuri", "2026-03-01T14:22:32.365935-07:00")
        gradescope_metadata(tmp_path / "older" / "autograder", "yuri", "2026-03-01T14:20:00-07:00")
        newer = subprocess.Popen([sys.executable, "-c", "import json, pathlib, test_serve as t; "
                                  f"print(json.dumps(t.lms_remote(pathlib.Path({str(tmp_path / 'newer')!r}), {url!r}, "
                                  "student='yuri')[1]))"], cwd=Path(__file__).parent, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while "student='yuri'" not in service.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        finished, older, _ = lms_remote(tmp_path / "older", url, student="yuri", kernel=GOOD)  # arrives second
        newest = json.loads(newer.communicate(timeout=300)[0])
    finally:
        service.kill()
    assert finished.returncode == 0 and newest["extra_data"]["outcome"] == "compile error"  # graded, not replaced
    assert_marked(older, "superseded by the student's newer upload", "your newest submission is graded instead")
    with sqlite3.connect(service.state / "jobs.sqlite") as db:
        jobs = db.execute("SELECT id, status, superseded_by, submitted FROM jobs WHERE student = 'yuri' "
                          "ORDER BY created").fetchall()
    (first_id, first, _, first_at), (_, second, by, second_at) = jobs
    assert (first, second, by) == ("done", "superseded", first_id) and second_at < first_at
    assert "(submitted before it, arrived after)" in service.log_text()


def test_the_lms_time_of_a_submission_is_read_where_each_lms_puts_it(tmp_path):
    """Gradescope's created_at, and the time the PrairieLearn question's server.py stamps into the submitted
    answers, which PrairieLearn writes into the job's data.json; the service takes both."""
    import importlib.util

    from grader.classroom.remote import submitted_at_of
    from grader.serve.app import submission_time

    gradescope_metadata(tmp_path / "autograder", "yuri", "2026-03-01T14:22:32.365935-07:00")
    assert submitted_at_of(tmp_path / "autograder" / "submission", "") == "2026-03-01T14:22:32.365935-07:00"
    spec = importlib.util.spec_from_file_location("pl_server", ROOT / "prairielearn" / "questions" / "tiledSgemm" /
                                                  "server.py")
    question = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(question)
    data = {"submitted_answers": {"_files": []}}
    question.parse(data)  # as PrairieLearn calls it when the student submits
    (tmp_path / "grade" / "data").mkdir(parents=True)
    (tmp_path / "grade" / "data" / "data.json").write_text(json.dumps(data))
    stamped = submitted_at_of(tmp_path / "grade" / "student", "")
    assert abs(submission_time(stamped) - time.time()) < 60
    assert submitted_at_of(tmp_path / "grade" / "student", "2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"
    assert submitted_at_of(tmp_path / "nothing" / "student", "") == ""


def test_prairielearn_gets_the_marker_and_an_attempt_that_does_not_count(service, tmp_path):
    finished, results, _ = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}", command="prairielearn",
                                      token=WRONG_TOKEN)
    assert finished.returncode == 5, finished.stderr
    assert results["gradable"] is False and "401" in results["regrade_reason"]
    assert "did not accept this course's key" in results["format_errors"][0]
    assert results["message"] == "grader error: not graded"


@pytest.mark.parametrize("fallback", ["fail", "cpu"])
def test_a_service_that_cannot_be_reached_is_the_instructors_choice(tmp_path, fallback):
    finished, results, seconds = lms_remote(tmp_path, f"http://127.0.0.1:{free_port()}", "--remote-fallback",
                                            fallback, "--remote-timeout", "4")
    text = json.dumps(results)
    # Not graded: exit 5, the reason on stderr; graded here on the CPU: its grade stands (exit 0), the reason said.
    assert finished.returncode == (5 if fallback == "fail" else 0) and "could not be reached" in text
    assert "could not be reached" in finished.stderr
    assert "still so after --remote-timeout 4 s" in results["extra_data"]["regrade_reason"]  # it tried again
    if fallback == "fail":
        assert_marked(results, "could not be reached", "could not be reached")
    else:
        assert "graded here, not by the grading service" in text and "compile error" in text


def test_the_leaderboard_ranks_each_students_best_timed_run(tmp_path):
    """Jobs finished before this start (a GPU host's timed runs), read back from the queue's database."""
    from grader.result import TIMING, SubmissionResult, passed, skipped
    from grader.serve.store import JobStore

    def timed(gflops: float | None) -> SubmissionResult:
        timing = (passed("speed vs reference", TIMING, 10, metrics={"ratio": 900 / gflops, "student_gflops": gflops})
                  if gflops else skipped("speed vs reference", TIMING, 10, "not timed: a case failed"))
        return SubmissionResult("s", "graded", [timing])

    store = JobStore(tmp_path / "state" / "jobs.sqlite")
    for course, student, gflops in (("ece", "ivan", 700.0), ("ece", "judy", 910.0), ("ece", "ivan", 820.0),
                                    ("ece", "ken", None), ("other", "leo", 5000.0)):
        job = store.add(course, student, b"")
        store.claim()
        store.finish(job.id, timed(gflops))
    store.close()
    running = Service(tmp_path).start()
    try:
        code, answer = running.get("/v1/leaderboard")
        assert running.get("/v1/leaderboard", token=None)[0] == 401
    finally:
        running.kill()
    assert code == 200
    assert [(row["student"], row["gflops"]) for row in answer["leaderboard"]] == [("judy", 910.0), ("ivan", 820.0)]


@pytest.mark.gpu
@needs_gpu
def test_on_a_gpu_the_service_times_the_kernel_and_ranks_it(tmp_path):
    """The service on a GPU host, as an LMS container without one uses it: the kernel in a folder of the
    student's archive is found, graded and timed, the student told which file, and the run ranked."""
    service = Service(tmp_path, "--backend", "gpu").start()
    try:
        code, queued = service.submit("vera", zipped({"lab3/kernel.cu": GOOD, "lab3/notes.txt": "mine"}))
        assert code == 202
        result = service.result(queued["id"], timeout_s=600)["result"]
        code, board = service.get("/v1/leaderboard")
        finished, results, _ = lms_remote(tmp_path, f"http://127.0.0.1:{service.port}", student="vera",
                                          kernel=GOOD)
    finally:
        service.kill()
    assert result["outcome"] == "graded" and result["score"] == result["max_score"]
    assert result["intake_notes"] == ["graded lab3/kernel.cu, the only kernel.cu in your submission"]
    timing = next(check for check in result["checks"] if check["kind"] == "timing")
    assert timing["metrics"]["student_gflops"] > 0
    assert code == 200 and [row["student"] for row in board["leaderboard"]] == ["vera"]
    assert finished.returncode == 0 and results["leaderboard"] and "regrade_reason" not in results["extra_data"]


def test_the_service_keeps_results_as_a_batch_does_and_reads_back_only_what_it_wrote(tmp_path):
    """One results store (classroom/store.py): each finished job's result written whole and signed; one changed
    behind the service's back is not served as the grade."""
    from grader.result import CASE, SubmissionResult, passed
    from grader.serve.store import JobStore

    store = JobStore(tmp_path / "state" / "jobs.sqlite")
    try:
        job = store.add("ece", "ivan", b"")
        store.claim()
        store.finish(job.id, SubmissionResult("ivan", "graded", [passed("square_16", CASE, 3)]))
        assert store.get(job.id).result["score"] == 3
        stored = tmp_path / "state" / "results" / f"{job.id}.json"
        stored.write_text(stored.read_text().replace('"score": 3', '"score": 300'))
        assert store.get(job.id).result is None and store.results("ece") == []
    finally:
        store.close()
