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
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SubmissionError(f"{file.name} line {line}: not valid UTF-8 text; save the file as UTF-8") from None
    if not source.strip():
        raise SubmissionError(f"{file.name} is empty: write your kernel in it")
    return Submission(name=name, path=file, source=source)
