"""Bytecode for what the sandboxed GPU child imports, written by the parent where pip left none.

A child cannot write anything outside its own folder (and runs with PYTHONDONTWRITEBYTECODE), so a package
installed without its .pyc files (`pip install --no-compile`, `--target`) is compiled from source in every
child's start: pycuda, pytools, typing_extensions and platformdirs cost a GPU child about 0.1 s each time.
The parent, which may write where it installed them, compiles them once; a marker in the grader's cache,
named by the distribution's RECORD (reinstalling rewrites it), says it is done. No writable place is
shared with any child: a .pyc goes next to its source, where root (or the installing user) alone writes.
`grade prepare` compiles, the same way, whatever the grader and its children import that has no bytecode
(`compile_missing`), as pip's install-time compile would have.
"""
from __future__ import annotations

import compileall
import hashlib
import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import site_path

if TYPE_CHECKING:  # importlib.metadata costs 10-15 ms to import: only the annotations name it
    import importlib.metadata


def ensure_soon(distributions: Callable[[], list[importlib.metadata.Distribution]], cache_dir: Path) -> None:
    """ensure() on a thread, begun as a child starts: a .pyc appears whole (written to a temporary name, then
    renamed) or not at all, and a module whose .pyc is not there yet is compiled in the child's memory, as it
    would have been. A first grade's start no longer waits on it (35-50 ms with the bytecode there, more without).
    The distributions read, it records whether the children may start without `site` where no record says so
    (site_path.py), so that the next grades' children do."""
    threading.Thread(target=_after_start, args=(distributions, cache_dir), daemon=True, name="bytecode").start()


def _after_start(distributions: Callable[[], list[importlib.metadata.Distribution]], cache_dir: Path) -> None:
    read = distributions()
    ensure(read, cache_dir)
    if not site_path.recorded(cache_dir):
        try:
            site_path.record(cache_dir, read)
        except OSError:
            pass  # a cache that cannot be written: the children keep `site`, as before


def ensure(distributions: list[importlib.metadata.Distribution], cache_dir: Path) -> None:
    """Compile each distribution's modules once, where none of its files is bytecode and its folder is ours."""
    for dist in distributions:
        marker = _marker(dist, cache_dir)
        if marker is None or marker.exists():
            continue
        if not any(str(name).endswith(".pyc") for name in dist.files or []):
            compile_missing([dist])
        _mark(marker)


def mark_compiled(distributions: list[importlib.metadata.Distribution], cache_dir: Path) -> None:
    """Each distribution marked done, as ensure() marks it, where compile_missing has just gone over it (`grade
    prepare`): the first GPU grade's ensure() then passes it by instead of looking over its files again."""
    for dist in distributions:
        marker = _marker(dist, cache_dir)
        if marker is not None and not marker.exists():
            _mark(marker)


def _mark(marker: Path) -> None:
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass  # a cache that cannot be written costs this check again, not a grade


def _marker(dist: importlib.metadata.Distribution, cache_dir: Path) -> Path | None:
    """The cache's note that this installation of dist was compiled, or None where it lists no RECORD. The
    RECORD's own stamp names it: a reinstall, even of the same version, writes a new one (and no .pyc)."""
    path = _record(dist)
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    key = hashlib.sha256(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}".encode()).hexdigest()
    return Path(cache_dir, "bytecode", key[:32])


def _record(dist: importlib.metadata.Distribution) -> Path | None:
    """The RECORD file: by the installed distribution's folder (read on every GPU grade, so without parsing
    the file list, 10 ms for numpy's), else found in its file list."""
    folder = getattr(dist, "_path", None)  # importlib.metadata's PathDistribution: its .dist-info folder
    if folder is not None and Path(folder, "RECORD").is_file():
        return Path(folder, "RECORD")
    record = next((f for f in dist.files or [] if f.name == "RECORD" and f.parent.name.endswith(".dist-info")), None)
    return None if record is None else Path(dist.locate_file(record))


@dataclass
class Compiled:
    """What compile_missing found: modules it compiled, modules whose bytecode was there, and modules left without
    by the folder (site-packages) their distribution is installed in, which this user cannot write."""

    compiled: int = 0
    present: int = 0
    unwritable: dict[str, int] = field(default_factory=dict)
    failed: int = 0  # sources this Python cannot compile (a template, another version's syntax), as pip skips them


def compile_missing(distributions: list[importlib.metadata.Distribution]) -> Compiled:
    """Each distribution's modules that have no bytecode for this interpreter, compiled next to their source where
    their folder can be written; never raises for one that cannot."""
    found = Compiled()
    for dist in distributions:
        for path in _sources(dist):
            if has_bytecode(path):
                found.present += 1
            elif not _writable(os.path.dirname(path)):
                folder = str(dist.locate_file(""))
                found.unwritable[folder] = found.unwritable.get(folder, 0) + 1
            elif compileall.compile_file(path, quiet=2) and has_bytecode(path):
                found.compiled += 1
            else:
                found.failed += 1
    return found


def lacking(distributions: list[importlib.metadata.Distribution]) -> tuple[int, int]:
    """How many of the distributions' modules have no bytecode for this interpreter, of how many: what a benchmark
    says beside its figures (bench/grade_time.py), since every process compiles those at each import."""
    sources = [path for dist in distributions for path in _sources(dist)]
    return sum(not has_bytecode(path) for path in sources), len(sources)


def has_bytecode(source: str) -> bool:
    """This interpreter's bytecode of the module is there (whether it is current is the import's to judge)."""
    return os.path.exists(importlib.util.cache_from_source(source))


def _sources(dist: importlib.metadata.Distribution) -> list[str]:
    """The distribution's installed modules (its scripts in bin/ are no modules), as real files."""
    paths = (str(dist.locate_file(name)) for name in dist.files or [] if name.suffix == ".py" and name.parts[0] != "..")
    return [path for path in paths if os.path.isfile(path) and not os.path.islink(path)]


def _writable(folder: str) -> bool:
    """A .pyc can be written below `folder`: it and its __pycache__ (where there is one) are this user's to write
    (a read-only file system, an image's layer, is not)."""
    cache = os.path.join(folder, "__pycache__")
    return os.access(folder, os.W_OK) and (not os.path.isdir(cache) or os.access(cache, os.W_OK))
