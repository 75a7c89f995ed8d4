"""The emulator's build of a submission, started by the parent while its CPU driver's Python starts.

A driver's first 0.2 s are an interpreter and its imports; its build of the student's unit (g++, 0.4 s for a new
submission) came after them. The parent starts the same build (build.py's `build`, with the job's text, contract,
tile, headers, cache and sandbox: the same cache key, g++ in the same confinement) on a thread as it spawns the
driver. One build of a key runs at a time (build.py's lock on the key): the driver's own build waits for the one
ahead and takes the binary it kept, or the student's compile error it met (kept beside the key, worded as build.py
words it whatever folder it was built in); where it kept neither (a failure of the grader's, a time-out, a stop),
the driver builds it itself, as without this. Only the driver reports: what the build ahead met reaches a verdict
through the cache alone.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from ..confine.sandbox import Sandbox
from ..job import Job
from .build import Build, Compiles, build

STOP_WAIT_S = 10.0  # for a stopped build's thread to end (its g++ is killed at once)


class BuildAhead:
    """One job's emulator build, on a thread of the parent's."""

    def __init__(self, job: Job, limit_s: float, folder: Path):
        self.compiles = Compiles()
        self.folder = folder
        self.built: Build | None = None  # once the thread is done, where it did not fail
        self.thread = threading.Thread(target=self._build, args=(job, limit_s), daemon=True,
                                       name="emulator-build-ahead")

    @classmethod
    def start(cls, job: Job, limit_s: float, workdir: Path) -> BuildAhead:
        """The build started, in a folder of its own under `workdir`. `limit_s`: the driver's compile limit,
        which its deadline decides (its waits for a CPU, and this build's, forgiven: at most the limit again);
        each g++ here may run as long as that deadline can stretch, so that the time-out is the driver's as
        without this, and this build is stopped when the driver ends."""
        folder = Path(tempfile.mkdtemp(prefix="ahead-emulator-", dir=workdir))
        folder.chmod(0o711)  # the sandbox's uid must reach its folder inside
        ahead = cls(job, 2 * limit_s, folder)
        ahead.thread.start()
        return ahead

    def _build(self, job: Job, limit_s: float) -> None:
        try:
            self.built = build(job.original_source, job.contract, job.tile, Path(job.cache_dir), self.folder,
                               Sandbox(**job.sandbox), limit_s, job.headers, self.compiles)
        except Exception:  # noqa: BLE001 - the driver builds it itself, and says what went wrong
            self.built = None

    def kept_for_the_driver(self) -> bool:
        """Whether this build compiled the unit and kept the binary (so the driver, which waits for it, did not
        compile it): asked once the driver said it took the binary from the cache."""
        self.thread.join(STOP_WAIT_S)
        built = self.built
        return built is not None and built.compiled and built.binary is not None

    def stop(self) -> None:
        """The driver ended: its g++ killed if it still runs (a binary it kept stays kept), its folder removed."""
        self.compiles.stop()
        self.thread.join(STOP_WAIT_S)
        shutil.rmtree(self.folder, ignore_errors=True)
