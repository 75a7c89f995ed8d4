"""Grades the service's queued jobs, several at once, each as `grade batch` grades one student: the
archive read member by member (student_archive: hostile members refused and noted), the kernel graded in a
worker process of its own with the student's code sandboxed, and only this process writing the result.

A job's archive is unpacked under the service's state folder (`scratch/<job id>`), never in /tmp: a
kill -9 of the service leaves it where the next start clears it. The grade's own scratch folder is in the
temporary root, named for the worker process grading it (leftovers.py), and the next start clears that too."""
from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import replace
from pathlib import Path

from ..cases import Case
from ..classroom.cluster import grade_task, remote_task, task_resources, task_result
from ..classroom.workers import Workers, emulator_share
from ..config import Config
from ..intake.archive import safe_name
from ..intake.intake import Entry
from ..intake.student_archive import read_student_archive
from ..pipeline import RunPlan, not_graded
from ..result import GRADER_ERROR, SubmissionResult
from .store import Job, JobStore

IDLE_POLL_S = 0.2
log = logging.getLogger("grader.serve")


def clear_scratch(scratch: Path) -> int:
    """Removes what jobs of an earlier run left (a kill -9 of the service); how many folders it held."""
    left = list(scratch.iterdir()) if scratch.is_dir() else []
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    return len(left)


class JobRunner:
    def __init__(self, store: JobStore, config: Config, cases: list[Case], plan: RunPlan, workers: int,
                 scratch: Path, client=None):
        """`client`: a Dask client; each job then runs as a task on the cluster's workers (cluster.py)."""
        self.store, self.config, self.cases, self.client = store, config, cases, client
        self.plan = replace(plan, emulator_workers=plan.emulator_workers or emulator_share(workers))
        self.scratch = scratch
        self.stopping, self.wake = threading.Event(), threading.Event()
        self.workers = Workers(forked=client is None)  # jobs graded here fork from one template
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
                result = self.grade(job, archive)
            except KeyboardInterrupt:  # Workers.stop(): the service is stopping; the job stays "running"
                return
            if self.stopping.is_set():
                return  # killed mid-grade: not a result; requeue_running() grades it again
            done = self.store.finish(job.id, result)
            log.info("job %s done course=%s student=%s outcome=%r score=%s/%s queued=%.1fs graded=%.1fs", job.id,
                     job.course, job.student, result.outcome, result.score, result.checkable_max,
                     done.queued_s if done else 0.0, done.graded_s if done else 0.0)
            self.wake.set()  # the student's next job, held back while this one was graded, may go now

    def _grade_entry(self, entry: Entry) -> SubmissionResult:
        if self.client is None:
            return self.workers.grade(entry, self.config, self.cases, self.plan)
        task = remote_task(entry, self.config, self.cases, self.plan)
        future = self.client.submit(grade_task, task, resources=task_resources(self.plan), pure=False)
        return task_result(future, entry, self.config, self.cases, "submit it again")

    def grade(self, job: Job, archive: bytes) -> SubmissionResult:
        work = self.scratch / job.id
        student = job.student
        try:
            intake = read_student_archive(archive, work / safe_name(student),
                                          handed_in=self.config.compile.handed_in_headers)
            if intake.folder is None:
                result = not_graded(Path(student), self.config, self.cases, intake.refusal)
            else:
                entry = Entry(intake.folder.name, student, "", intake.folder, "upload", intake.entry,
                              notes=intake.notes)
                result = self._grade_entry(entry)
            result.intake_notes = list(intake.notes)
        except OSError as error:  # the service's own disk: a grader error, graded again on request
            result = not_graded(Path(student), self.config, self.cases, f"grader error: {error.strerror}",
                                GRADER_ERROR)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        result.submission = result.student_id = student
        return result
