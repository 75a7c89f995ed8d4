"""One way to keep a file in the grader's cache (cache_dir): written whole or not at all, never half.

A reader of a cache entry (a compile check's verdict, a reference's resources or profile, a GPU's toolchain
hint) sees the old file or the new one; two graders writing one entry at once each write their own temporary
file and rename it into place. The cache is the grader's own, where no sandbox reaches; a cache that cannot
be written costs the next grade the work again, nothing more. `write_whole` is the same write where a failure
must be told (the results store's files, a class's exports).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path


def keep(path: Path, data: bytes | str) -> bool:
    """Write `data` to `path` whole; False (and nothing written) where the cache cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, data)
        return True
    except OSError:
        return False


def write_whole(path: Path, data: bytes | str) -> None:
    """`path` replaced whole or not at all: a temporary file beside it, renamed into place (OSError as it came).
    The temporary file is this thread's: two threads of one process (a driver's builds, a batch's results)
    may write one path at once."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    if isinstance(data, str):
        temporary.write_text(data, encoding="utf-8")
    else:
        temporary.write_bytes(data)
    os.replace(temporary, path)
