"""Which C++ compiler builds the CPU emulation, and what names it: a module of its own, importing next to nothing,
so that a grade decides its engine and starts its children (execute/early.py) before the builder's imports (the
CUDA grammar, the instrumenter) are paid."""
from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def toolchain(cxx: str) -> tuple[Path, ...]:
    """The compiler's own installation when it is not under /usr (e.g. /opt/gcc), for the sandbox to see."""
    for path in (Path(cxx), Path(cxx).resolve()):
        prefix = path.parent.parent
        if not prefix.is_relative_to("/usr") and prefix != Path("/"):
            return (prefix,)
    return ()


@lru_cache(maxsize=8)  # part of every cache key here, asked several times a build: one run of the compiler
def compiler_version(path: str) -> str:
    """`g++ (Debian 12.2.0-14) 12.2.0` -> `g++ 12.2.0`: part of the build's cache key and of reports."""
    finished = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    first = finished.stdout.splitlines()[0] if finished.stdout else path
    return f"{Path(path).name} {first.split()[-1]}"
