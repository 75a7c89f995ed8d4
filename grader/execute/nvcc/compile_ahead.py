"""The cubins a GPU child would compile first, compiled by the parent in the sandbox while the child starts.

A child learns its GPU's toolchain once CUDA is up, then compiles the student's file and the reference: nvcc's
0.3-0.5 s is the longest step of a grade whose cubins are not cached (a class's next student, a first grade).
With the toolchain hint (cubin_cache.py: the last child's report, or the parent's own guess) the parent starts
those compiles as the child is spawned, each in a sandbox of its own, with the flags pycuda gives nvcc for the
same text. When the child reports its toolchain and it is the hint's, each cubin that was built is kept in the
cache under the key the parent computed from the text it sent, and offered as any cached cubin. What did not
build, or was built for another toolchain, the child compiles itself, as without this: a compile error's
message comes from there. A student compile that outlives the compile limit here (counted as a child's phase
is, deadline.py) is the compile's time-out.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..confine.deadline import Deadline
from ..confine.proc import BACKGROUND_NICE, kill_group
from ..confine.sandbox import COMPILER_LIMITS, Confinement, Sandbox, child_environment
from ..protocol import read_untrusted
from .compile import CUBIN_FILE, MAX_CUBIN_BYTES, cubin_command, nvcc_path, write_sources
from .cubin_cache import Exchange

DEADLINE_CHECK_S = 0.5  # how often a build's deadline is looked at while it runs


@dataclass
class Build:
    role: str  # "student", "device_side" or "reference"
    folder: Path
    process: subprocess.Popen
    deadline: Deadline  # the compile limit, counted as the child's is: its waits for a CPU are not its time

    def wait(self) -> bool:
        """Wait for nvcc to end; False if it ran past its deadline first."""
        while self.process.poll() is None:
            left = self.deadline.remaining()
            if left <= 0:
                return False
            try:
                self.process.wait(timeout=min(left, DEADLINE_CHECK_S))
            except subprocess.TimeoutExpired:
                continue
        return True


class CompilesAhead:
    """One job's builds ahead, for the toolchain they were started for."""

    def __init__(self, toolchain: list[str], builds: dict[str, Build]):
        self.toolchain, self.builds = toolchain, builds
        self.kept: set[str] = set()  # the keys of the cubins built and kept in the cache

    @classmethod
    def start(cls, exchange: Exchange, toolchain: list[str], sandbox: Sandbox, limit_s: float,
              folder: Path) -> CompilesAhead | None:
        """nvcc on each of the job's texts the cache lacks for this toolchain; None when there is nothing to
        build or no nvcc. The child's fallback (its device side alone) is built only when the whole file fails,
        by the child."""
        nvcc = nvcc_path()
        arch, nvcc_version = toolchain
        missing = {key: role for key, role in exchange.missing(arch, nvcc_version).items() if role != "device_side"}
        if nvcc is None or not missing:
            return None
        builds = {}
        for key, role in missing.items():
            work = Path(tempfile.mkdtemp(prefix=f"ahead-{role}-", dir=folder))
            work.chmod(0o711)  # the sandbox's uid must reach it
            write_sources(work, exchange.source(role), exchange.headers(role))
            confinement = Confinement(work, COMPILER_LIMITS, cuda=True, seccomp=True, nice=BACKGROUND_NICE)
            try:
                command = cubin_command(nvcc, exchange.job.options, arch, bool(exchange.headers(role)))
                process = sandbox.popen(command, confinement,
                                        env=child_environment(str(work), {}), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except (OSError, RuntimeError):
                shutil.rmtree(work, ignore_errors=True)
                continue  # the child compiles it, and says what went wrong
            builds[key] = Build(role, work, process, Deadline(process.pid, limit_s))
        return cls(toolchain, builds) if builds else None

    def finish(self, exchange: Exchange, arch: str, nvcc_version: str) -> bool:
        """Once the child reported its toolchain: keep what was built for it. True if the student's own build
        ran past the compile limit (the compile timed out); the rest is the child's to compile."""
        if [arch, nvcc_version] != self.toolchain:
            self.cancel()
            return False
        timed_out = False
        for key, build in self.builds.items():
            finished = build.wait()
            kill_group(build.process)  # also what it left behind
            if not finished:
                timed_out = timed_out or build.role == "student"
            elif build.process.returncode == 0:
                try:
                    if exchange.keep(key, read_untrusted(build.folder / CUBIN_FILE, MAX_CUBIN_BYTES)):
                        self.kept.add(key)
                except OSError:
                    pass  # no cubin to read after all: the child compiles it
        self._clean()
        return timed_out

    def cancel(self) -> None:
        for build in self.builds.values():
            kill_group(build.process)
        self._clean()

    def _clean(self) -> None:
        for build in self.builds.values():
            shutil.rmtree(build.folder, ignore_errors=True)
