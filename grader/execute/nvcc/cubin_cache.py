"""The compile cache, kept by the parent: no sandboxed child can read or write it.

When the GPU child knows its GPU's architecture and nvcc's version (the `toolchain` event), the parent
copies the cached cubins of this job's own sources into the child's folder. What the child had to compile
it leaves in `new-cubins/`; the parent stores only files whose names are the keys it computed itself from
the sources it sent, so a child can never place a cubin under another text's key.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from concurrent.futures import Future
from pathlib import Path

from ...cache_file import keep
from ..job import Job
from ..protocol import read_untrusted
from .compile import MAX_CUBIN_BYTES, cubin_key

OFFERED, BUILT = "cubins", "new-cubins"
GRADED = "graded-student.cubin"  # in the child's folder: the student's module it loaded and ran
ARCH = re.compile(r"sm_\d{2,3}[a-z]?")
MAX_NVCC_VERSION = 4096


class Exchange:
    def __init__(self, job: Job, workdir: Path):
        self.job, self.workdir = job, workdir
        self.roles: dict[str, str] = {}  # key -> "student", "device_side" or "reference"

    def _sources(self) -> dict[str, str]:
        sources = {"student": self.job.student_source, "reference": self.job.reference_source}
        if self.job.device_side_source:
            sources["device_side"] = self.job.device_side_source
        return sources

    def source(self, role: str) -> str:
        return self._sources()[role]

    def headers(self, role: str) -> dict[str, str]:
        return {} if role == "reference" else self.job.headers

    def cached(self, key: str) -> Path:
        return Path(self.job.cache_dir, key + ".cubin")

    def keys(self, arch: str, nvcc_version: str) -> dict[str, str]:
        """key -> role, for each of the job's texts whose cubin the cache may keep."""
        return {cubin_key(source, self.job.options, arch, nvcc_version, self.headers(role)): role
                for role, source in self._sources().items() if _cacheable(source, self.headers(role))}

    def missing(self, arch: str, nvcc_version: str) -> dict[str, str]:
        """key -> role, for those of them the cache does not hold."""
        return {key: role for key, role in self.keys(arch, nvcc_version).items() if not self.cached(key).is_file()}

    def offer(self, arch: str, nvcc_version: str) -> None:
        """Copy into the child's folder each of its cached cubins not offered yet: those the cache held before
        it started (on the hint), and those kept since (built ahead by the parent, compile_ahead.py)."""
        self.roles = self.keys(arch, nvcc_version)
        offered = self.workdir / OFFERED
        offered.mkdir(mode=0o755, exist_ok=True)
        offered.chmod(0o755)  # whatever the umask: made after the child started, by the parent, for the child's uid
        for key in self.roles:
            target = offered / f"{key}.cubin"
            if self.cached(key).is_file() and not os.path.lexists(target):
                shutil.copyfile(self.cached(key), target)
                os.chmod(target, 0o644)

    def take(self, used: dict[str, str]) -> str:
        """Store what the child compiled; return the cache path of the student's cubin, if there is one: the
        one kept under its text's key, else the module the child says it graded, kept under its content's hash
        (a text the cache does not key, such as one including a header not handed in)."""
        for key in self.roles:
            if not self.cached(key).is_file():
                self._store(key)
        key = used.get("student", "")
        if self.roles.get(key) in ("student", "device_side") and self.cached(key).is_file():
            return str(self.cached(key))
        return self._graded()

    def _graded(self) -> str:
        try:
            data = read_untrusted(self.workdir / GRADED, MAX_CUBIN_BYTES)
        except OSError:
            return ""  # it loaded no module
        key = "graded-" + hashlib.sha256(data).hexdigest()[:40]
        return str(self.cached(key)) if self.cached(key).is_file() or self.keep(key, data) else ""

    def _store(self, key: str) -> None:
        try:
            data = read_untrusted(self.workdir / BUILT / f"{key}.cubin", MAX_CUBIN_BYTES)
        except OSError:
            return  # not compiled (an error), or not a plain file: nothing to keep
        self.keep(key, data)

    def keep(self, key: str, data: bytes) -> bool:
        """A cubin under a key computed here, from a text this parent sent; never a name a child chose. False
        where the cache cannot be written (cache_file.keep)."""
        return keep(self.cached(key), data)


def _cacheable(source: str, headers: dict[str, str]) -> bool:
    """A local header's text is part of the key only when it was handed in with the file."""
    quoted = re.findall(r'#\s*include\s*"([^"]*)"', source + "".join(headers.values()))
    return all(name in headers for name in quoted)


