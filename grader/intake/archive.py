"""Safe reading of what an instructor hands to `grade batch`: folders and zip archives.

Nothing here extracts a whole archive. An archive (or folder) becomes a `Tree`: the members whose
names and kinds are safe, each with a reader that streams at most a given number of bytes, and the
members that are not (`Bad`), each with the reason in words. A problem with one member never stops
the others; only an archive that cannot be opened at all, or holds too many entries, is refused whole
(`ArchiveRefused`). Every byte read from one PATH is charged to one `Budget`.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import unicodedata
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .submission import MAX_BYTES

KB = 1024
MB = 1024 * KB
CHUNK = 64 * KB


@dataclass(frozen=True)
class Limits:
    """How much intake reads. The defaults suit a class of a few hundred students."""

    file_bytes: int = MAX_BYTES  # one kernel file, declared and actual (submission.py's limit)
    archive_bytes: int = 8 * MB  # a student's own zip inside the class zip or folder
    total_bytes: int = 256 * MB  # everything decompressed or read from one PATH
    entries: int = 10_000  # members of a class archive
    nested_entries: int = 1_000  # members of a student's own zip
    ratio: int = 100  # compression ratio above which a member is a zip bomb...
    ratio_floor: int = 1 * MB  # ...once it expands to more than this
    metadata_bytes: int = 16 * MB  # Gradescope's submission_metadata.yml
    kernel_depth: int = 2  # folders between a student's folder and kernel.cu
    walk_depth: int = 8  # folder levels a folder PATH is walked
    walk_entries: int = 100_000  # files and folders one folder PATH may hold


class Refused(Exception):
    """One member (or one student) is not graded; `reason` is in words a student can act on."""

    def __init__(self, reason: str, entry: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.entry = entry


class ArchiveRefused(Exception):
    """A whole PATH is not read (not a zip, damaged directory, too many entries)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Budget:
    """Bytes that may still be read from one PATH."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def check(self, declared: int, name: str) -> None:
        if self.used + declared > self.total:
            raise Refused(self._message(name))

    def charge(self, n: int, name: str) -> None:
        self.used += n
        if self.used > self.total:
            raise Refused(self._message(name))

    def _message(self, name: str) -> str:
        return (f"{name} was not read: together with what was already read this archive expands to more "
                f"than {_size(self.total)}, the limit for one batch PATH")


@dataclass
class Member:
    parts: tuple[str, ...]  # safe, NFC-normalised path inside the tree
    name: str  # as a person sees it: the archive's own name, or the path relative to the folder
    size: int  # declared (zip) or current (folder) size in bytes
    read: Callable[[int], bytes]  # read(limit): the content, at most limit bytes, or Refused


@dataclass
class Bad:
    name: str
    parts: tuple[str, ...] | None  # None where the name itself is unsafe (cannot be placed)
    reason: str


def refused_note(name: str, reason: str) -> str:
    """How a refused member is told in its student's notes (their result, grades.csv, the LMS output)."""
    return f"refused {name!r}: {reason}"


@dataclass
class Tree:
    source: str
    members: list[Member] = field(default_factory=list)
    bad: list[Bad] = field(default_factory=list)
    # Every folder seen, empty ones too: a class folder whose other students handed in nothing is still a class.
    folders: list[tuple[str, ...]] = field(default_factory=list)


# --- names -------------------------------------------------------------------------------------

_DRIVE = re.compile(r"^[A-Za-z]:")
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


def check_name(name: str) -> tuple[str, ...]:
    """The parts of an archive member's name, or Refused when it could land outside the folder."""
    if "\\" in name:
        raise Refused("has a backslash in its name (a Windows path); archive names use '/', so it is not unpacked")
    if name.startswith("/"):
        raise Refused("is an absolute path; an archive must hold relative paths, so it is not unpacked")
    if _DRIVE.match(name):
        raise Refused("starts with a drive letter; an archive must hold relative paths, so it is not unpacked")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Refused("has control characters in its name, so it is not unpacked")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused("climbs out of the archive's folder ('..' in its path), so it is not unpacked")
    if not parts:
        raise Refused("has an empty name")
    return tuple(unicodedata.normalize("NFC", p) for p in parts)


def safe_name(text: str, fallback: str = "submission") -> str:
    """A file name made of [A-Za-z0-9._-]: no slashes, no leading dot, at most 64 characters."""
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", text)
    text = re.sub(r"_{2,}", "_", text).strip("._-")
    text = text[:64].rstrip("._-")
    if not text:
        return fallback
    if text.split(".")[0].upper() in _WINDOWS_RESERVED:
        text += "_"
    return text


def is_junk(parts: tuple[str, ...]) -> bool:
    """Hidden files and folders, macOS resource forks, Windows thumbnails: never a submission."""
    return any(p.startswith(".") or p == "__MACOSX" or p.casefold() in ("thumbs.db", "desktop.ini")
               for p in parts)


def _size(n: int) -> str:
    return f"{n // MB} MB" if n >= MB else f"{n // KB} kB"


def too_big(name: str, size: int, limit: int, verb: str = "graded") -> Refused:
    # The wording of submission.read_submission, so a student reads the same verdict either way.
    return Refused(f"{name} is {_size(size)}: larger than {_size(limit)}, so it is not {verb}")


def _bomb(size: int, compressed: int, name: str = "") -> Refused:
    ratio = size // max(compressed, 1)
    subject = f"{name} expands" if name else "expands"
    return Refused(f"{subject} {ratio}:1 (at least {_size(size)} from {_size(compressed)} compressed): "
                   "that is a zip bomb, not source code, so it is not unpacked")


# --- zip archives ------------------------------------------------------------------------------

