"""The grader's Python children start without `site` (`python -S`), their import path handed to them (issue 50).

`site` is part of every Python process's start: on an H200 host 62 ms of `python3 -c pass`'s 80 (its venv's .pth of
numba-cuda's imports importlib.resources), paid by each grade's GPU child and CPU driver. What a child needs of it is
the import path: the site-packages folders and the paths their .pth files add. The parent has run `site`, so it hands
its own path on, from its standard library on (whatever a script or a test put before that stays out; so does the
user's site-packages, which a child never had: its HOME is its own folder). A copied Python's child (a root grader's
view, reachable.py) gets that view's path instead.

What a path cannot carry is a .pth file that runs code (`import ...`: an editable install's finder, a redirector).
Where none is on the path the children start without `site` at once. Where some are, the children do so only once
the installed distributions they import (their requirement closure, reachable.py) are known to own none of them:
that takes importlib.metadata (30-70 ms, not for a grade's start), so `grade prepare` and a GPU grade's bytecode
thread read it and record the answer in the cache, named by those .pth files and the distributions installed on the
path. Until then, and where a distribution the children import has such a .pth, they start with `site`, as before.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by who records: 10-15 ms of a grade's start else
    import importlib.metadata

FOLDER = "children-site"  # in the grader's cache: one record per interpreter and path


@functools.cache
def parent_path() -> tuple[str, ...] | None:
    """This process's import path from its standard library on, as `site` left it, less the user's site-packages and
    folders that do not exist; None where no standard library folder is on it (an embedded or frozen Python)."""
    stdlib = os.path.dirname(os.__file__)
    start = next((i for i, entry in enumerate(sys.path) if entry == stdlib or _stdlib_zip(entry)), None)
    if start is None:
        return None
    user = getattr(sys.modules.get("site"), "USER_SITE", None)
    return tuple(dict.fromkeys(e for e in sys.path[start:] if e and e != user and os.path.exists(e)))


def _stdlib_zip(entry: str) -> bool:
    return os.path.basename(entry) == f"python{sys.version_info.major}{sys.version_info.minor}.zip"


def without_site(cache_dir: str) -> tuple[str, ...] | None:
    """The import path a child started with -S is handed (after the grader package's root), or None: it starts with
    `site` (a .pth that runs code is on the path and no record says the children's distributions own none)."""
    path = parent_path()
    if path is None:
        return None
    code, installed = _listing(path)
    if not code:
        return path
    if not cache_dir:
        return None
    try:
        recorded = json.loads(_record_path(cache_dir, path, code, installed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return path if recorded.get("site_needed_by") == [] else None


def _listing(path: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The .pth files in the path's folders with a line that runs code (which no import path can carry), and the
    distributions installed there by their metadata folders' names (an install, an upgrade or a removal changes
    them; a reinstall that adds a .pth changes the first)."""
    code, installed = [], []
    for folder in path:
        try:
            names = sorted(os.listdir(folder))
        except OSError:  # a zip file, or a folder gone
            continue
        code += [os.path.join(folder, n) for n in names if n.endswith(".pth") and _runs_code(os.path.join(folder, n))]
        installed += [os.path.join(folder, n) for n in names if n.endswith((".dist-info", ".egg-info"))]
    return code, installed


def _runs_code(pth: str) -> bool:
    try:
        with open(pth, encoding="utf-8", errors="replace") as lines:
            return any(line.startswith(("import ", "import\t")) for line in lines)
    except OSError:
        return False


def record(cache_dir: Path, distributions: list[importlib.metadata.Distribution]) -> tuple[bool, str]:
    """Whether the children, which import `distributions`, may start without `site` here, recorded in the cache for
    the grades to read: (True, what was found), for `grade prepare` to print."""
    path = parent_path()
    if path is None:
        return True, "the children start with Python's site: no standard library folder on this Python's import path"
    code, installed = _listing(path)
    needed = site_needed_by(distributions, code) if code else []
    target = _record_path(cache_dir, path, code, installed)
    text = json.dumps({"path": path, "code_files": code, "site_needed_by": needed})
    if not (target.is_file() and target.read_text(encoding="utf-8") == text):  # a prepare again writes nothing
        target.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: a grade reading it meanwhile finds no record (and keeps site) or this one.
        with tempfile.NamedTemporaryFile("w", dir=target.parent, delete=False, encoding="utf-8") as file:
            file.write(text)
        os.replace(file.name, target)
    if needed:
        return True, f"the children start with Python's site, which runs {', '.join(needed)}"
    return True, "the children start without Python's site, their import path handed to them"


def recorded(cache_dir: Path) -> bool:
    """Whether this interpreter's path has its record (or needs none)."""
    path = parent_path()
    if path is None:
        return True
    code, installed = _listing(path)
    return not code or _record_path(cache_dir, path, code, installed).is_file()


def site_needed_by(distributions: list[importlib.metadata.Distribution], code: list[str]) -> list[str]:
    """Each of `code`'s .pth files that one of `distributions` installed, named with it; and each of those that lists
    no files (it may have installed one)."""
    code_real = {os.path.realpath(pth): pth for pth in code}
    needed = []
    for dist in distributions:
        if dist.files is None:
            needed.append(f"the .pth files {dist.metadata['Name']} may have installed (it lists no files)")
            continue
        owned = (os.path.realpath(dist.locate_file(name)) for name in dist.files
                 if name.suffix == ".pth" and len(name.parts) == 1)
        needed += [f"{code_real[pth]} ({dist.metadata['Name']}'s)" for pth in owned if pth in code_real]
    return sorted(needed)


def _record_path(cache_dir: Path | str, path: tuple[str, ...], code: list[str], installed: list[str]) -> Path:
    return Path(cache_dir, FOLDER, _key(path, code, installed))


def _key(path: tuple[str, ...], code: list[str], installed: list[str]) -> str:
    """Names the interpreter, the path, the distributions installed on it and the .pth files that run code, as they
    are (their size, time and inode)."""
    parts = [os.path.realpath(sys.executable), *path, *installed, *map(_stamp, code)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _stamp(path: str) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return f"{path}: gone"
    return f"{path} {info.st_size} {info.st_mtime_ns} {info.st_ino}"


def view_path(stdlib: str, copied_stdlib: str | None, site_packages: Path) -> tuple[str, ...]:
    """The path handed to a child of a copied Python (reachable.py): the parent's standard library folders (`stdlib`,
    its real path, and those inside it; moved to the copied installation's, where it was copied), then the view's
    site-packages and the paths its .pth files add, as `site` would add them."""
    standard = []
    for entry in parent_path() or ():
        real = os.path.realpath(entry)
        if real == stdlib or real.startswith(f"{stdlib}/"):
            standard.append(copied_stdlib + real[len(stdlib):] if copied_stdlib else entry)
    return (*standard, str(site_packages), *pth_paths(site_packages))


def pth_paths(folder: Path) -> list[str]:
    """The folders `site` adds for the .pth files in `folder`: each line that is neither a comment nor code, joined to
    the folder, where it exists."""
    added = []
    for pth in sorted(folder.glob("*.pth")):
        for line in pth.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.rstrip()
            if line and not line.startswith(("#", "import ", "import\t")) and (folder / line).exists():
                added.append(os.path.normpath(folder / line))
    return list(dict.fromkeys(added))
