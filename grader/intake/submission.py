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
    kernel: Path | None = None  # the file (or the folder holding kernel.cu) that is graded


def at_the_door(path: Path) -> AtTheDoor:
    """A folder or file handed to `grade`: why it cannot be graded (no kernel to grade by choose_kernel()'s rule,
    an empty or binary one), or which file is graded (`kernel`) and the notes saying so."""
    path = Path(path)
    kernel, notes = path, []
    if path.is_dir():
        try:
            kernel, notes = find_kernel_noted(path)
        except SubmissionError as error:
            return AtTheDoor(f"{path}: {error}")
    try:
        _read_kernel(locate(kernel)[1])
    except SubmissionError as error:
        where = f"{path}: " if path.is_dir() else ""  # the file's own messages name the file
        return AtTheDoor(f"{where}{error}", notes, kernel)
    return AtTheDoor(notes=notes, kernel=kernel)


NOTHING_HANDED_IN = "nothing handed in"
HAND_IN = f"hand in your kernel as {KERNEL_FILE}"


def choose_kernel(files: Iterable[str], depth: int = KERNEL_DEPTH) -> tuple[str, list[str]]:
    """Which file of one student's submission is graded: the one rule of every path (`grade DIR`, `grade batch`,
    Gradescope, PrairieLearn, an archive sent to `grade serve`). `files` are every file handed in, as paths
    relative to the submission's top ('/'-separated). A file named kernel.cu (any case) at most `depth` folders
    down, the one nearest the top (two as near are refused, naming both); else the only .cu file, whatever
    its name, graded with a note (an LMS cannot ask for a rename after the deadline); several .cu files are
    refused, naming each; with none, the refusal lists what was handed in.
    Returns (the chosen path, notes telling the student which was graded); SubmissionError says why none is."""
    handed_in = sorted(f for f in files if not is_hidden(tuple(f.split("/"))))
    within = [f for f in handed_in if f.count("/") <= depth]
    sources = [f for f in within if f.casefold().endswith(".cu")]
    named = [f for f in sources if _is_kernel_name(f)]
    if named:
        nearest = min(f.count("/") for f in named)
        top = [f for f in named if f.count("/") == nearest]
        if len(top) > 1:
            raise SubmissionError(f"{len(top)} files named {KERNEL_FILE} in your submission ({', '.join(top)}): "
                                  "keep only the one to grade")
        return top[0], _graded_note(top[0], named, sources)
    if len(sources) == 1:
        return sources[0], [f"no {KERNEL_FILE} was handed in; graded {sources[0]}, the only .cu file"]
    if sources:
        raise SubmissionError(f"no {KERNEL_FILE}, but {len(sources)} .cu files ({_listed(sources)}): name the one "
                              f"to grade {KERNEL_FILE}")
    raise SubmissionError(nothing_to_grade(handed_in, depth))


def nothing_to_grade(handed_in: Sequence[str], depth: int = KERNEL_DEPTH) -> str:
    """Why a submission with no .cu file within reach cannot be graded, naming what it holds."""
    if not handed_in:
        return f"no {KERNEL_FILE}: {NOTHING_HANDED_IN}; {HAND_IN}"
    deeper = [f for f in handed_in if _is_kernel_name(f)]
    if deeper:
        return f"{KERNEL_FILE} is too deep ({deeper[0]}): put it at most {depth} folders down"
    return f"no {KERNEL_FILE} and no .cu file; found: {_listed(handed_in)}. {HAND_IN[0].upper()}{HAND_IN[1:]}"


def _graded_note(chosen: str, named: list[str], sources: list[str]) -> list[str]:
    others = [f for f in sources if f != chosen]
    if "/" not in chosen:
        where = f"graded {chosen} at the top of your submission"
    elif len(named) == 1:
        where = f"graded {chosen}, the only {KERNEL_FILE} in your submission"
    else:
        where = f"graded {chosen}, the {KERNEL_FILE} nearest the top of your submission"
    if not others:
        return [where] if "/" in chosen else []
    return [f"{where}; not graded: {_listed(others)}"]


