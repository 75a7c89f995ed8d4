"""One way to keep a file in the grader's cache (cache_dir): written whole or not at all, never half.

A reader of a cache entry (a compile check's verdict, a reference's resources or profile, a GPU's toolchain
hint) sees the old file or the new one; two graders writing one entry at once each write their own temporary
file and rename it into place. The cache is the grader's own, where no sandbox reaches; a cache that cannot
be written costs the next grade the work again, nothing more.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path


def keep(path: Path, data: bytes | str) -> bool:
    """Write `data` to `path` whole; False (and nothing written) where the cache cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Of this thread: a driver's threads (the student's build, the reference's) may keep one entry at once.
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        if isinstance(data, str):
            temporary.write_text(data, encoding="utf-8")
        else:
            temporary.write_bytes(data)
        os.replace(temporary, path)
        return True
    except OSError:
        return False
