"""The service's jobs, in SQLite: a restart loses none, and a job that was running is queued again.

A student has at most one job waiting: a newer submission supersedes the older queued one (the newest wins),
and a student's job is never graded while another of theirs is, so their last result is their last upload's.
"Newer" is by the LMS's own time of the submission (`submitted`, which the LMS container sends; the upload's
arrival where it sends none): two containers may post out of order, and a submission that arrives after a
newer one of the same student is superseded at once by it, never graded over it.

Only the service's own process reads and writes this file; it lives in the service's state folder, which
no sandboxed process can reach.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..classroom.store import ResultStore
from ..result import SubmissionResult

QUEUED, RUNNING, DONE, SUPERSEDED = "queued", "running", "done", "superseded"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    course TEXT NOT NULL,
    student TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    archive BLOB,
    result TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created);
CREATE INDEX IF NOT EXISTS jobs_by_student ON jobs (course, student, created);
"""
# Added after the first release: a state folder from then gets them at the next start.
COLUMNS = {"started": "REAL", "finished": "REAL", "superseded_by": "TEXT", "submitted": "REAL"}
FIELDS = "id, course, student, status, created, started, finished, superseded_by, submitted"
SUBMITTED = "COALESCE(submitted, created)"  # a job of an earlier release has no LMS time: its arrival's


@dataclass
class Job:
    id: str
    course: str
    student: str
    status: str
    created: float
    started: float | None = None
    finished: float | None = None
    superseded_by: str | None = None
    submitted: float | None = None  # when the LMS took the submission (epoch seconds)
    result: dict | None = None
    supersedes: list[str] = field(default_factory=list)  # set by add(): the student's queued jobs it replaced

    @property
    def queued_s(self) -> float:
        """Seconds from the upload until grading began (until now, while it waits)."""
        return (self.started or self.finished or time.time()) - self.created

    @property
    def graded_s(self) -> float:
        return (self.finished - self.started) if self.started and self.finished else 0.0