def _listed(files: Sequence[str], most: int = 8) -> str:
    return ", ".join(files[:most]) + (f", … ({len(files) - most} more)" if len(files) > most else "")


def _is_kernel_name(path: str) -> bool:
    return path.rsplit("/", 1)[-1].casefold() == KERNEL_FILE


def is_hidden(parts: tuple[str, ...]) -> bool:
    """Hidden files and folders and macOS's __MACOSX copies are never a submission's."""
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)


def find_kernel(folder: Path, depth: int = KERNEL_DEPTH) -> Path:
    """The folder an LMS handed over, or the folder below it that holds kernel.cu (students upload folders:
    `submission/lab3/kernel.cu`), chosen by choose_kernel()."""
    return find_kernel_noted(folder, depth)[0]


def find_kernel_noted(folder: Path, depth: int = KERNEL_DEPTH) -> tuple[Path, list[str]]:
    """find_kernel(), with the notes that tell the student which file was graded: the folder holding the chosen
    kernel.cu, or the chosen file itself when it has another name (choose_kernel()). SubmissionError when
    nothing there can be graded."""
    folder = Path(folder)
    if not folder.is_dir():
        return folder, []
    files, links = files_below(folder, depth + 1)
    linked = sorted(f for f in links if f.casefold().endswith(".cu"))
    chosen, notes = choose_kernel([*files, *linked], depth)
    if chosen in linked:  # never read through it, nor grade another file in its place
        raise SubmissionError(f"{chosen}: a symbolic link, not a file; hand in {KERNEL_FILE} itself")
    if chosen.rsplit("/", 1)[-1] == KERNEL_FILE:
        return (folder / chosen).parent, notes
    return folder / chosen, notes


def files_below(folder: Path, levels: int, most: int = 10_000) -> tuple[list[str], list[str]]:
    """(plain files, symbolic links) in folder and at most `levels` folders below it, as relative '/'-separated
    paths; links are listed, never followed; hidden folders are never entered. At most `most` entries: a
    submission is a few files, and a home folder given by mistake must not be walked whole."""
    files, links = [], []
    stack = [(folder, "")]
    while stack and len(files) + len(links) < most:
        here, rel = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}{entry.name}"
            if is_hidden((entry.name,)):
                continue
            if entry.is_symlink():
                links.append(path)
            elif entry.is_dir(follow_symlinks=False):
                if path.count("/") < levels:
                    stack.append((Path(entry.path), path + "/"))
            elif entry.is_file(follow_symlinks=False):
                files.append(path)
    return files, links


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
    return kernel_text(file.name, file.read_bytes())


def kernel_text(name: str, data: bytes) -> str:
    """A kernel's text as handed in, or SubmissionError where it is none: binary, or empty. Every intake asks
    this before a student is taken, so the refusal is said where refusals are (intake.txt, the row's notes)."""
    if b"\0" in data:
        raise SubmissionError(f"{name} is a binary file, not CUDA source")
    source = decode_source(data)
    if not source.strip():
        raise SubmissionError(f"{name} is empty: write your kernel in it")
    return source


UTF8_BOM = b"\xef\xbb\xbf"


def decode_source(data: bytes) -> str:
    """The text of a kernel as an editor saved it: UTF-8 with or without a byte-order mark, or Latin-1
    (a Windows editor's accented comment); CRLF line ends become LF, so line numbers stay the student's.

    Why: nvcc stops at a BOM, and a comment in Latin-1 is not the student's error to be graded on. The BOM
    goes first, whatever the rest is: a file with both (an editor that adds one to a Latin-1 file) would
    otherwise keep it as three Latin-1 characters, which nvcc refuses at line 1."""
    data = data.removeprefix(UTF8_BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # every byte is a Latin-1 character: this never fails
    return text.replace("\r\n", "\n")
