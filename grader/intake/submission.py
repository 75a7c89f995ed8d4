"""Finds and reads a submission: a folder holding kernel.cu, or the .cu file itself."""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KERNEL_FILE = "kernel.cu"
MAX_BYTES = 256 * 1024  # a tiled SGEMM is a few kB; anything this large is not a kernel


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is for the student."""


@dataclass
class Submission:
    name: str
    path: Path  # the .cu file
    source: str
    # The files the lab lets a student hand in beside kernel.cu (config compile.handed_in_headers) that this
    # student handed in: name -> text. They travel with the source to every compiler.
    headers: dict[str, str] = field(default_factory=dict)


def locate(path: Path) -> tuple[str, Path]:
    """(name, kernel file) for a PATH argument; the name is the folder's or the file's stem."""
    path = Path(path)
    if path.is_dir():
        return path.resolve().name, path / KERNEL_FILE
    return path.stem, path


KERNEL_DEPTH = 4  # folders between the submission's top and its kernel.cu


@dataclass
class AtTheDoor:
    """What `grade PATH` finds before grading: why nothing there can be graded (`refusal`, one line saying
    what was found and what to do), or notes on which file is graded and which are not."""

    refusal: str = ""
    notes: list[str] = field(default_factory=list)


def at_the_door(path: Path) -> AtTheDoor:
    """A folder or file handed to `grade`: why it cannot be graded (no kernel.cu, an empty or binary one), or
    which file is graded where the folder holds others."""
    path = Path(path)
    notes = []
    if path.is_dir():
        others = sorted(p.name for p in path.glob("*.cu") if p.name != KERNEL_FILE and not is_hidden((p.name,)))
        if not ((path / KERNEL_FILE).exists() or (path / KERNEL_FILE).is_symlink()):
            return _no_kernel(path, others)
        notes = [f"graded {KERNEL_FILE}; not graded: {', '.join(others)}"] if others else []
    try:
        _read_kernel(locate(path)[1])
    except SubmissionError as error:
        where = f"{path}: " if path.is_dir() else ""  # the file's own messages name the file
        return AtTheDoor(f"{where}{error}", notes)
    return AtTheDoor(notes=notes)


def _no_kernel(path: Path, others: list[str]) -> AtTheDoor:
    if len(others) == 1:
        return AtTheDoor(f"{path} has no {KERNEL_FILE}, only {others[0]}: rename it to {KERNEL_FILE}, or grade "
                         f"the file itself (grade {path / others[0]})")
    if others:
        return AtTheDoor(f"{path} has no {KERNEL_FILE}, but {len(others)} .cu files ({', '.join(others)}): name the "
                         f"one to grade {KERNEL_FILE}, or grade it by its path")
    return AtTheDoor(f"{path} holds no {KERNEL_FILE} (and no .cu file): put your kernel in {path / KERNEL_FILE}")


def choose_kernel(found: list[str]) -> tuple[str, list[str]]:
    """Which kernel.cu of a submission is graded, the rule for everything one student hands in (Gradescope's
    upload, an archive sent to `grade serve`): `found` are the kernel.cu files (paths relative to the
    submission's top, '/'-separated, at most KERNEL_DEPTH folders down). The one at the top wins; else the
    only one below; several below are refused, by name, so the student knows which to remove.
    Returns (the chosen path, notes telling the student which was graded)."""
    if KERNEL_FILE in found:
        others = sorted(f for f in found if f != KERNEL_FILE)
        return KERNEL_FILE, ([f"graded {KERNEL_FILE} at the top of your submission; not graded: "
                              f"{', '.join(others)}"] if others else [])
    if len(found) > 1:
        raise SubmissionError(f"{len(found)} files named {KERNEL_FILE} in your submission "
                              f"({', '.join(sorted(found))}): keep only the one to grade")
    if found:
        return found[0], [f"graded {found[0]}, the only {KERNEL_FILE} in your submission"]
    raise SubmissionError(f"no {KERNEL_FILE} in your submission")


def is_hidden(parts: tuple[str, ...]) -> bool:
    """Hidden files and folders and macOS's __MACOSX copies are never a submission's."""
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)


def find_kernel(folder: Path, depth: int = KERNEL_DEPTH) -> Path:
    """The folder an LMS handed over, or the folder below it that holds kernel.cu (students upload folders:
    `submission/lab3/kernel.cu`), chosen by choose_kernel()."""
    return find_kernel_noted(folder, depth)[0]


def find_kernel_noted(folder: Path, depth: int = KERNEL_DEPTH) -> tuple[Path, list[str]]:
    """find_kernel(), with the notes that tell the student which kernel.cu was graded."""
    folder = Path(folder)
    if not folder.is_dir():
        return folder, []
    candidates = [p for p in folder.rglob(KERNEL_FILE) if len(p.relative_to(folder).parts) <= depth + 1
                  and not is_hidden(p.relative_to(folder).parts)]
    links = sorted(p.relative_to(folder).as_posix() for p in candidates if p.is_symlink())
    if links:  # never read through it, nor grade another file in its place
        raise SubmissionError(f"{', '.join(links)}: a symbolic link, not a file; hand in {KERNEL_FILE} itself")
    found = [p.relative_to(folder).as_posix() for p in candidates if p.is_file()]
    if not found:
        return folder, []  # read_submission says what is missing
    chosen, notes = choose_kernel(found)
    return (folder / chosen).parent, notes


def read_submission(path: Path, handed_in: Sequence[str] = ()) -> Submission:
    """The kernel and the headers named in `handed_in` that sit beside it."""
    name, file = locate(path)
    source = _read_kernel(file)
    return Submission(name=name, path=file, source=source, headers=read_headers(file.parent, handed_in))


def read_headers(folder: Path, handed_in: Sequence[str]) -> dict[str, str]:
    """The handed-in headers present in `folder`, read as kernel.cu is (bounded, plain files, never through a
    link). One missing is not an error here: only an #include of it is (missing_headers())."""
    headers = {}
    for name in handed_in:
        file = Path(folder, name)
        if file.is_symlink() or file.exists():
            headers[name] = read_source_file(file)
    return headers


def submitted_bytes(kernel: Path, handed_in: Sequence[str]) -> bytes:
    """Everything handed in that the grade depends on, as bytes: the kernel, then each handed-in header beside
    it by name (what a batch's fingerprint and a result's provenance hash). Plain files only, read bounded;
    OSError where the kernel cannot be read so."""
    parts = [_plain_bytes(kernel)]
    for name in handed_in:
        try:
            parts.append(b"\0".join([name.encode(), _plain_bytes(kernel.parent / name)]))
        except OSError:
            continue  # not handed in (or not a plain file: never graded either)
    return b"\0\0".join(parts)


def _plain_bytes(file: Path) -> bytes:
    """A plain file's first MAX_BYTES + 1 bytes, never through a link (it could point at any file of the
    grading machine, or a device that never ends); OSError otherwise."""
    fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{file.name}: not a regular file")
        return handle.read(MAX_BYTES + 1)


def read_source_file(file: Path) -> str:
    """A handed-in text file: a plain file (never followed through a link: it could point at any file of the
    grading machine), at most MAX_BYTES, not binary, decoded as an editor saved it."""
    try:
        data = _plain_bytes(file)
    except OSError as error:
        if file.exists() and not file.is_symlink():
            raise SubmissionError(f"{file.name}: not a regular file") from None
        reason = "a symbolic link, not a file" if file.is_symlink() else error.strerror
        raise SubmissionError(f"{file.name}: {reason}; hand in the file itself") from None
    if len(data) > MAX_BYTES:
        raise SubmissionError(f"{file.name} is larger than {MAX_BYTES // 1024} kB, so it is not graded")
    if b"\0" in data:
        raise SubmissionError(f"{file.name} is a binary file, not CUDA source")
    return decode_source(data)


def missing_headers(sources: Sequence[str], handed_in: Sequence[str], present: Iterable[str]) -> str:
    """Why the submission cannot be compiled when one of its files includes a handed-in header it lacks, or ''."""
    wanted = {name for name in handed_in for text in sources if re.search(
        r'^\s*#\s*include\s*"' + re.escape(name) + '"', text, re.MULTILINE)}
    absent = sorted(wanted - set(present))
    if not absent:
        return ""
    return (f"{', '.join(absent)}: included by your code but not handed in; hand "
            f"{'it' if len(absent) == 1 else 'them'} in beside {KERNEL_FILE}")


def _read_kernel(file: Path) -> str:
    if not file.exists():
        raise SubmissionError(f"{file}: not found (a submission is a folder holding {KERNEL_FILE}, or the file)")
    if not file.is_file():
        raise SubmissionError(f"{file}: not a regular file")
    size = file.stat().st_size
    if size == 0:
        raise SubmissionError(f"{file.name} is empty: write your kernel in it")
    if size > MAX_BYTES:
        raise SubmissionError(f"{file.name} is {size // 1024} kB: larger than {MAX_BYTES // 1024} kB, "
                              "so it is not graded")
    data = file.read_bytes()
    if b"\0" in data:
        raise SubmissionError(f"{file.name} is a binary file, not CUDA source")
    source = decode_source(data)
    if not source.strip():
        raise SubmissionError(f"{file.name} is empty: write your kernel in it")
    return source


def decode_source(data: bytes) -> str:
    """The text of a kernel as an editor saved it: UTF-8 with or without a byte-order mark, or Latin-1
    (a Windows editor's accented comment); CRLF line ends become LF, so line numbers stay the student's.

    Why: nvcc stops at a BOM, and a comment in Latin-1 is not the student's error to be graded on."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # every byte is a Latin-1 character: this never fails
    return text.replace("\r\n", "\n")
