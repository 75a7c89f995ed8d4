"""Grades the service's queued jobs, several at once, each as `grade batch` grades one student: the
archive read by batch intake (hostile archives refused member by member), the kernel graded in a worker
process of its own with the student's code sandboxed, and only this process writing the result."""
from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from ..batch import Workers, _refused
from ..cases import Case
from ..cluster import grade_task, remote_task, task_resources, task_result
from ..config import Config
from ..intake import discover
from ..pipeline import RunPlan, not_graded
from ..result import GRADER_ERROR, SubmissionResult
from .store import JobStore

IDLE_POLL_S = 0.2


class JobRunner:
    def __init__(self, store: JobStore, config: Config, cases: list[Case], plan: RunPlan, workers: int,
                 client=None):
        """`client`: a Dask client; each job then runs as a task on the cluster's workers (cluster.py)."""
        self.store, self.config, self.cases, self.plan, self.client = store, config, cases, plan, client
        self.stopping, self.wake = threading.Event(), threading.Event()
        self.workers = Workers()
        self.threads = [threading.Thread(target=self._loop, daemon=True, name=f"grader-{i}") for i in range(workers)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """Stops taking jobs and kills the ones being graded: they are queued again at the next start."""
        self.stopping.set()
        self.wake.set()
        self.workers.stop()
        for thread in self.threads:
            thread.join(timeout=10)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            claimed = self.store.claim()
            if claimed is None:
                self.wake.wait(IDLE_POLL_S)
                self.wake.clear()
                continue
            job, archive = claimed
            try:
                result = self.grade(job.student, archive)
            except KeyboardInterrupt:  # Workers.stop(): the service is stopping; the job stays "running"
                return
            if self.stopping.is_set():
                return  # killed mid-grade: not a result; requeue_running() grades it again
            data = result.to_dict()
            self.store.finish(job.id, data)

    def _grade_entry(self, entry) -> SubmissionResult:
        if self.client is None:
            return self.workers.grade(entry, self.config, self.cases, self.plan)
        task = remote_task(entry, self.config, self.cases, self.plan)
        future = self.client.submit(grade_task, task, resources=task_resources(self.plan), pure=False)
        return task_result(future, entry, self.config, self.cases, "submit it again")

    def grade(self, student: str, archive: bytes) -> SubmissionResult:
        work = Path(tempfile.mkdtemp(prefix="sgemm-serve-"))
        try:
            upload = work / "upload" / f"{student}.zip"
            upload.parent.mkdir()
            upload.write_bytes(archive)
            intake = discover([upload], work / "submissions")
            if not intake.submissions:
                refusal = next((r for r in intake.refused), None)
                reason = refusal.reason if refusal else "no kernel (.cu file) in the archive"
                result = (_refused(refusal, self.config, self.cases) if refusal and refusal.key else
                          not_graded(Path(student), self.config, self.cases, f"not graded: {reason}"))
            else:
                entry = intake.submissions[0]
                result = self._grade_entry(entry)
                result.intake_notes = list(entry.notes)
        except OSError as error:  # the service's own disk: a grader error, graded again on request
            result = not_graded(Path(student), self.config, self.cases, f"grader error: {error.strerror}",
                                GRADER_ERROR)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result.submission = result.student_id = student
        return result