class JobStore:
    def __init__(self, path: Path, results: ResultStore | None = None):
        """The queue in `path` (SQLite); each finished job's result in `results` (default: results/ beside it),
        the store a batch keeps its students' in, signed, so a result is read back only as it was written."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.results_store = results or ResultStore(path.parent / "results")
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        have = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
        for name, kind in COLUMNS.items():
            if name not in have:
                self.db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")
        self.lock = threading.Lock()  # one connection, used by the web server's and the runners' threads

    def requeue_running(self) -> int:
        """After a restart: a job that was being graded when the service stopped is graded again."""
        with self.lock:
            return self.db.execute("UPDATE jobs SET status = ?, started = NULL WHERE status = ?",
                                   (QUEUED, RUNNING)).rowcount

    def add(self, course: str, student: str, archive: bytes, submitted: float | None = None) -> Job:
        """The new job, submitted by the LMS at `submitted` (now, if it does not say). The student's queued jobs
        it supersedes (their archives dropped) are in `supersedes`; where the student already has a newer job
        (waiting, being graded or done), the new one is superseded by it at once, and its archive not kept."""
        created = time.time()
        job = Job(uuid.uuid4().hex, course, student, QUEUED, created, submitted=created if submitted is None
                  else submitted)
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            newer = self.db.execute(
                f"SELECT id FROM jobs WHERE course = ? AND student = ? AND status IN (?, ?, ?) AND {SUBMITTED} > ? "
                f"ORDER BY {SUBMITTED} DESC LIMIT 1",
                (course, student, QUEUED, RUNNING, DONE, job.submitted)).fetchone()
            if newer is not None:
                job.status, job.superseded_by, job.finished, archive = SUPERSEDED, newer[0], created, None
            else:
                job.supersedes = [row[0] for row in self.db.execute(
                    "SELECT id FROM jobs WHERE course = ? AND student = ? AND status = ?", (course, student, QUEUED))]
                self.db.execute("UPDATE jobs SET status = ?, superseded_by = ?, finished = ?, archive = NULL "
                                "WHERE course = ? AND student = ? AND status = ?",
                                (SUPERSEDED, job.id, created, course, student, QUEUED))
            self.db.execute("INSERT INTO jobs (id, course, student, status, created, archive, superseded_by, finished, "
                            "submitted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (job.id, course, student, job.status, created, archive, job.superseded_by, job.finished,
                             job.submitted))
            self.db.execute("COMMIT")
        return job

    def submitted_since(self, course: str, student: str, since: float) -> list[float]:
        """When the student's jobs since `since` were uploaded, oldest first (superseded ones count too)."""
        with self.lock:
            rows = self.db.execute("SELECT created FROM jobs WHERE course = ? AND student = ? AND created >= ? "
                                   "ORDER BY created", (course, student, since)).fetchall()
        return [created for (created,) in rows]

    def position(self, job: Job) -> int:
        """1 for the next job to be graded; 0 once it is being graded or done."""
        if job.status != QUEUED:
            return 0
        with self.lock:
            ahead = self.db.execute("SELECT COUNT(*) FROM jobs WHERE status = ? AND created < ?",
                                    (QUEUED, job.created)).fetchone()[0]
        return ahead + 1

    def counts(self) -> dict[str, int]:
        with self.lock:
            rows = self.db.execute("SELECT status, COUNT(*) FROM jobs WHERE status IN (?, ?) GROUP BY status",
                                   (QUEUED, RUNNING)).fetchall()
        return {QUEUED: 0, RUNNING: 0, **dict(rows)}

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            row = self.db.execute(f"SELECT {FIELDS}, result FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        job = Job(*row[:9])
        job.result = self._result(job.id, row[9]) if job.status == DONE else None
        return job

    def results(self, course: str) -> list[tuple[str, dict]]:
        """(student, result) of every finished job of the course, oldest first."""
        with self.lock:
            rows = self.db.execute("SELECT id, student, result FROM jobs WHERE course = ? AND status = ? "
                                   "ORDER BY created", (course, DONE)).fetchall()
        found = [(student, self._result(job_id, legacy)) for job_id, student, legacy in rows]
        return [(student, result) for student, result in found if result is not None]

    def _result(self, job_id: str, legacy: str | None) -> dict | None:
        """A finished job's result from the result store; a service of an earlier release kept it in its row."""
        stored = self.results_store.get(job_id)
        if stored is not None:
            return stored.to_dict()
        return json.loads(legacy) if legacy else None

    def claim(self) -> tuple[Job, bytes] | None:
        """The oldest queued job whose student has none being graded, now marked running, with its archive;
        None when there is none."""
        with self.lock:
            row = self.db.execute(
                f"SELECT {FIELDS}, archive FROM jobs AS j WHERE status = ? AND NOT EXISTS (SELECT 1 FROM jobs "
                "WHERE course = j.course AND student = j.student AND status = ?) ORDER BY created LIMIT 1",
                (QUEUED, RUNNING)).fetchone()
            if row is None:
                return None
            started = time.time()
            self.db.execute("UPDATE jobs SET status = ?, started = ? WHERE id = ?", (RUNNING, started, row[0]))
        job = Job(*row[:9])
        job.status, job.started = RUNNING, started
        return job, row[9]

    def finish(self, job_id: str, result: SubmissionResult) -> Job | None:
        """The job's result stored whole and signed, then the job marked done (a service killed in between
        grades the job again at its next start)."""
        self.results_store.put(job_id, result)
        with self.lock:
            self.db.execute("UPDATE jobs SET status = ?, result = NULL, archive = NULL, finished = ? WHERE id = ?",
                            (DONE, time.time(), job_id))
        return self.get(job_id)

    def close(self) -> None:
        with self.lock:
            self.db.close()
