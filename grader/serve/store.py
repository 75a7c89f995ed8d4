"""The service's jobs, in SQLite: a restart loses none, and a job that was running is queued again.

Only the service's own process reads and writes this file; it lives in the service's state folder, which
no sandboxed process can reach.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

QUEUED, RUNNING, DONE = "queued", "running", "done"

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


@dataclass
class Job:
    id: str
    course: str
    student: str
    status: str
    created: float
    result: dict | None = None


class JobStore:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self.lock = threading.Lock()  # one connection, used by the web server's and the runners' threads

    def requeue_running(self) -> int:
        """After a restart: a job that was being graded when the service stopped is graded again."""
        with self.lock:
            return self.db.execute("UPDATE jobs SET status = ? WHERE status = ?", (QUEUED, RUNNING)).rowcount

    def add(self, course: str, student: str, archive: bytes) -> Job:
        job = Job(uuid.uuid4().hex, course, student, QUEUED, time.time())
        with self.lock:
            self.db.execute("INSERT INTO jobs (id, course, student, status, created, archive) "
                            "VALUES (?, ?, ?, ?, ?, ?)", (job.id, course, student, QUEUED, job.created, archive))
        return job

    def in_flight(self, course: str, student: str) -> bool:
        with self.lock:
            row = self.db.execute("SELECT 1 FROM jobs WHERE course = ? AND student = ? AND status != ? LIMIT 1",
                                  (course, student, DONE)).fetchone()
        return row is not None

    def submitted_since(self, course: str, student: str, since: float) -> int:
        with self.lock:
            return self.db.execute("SELECT COUNT(*) FROM jobs WHERE course = ? AND student = ? AND created >= ?",
                                   (course, student, since)).fetchone()[0]

    def position(self, job: Job) -> int:
        """1 for the next job to be graded; 0 once it is being graded or done."""
        if job.status != QUEUED:
            return 0
        with self.lock:
            ahead = self.db.execute("SELECT COUNT(*) FROM jobs WHERE status = ? AND created < ?",
                                    (QUEUED, job.created)).fetchone()[0]
        return ahead + 1

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            row = self.db.execute("SELECT id, course, student, status, created, result FROM jobs WHERE id = ?",
                                  (job_id,)).fetchone()
        if row is None:
            return None
        return Job(*row[:5], result=json.loads(row[5]) if row[5] else None)

    def results(self, course: str) -> list[tuple[str, dict]]:
        """(student, result) of every finished job of the course, oldest first."""
        with self.lock:
            rows = self.db.execute("SELECT student, result FROM jobs WHERE course = ? AND status = ? AND result "
                                   "IS NOT NULL ORDER BY created", (course, DONE)).fetchall()
        return [(student, json.loads(result)) for student, result in rows]

    def claim(self) -> tuple[Job, bytes] | None:
        """The oldest queued job, now marked running, with its archive; None when none is queued."""
        with self.lock:
            row = self.db.execute("SELECT id, course, student, created, archive FROM jobs WHERE status = ? "
                                  "ORDER BY created LIMIT 1", (QUEUED,)).fetchone()
            if row is None:
                return None
            self.db.execute("UPDATE jobs SET status = ? WHERE id = ?", (RUNNING, row[0]))
        return Job(row[0], row[1], row[2], RUNNING, row[3]), row[4]

    def finish(self, job_id: str, result: dict) -> None:
        with self.lock:
            self.db.execute("UPDATE jobs SET status = ?, result = ?, archive = NULL WHERE id = ?",
                            (DONE, json.dumps(result), job_id))

    def close(self) -> None:
        with self.lock:
            self.db.close()