# -- the toolchain hint ---------------------------------------------------------------------------------------
# A cold grade's compiles need the GPU's architecture, which a child learns from CUDA (cuInit: a few hundred
# milliseconds on a large GPU). The architecture and nvcc's version the last child on this GPU reported let the
# next one compile while CUDA starts. Only a hint: the child keeps those cubins only where its own toolchain
# is the same, and the parent keys the cache by what the child reports after CUDA started, as without it.


def _hint_path(cache_dir: str, gpu: str) -> Path:
    return Path(cache_dir, "toolchain", f"{socket.gethostname()}-gpu{gpu}.json")


def read_hint(cache_dir: str, gpu: str) -> list[str]:
    """[arch, nvcc version] for this host's GPU, or [] (none yet, or not a well-formed one)."""
    try:
        hint = json.loads(_hint_path(cache_dir, gpu).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return hint if _well_formed(hint) else []


def hint(cache_dir: str, gpu: str) -> list[str]:
    """The stored hint, or else the parent's own guess if one was started (guess_soon), waited for briefly."""
    stored = read_hint(cache_dir, gpu)
    guess = _guesses.get(gpu)
    if stored or guess is None:
        return stored
    try:
        return guess.result(timeout=GUESS_WAIT_S)
    except TimeoutError:
        return []  # the child learns its toolchain itself, as without a guess


def write_hint(cache_dir: str, gpu: str, arch: str, nvcc_version: str) -> None:
    hint = [arch, nvcc_version]
    if not cache_dir or not _well_formed(hint) or read_hint(cache_dir, gpu) == hint:
        return
    keep(_hint_path(cache_dir, gpu), json.dumps(hint))  # one not kept costs the next cold grade its head start


def _well_formed(hint: object) -> bool:
    """What a child reported is the submission's text as far as the parent knows: only an architecture name
    and a bounded version string are kept."""
    return (isinstance(hint, list) and len(hint) == 2 and all(isinstance(part, str) for part in hint)
            and ARCH.fullmatch(hint[0]) is not None and 0 < len(hint[1]) <= MAX_NVCC_VERSION)


# -- the parent's guess, where no child has reported yet --------------------------------------------------------
# A first grade on a GPU (an empty cache: a student's first run, a new machine) has no hint, and its compiles wait
# for CUDA's start in the child. The parent can learn the same two facts without CUDA: the compute capability
# NVML reports and `nvcc --version`, on a thread while it reads and checks the submission. The grader's own
# toolchain runs here, never student code; and it is only a hint, taken by the child where it is right.
GUESS_WAIT_S = 1.0  # NVML's set-up takes tens of milliseconds; a driver that hangs costs the head start only
_guesses: dict[str, Future] = {}


def guess_soon(cache_dir: str, gpu: str) -> None:
    """Start guessing this GPU's toolchain, unless a hint is stored or a guess was started already."""
    if gpu in _guesses or read_hint(cache_dir, gpu):
        return
    future: Future = Future()
    _guesses[gpu] = future
    threading.Thread(target=lambda: future.set_result(_guess(gpu)), daemon=True, name="toolchain-guess").start()


def _guess(gpu: str) -> list[str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return []
    try:
        # nvcc runs while NVML starts; its output is what pycuda's get_nvcc_version("nvcc") reads in the child.
        version = subprocess.Popen([nvcc, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    except OSError:
        return []
    arch = _arch_from_nvml(gpu)
    try:
        output, _ = version.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        version.kill()
        version.wait()
        return []
    guess = [arch, output.decode("utf-8", "replace")]
    return guess if version.returncode == 0 and _well_formed(guess) else []


def _arch_from_nvml(gpu: str) -> str:
    """sm_XY of the GPU a child sees: the machine's one architecture, or where its GPUs differ, NVML's device of
    that index (CUDA may number them otherwise: a wrong guess costs the head start only). NVML through ctypes,
    which lets go of the interpreter while the driver works: the grade's own thread goes on meanwhile."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return ""  # no driver: no guess
    if nvml.nvmlInit_v2() != 0:
        return ""
    try:
        capabilities = _capabilities(nvml)
    finally:
        nvml.nvmlShutdown()
    if len(set(capabilities)) == 1:
        chosen = capabilities[0]
    elif gpu.isdigit() and int(gpu) < len(capabilities):
        chosen = capabilities[int(gpu)]
    else:
        return ""
    return "sm_%d%d" % chosen


def _capabilities(nvml) -> list[tuple[int, int]]:
    """Each device's CUDA compute capability, in NVML's order; [] if any cannot be read."""
    count = ctypes.c_uint()
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return []
    found = []
    for index in range(count.value):
        handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
        if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
            return []
        found.append((major.value, minor.value))
    return found