def zip_tree(zf: zipfile.ZipFile, source: str, limits: Limits, budget: Budget, nested: bool = False) -> Tree:
    infos = zf.infolist()
    cap = limits.nested_entries if nested else limits.entries
    if len(infos) > cap:
        raise ArchiveRefused(f"holds {len(infos)} entries: more than the {cap} an archive may hold, "
                             "so none of it is unpacked")
    tree = Tree(source)
    for info in infos:
        name = info.filename
        try:
            parts = check_name(name)
        except Refused as exc:
            tree.bad.append(Bad(name, None, exc.reason))
            continue
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            tree.bad.append(Bad(name, parts, "is a symbolic link; only regular files are unpacked"))
        elif kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            tree.bad.append(Bad(name, parts, "is not a regular file (a device, pipe or socket entry), "
                                             "so it is not unpacked"))
        elif info.is_dir() or kind == stat.S_IFDIR:
            tree.folders.append(parts)
            continue
        elif info.flag_bits & 0x1:
            tree.bad.append(Bad(name, parts, "is encrypted (password-protected); hand in files without a "
                                             "password"))
        elif info.file_size > limits.ratio_floor and info.file_size > limits.ratio * max(info.compress_size, 1):
            tree.bad.append(Bad(name, parts, _bomb(info.file_size, info.compress_size).reason))
        else:
            tree.members.append(Member(parts, name, info.file_size,
                                       partial(_read_zip_member, zf, info, parts[-1], limits, budget)))
    _refuse_duplicates(tree)
    return tree


def _refuse_duplicates(tree: Tree) -> None:
    groups: dict[tuple[str, ...], list[Member]] = {}
    for member in tree.members:
        groups.setdefault(tuple(p.casefold() for p in member.parts), []).append(member)
    for same in groups.values():
        if len(same) < 2:
            continue
        names = ", ".join(repr(m.name) for m in same)
        for member in same:
            tree.bad.append(Bad(member.name, member.parts,
                                f"appears {len(same)} times in the archive ({names}: the same name once case "
                                "and Unicode form are set aside), so none of them is unpacked"))
            tree.members.remove(member)


def _read_zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, limits: Limits, budget: Budget,
                     limit: int, verb: str = "graded") -> bytes:
    if info.file_size > limit:
        raise too_big(label, info.file_size, limit, verb)
    budget.check(info.file_size, label)
    out = bytearray()
    try:
        with zf.open(info) as fh:
            while chunk := fh.read(CHUNK):
                out += chunk
                budget.charge(len(chunk), label)
                # Never trust the declared size: count what actually comes out.
                if len(out) > limit:
                    raise too_big(label, len(out), limit, verb)
                if len(out) > limits.ratio_floor and len(out) > limits.ratio * max(info.compress_size, 1):
                    raise _bomb(len(out), info.compress_size, label)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError,
            ValueError) as exc:
        raise Refused(f"{label} cannot be unpacked: the archive is damaged or uses an unsupported format "
                      f"({exc})") from None
    if len(out) != info.file_size:
        raise Refused(f"{label} holds {len(out)} bytes but the archive declares {info.file_size}: "
                      "the archive is damaged")
    return bytes(out)


# --- folders -----------------------------------------------------------------------------------

def dir_tree(root: Path, source: str, limits: Limits, budget: Budget, skip: tuple[Path, ...] = ()) -> Tree:
    """Walk a folder without following symbolic links below it (the folder itself may be one)."""
    tree = Tree(source)
    skip_real = {os.path.realpath(p) for p in skip}
    seen = 0
    stack: list[tuple[tuple[str, ...], str]] = [((), str(root))]
    while stack:
        parts, folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if not parts:
                raise ArchiveRefused(f"cannot be listed ({exc.strerror or exc})") from None
            tree.bad.append(Bad("/".join(parts) + "/", parts, f"cannot be listed ({exc.strerror or exc})"))
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name == "__MACOSX":
                continue
            seen += 1
            if seen > limits.walk_entries:
                raise ArchiveRefused(f"holds more than {limits.walk_entries} files and folders, so it is not read")
            here = parts + (unicodedata.normalize("NFC", entry.name),)
            rel = "/".join(here)
            try:
                if entry.is_symlink():
                    tree.bad.append(Bad(rel, here, "is a symbolic link; only regular files are graded"))
                elif entry.is_dir(follow_symlinks=False):
                    if os.path.realpath(entry.path) in skip_real:
                        continue
                    tree.folders.append(here)
                    if len(here) < limits.walk_depth:
                        stack.append((here, entry.path))
                elif entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    tree.members.append(Member(here, rel, size, partial(read_file, Path(entry.path), budget,
                                                                        label=entry.name)))
                else:
                    tree.bad.append(Bad(rel, here, "is not a regular file (a device, pipe or socket), "
                                                   "so it is not read"))
            except OSError as exc:
                tree.bad.append(Bad(rel, here, f"cannot be read ({exc.strerror or exc})"))
    tree.members.sort(key=lambda m: m.parts)
    return tree


def read_file(path: Path, budget: Budget, limit: int, verb: str = "graded", label: str = "",
              follow: bool = False) -> bytes:
    """At most `limit` bytes of a regular file; a symlink (unless `follow`), pipe or device is refused."""
    label = label or path.name
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{label} is a symbolic link; only regular files are graded") from None
        raise Refused(f"{label} cannot be opened ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{label} is not a regular file, so it is not read")
        if info.st_size > limit:
            raise too_big(label, info.st_size, limit, verb)
        budget.check(info.st_size, label)
        data = fh.read(limit + 1)  # the file may have grown since it was measured
    if len(data) > limit:
        raise too_big(label, len(data), limit, verb)
    budget.charge(len(data), label)
    return data
