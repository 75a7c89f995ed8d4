"""The compile cache, kept by the parent: no sandboxed child can read or write it.

When the GPU child knows its GPU's architecture and nvcc's version (the `toolchain` event), the parent
copies the cached cubins of this job's own sources into the child's folder. What the child had to compile
it leaves in `new-cubins/`; the parent stores only files whose names are the keys it computed itself from
the sources it sent, so a child can never place a cubin under another text's key.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path

from ..cache_file import keep
from .compile import cubin_key
from .job import Job
from .protocol import read_untrusted

OFFERED, BUILT = "cubins", "new-cubins"
MAX_CUBIN_BYTES = 64 << 20
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

    def _headers(self, role: str) -> dict[str, str]:
        return {} if role == "reference" else self.job.headers

    def cached(self, key: str) -> Path:
        return Path(self.job.cache_dir, key + ".cubin")

    def offer(self, arch: str, nvcc_version: str) -> None:
        roles = {cubin_key(source, self.job.options, arch, nvcc_version, self._headers(role)): role
                 for role, source in self._sources().items() if _cacheable(source, self._headers(role))}
        if roles == self.roles:
            return  # offered already, before the child started (the toolchain hint was right)
        self.roles = roles
        offered = self.workdir / OFFERED
        offered.mkdir(mode=0o755, exist_ok=True)
        for key in self.roles:
            if self.cached(key).is_file():
                shutil.copyfile(self.cached(key), offered / f"{key}.cubin")
                os.chmod(offered / f"{key}.cubin", 0o644)

    def take(self, used: dict[str, str]) -> str:
        """Store what the child compiled; return the cache path of the student's cubin, if there is one."""
        for key in self.roles:
            if not self.cached(key).is_file():
                self._store(key)
        key = used.get("student", "")
        if self.roles.get(key) in ("student", "device_side") and self.cached(key).is_file():
            return str(self.cached(key))
        return ""

    def _store(self, key: str) -> None:
        try:
            data = read_untrusted(self.workdir / BUILT / f"{key}.cubin", MAX_CUBIN_BYTES)
        except OSError:
            return  # not compiled (an error), or not a plain file: nothing to keep
        target = self.cached(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{key}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)


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
