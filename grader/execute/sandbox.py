"""What a child that runs student code may see and use: a scrubbed environment and resource limits.

The parent builds the environment from an allow-list (so no secret, token or instructor path set in the
grader's own environment reaches student code); each child applies the limits to itself at start-up,
before it compiles or runs anything, and the CPU harness tightens them further for itself.
"""
from __future__ import annotations

import os
import resource

# Variables a child needs to find Python, the CUDA toolkit, the driver and a C++ compiler; nothing else.
ALLOWED = frozenset({"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "CXX", "CC", "CUDA_ROOT", "CUDA_HOME",
                     "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"})
ALLOWED_PREFIXES = ("NVIDIA_", "CUDA_")
OUTPUT_FILE_BYTES = 256 << 20  # the largest case output is a few MB; a printf flood stops here
OPEN_FILES = 256


def child_environment(workdir: str, package_root: str, extra: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if (key in ALLOWED or key.startswith(ALLOWED_PREFIXES)) and not key.startswith("SGEMM_GRADER")}
    env.update(extra)
    env["HOME"] = workdir  # caches (pytools, nvcc) land in the throw-away folder, not the instructor's home
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def limit_this_process() -> None:
    """No core dumps, bounded file writes, bounded open files. (Address space is left alone: CUDA reserves
    terabytes of virtual memory.)"""
    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, OUTPUT_FILE_BYTES),
                         (resource.RLIMIT_NOFILE, OPEN_FILES)):
        _lower(limit, value)


def _lower(limit: int, value: int) -> None:
    soft, hard = resource.getrlimit(limit)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (value, value))
