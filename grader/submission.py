"""Finds and reads a submission: a folder holding kernel.cu, or the .cu file itself."""
from __future__ import annotations

from dataclasses import dataclass
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


def locate(path: Path) -> tuple[str, Path]:
    """(name, kernel file) for a PATH argument; the name is the folder's or the file's stem."""
    path = Path(path)
    if path.is_dir():
        return path.resolve().name, path / KERNEL_FILE
    return path.stem, path


KERNEL_DEPTH = 4  # folders between the submission's top and its kernel.cu


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


def read_submission(path: Path) -> Submission:
    name, file = locate(path)
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
    return Submission(name=name, path=file, source=source)


def decode_source(data: bytes) -> str:
    """The text of a kernel as an editor saved it: UTF-8 with or without a byte-order mark, or Latin-1
    (a Windows editor's accented comment); CRLF line ends become LF, so line numbers stay the student's.

    Why: nvcc stops at a BOM, and a comment in Latin-1 is not the student's error to be graded on."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # every byte is a Latin-1 character: this never fails
    return text.replace("\r\n", "\n")
