"""One student's archive (the zip an LMS container posts to `grade serve`) to the folder that is graded.

The kernel is chosen by the rule of every path (submission.choose_kernel): kernel.cu nearest the archive's
top, up to four folders down (two as near are refused, naming each); else the only .cu file, with a note;
with none, the refusal lists what the archive holds. The student is told which file was graded. The archive is
read as batch intake reads one (archive.zip_tree): nothing is extracted but the chosen kernel, and
every member refused on the way (`../etc/passwd`, links, devices, encrypted, zip bombs, names that collide)
is listed in the notes with the reason, whether or not the kernel was found.
"""
from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .archive import ArchiveRefused, Budget, Limits, Refused, refused_note, zip_tree
from .submission import KERNEL_FILE, SubmissionError, choose_kernel, is_hidden


@dataclass
class StudentArchive:
    folder: Path | None  # holds kernel.cu, to be graded; None when the archive is refused
    entry: str = ""  # the member graded
    refusal: str = ""  # why nothing is graded, in words for the student
    notes: list[str] = field(default_factory=list)  # which file was graded, what was refused and why


def read_student_archive(data: bytes, folder: Path, limits: Limits | None = None,
                         handed_in: Sequence[str] = ()) -> StudentArchive:
    """The student's kernel written to folder/kernel.cu, or the refusal; refused members in the notes. The
    headers named in `handed_in` (config compile.handed_in_headers) that sit beside the kernel are written
    beside it, read as it is; one refused refuses the archive (graded without it, it would only be missing)."""
    limits = limits or Limits()
    try:
        zipped = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        return StudentArchive(None, refusal=f"the archive is not a readable zip ({exc})")
    with zipped:
        try:
            tree = zip_tree(zipped, "the archive", limits, Budget(limits.archive_bytes), nested=True)
        except ArchiveRefused as exc:
            return StudentArchive(None, refusal=f"the archive {exc.reason}")
        notes = [refused_note(bad.name, bad.reason) for bad in tree.bad
                 if bad.parts is None or not is_hidden(bad.parts)]
        bad_kernel = next((bad for bad in tree.bad if bad.parts and bad.parts[-1] == KERNEL_FILE
                           and not is_hidden(bad.parts)), None)
        if bad_kernel is not None:  # never grade some other file in place of a refused kernel.cu
            return StudentArchive(None, refusal=f"{bad_kernel.name} {bad_kernel.reason}", notes=notes)
        files = {"/".join(m.parts): m for m in tree.members if not is_hidden(m.parts)}
        try:
            chosen, how = choose_kernel(files)  # the rule of every path: the same choice and words
            source = files[chosen].read(limits.file_bytes)
            headers = _headers_beside(chosen, tree, handed_in, limits)
        except SubmissionError as none_chosen:
            reason = str(none_chosen)
            if not files and notes:  # handed in, but every file refused: not "nothing handed in"
                reason = f"no {KERNEL_FILE}: every file in the archive was refused (the notes say why)"
            return StudentArchive(None, refusal=reason, notes=notes)
        except Refused as exc:
            return StudentArchive(None, refusal=exc.reason, notes=notes)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in {**headers, KERNEL_FILE: source}.items():
        (folder / name).write_bytes(content)
    return StudentArchive(folder, chosen, notes=how + notes)


def _headers_beside(kernel: str, tree, handed_in: Sequence[str], limits: Limits) -> dict[str, bytes]:
    """The handed-in headers in the chosen kernel's folder of the archive; Refused for one refused on the way."""
    folder = tuple(kernel.split("/")[:-1])
    headers = {}
    for name in handed_in:
        bad = next((b for b in tree.bad if b.parts == (*folder, name)), None)
        if bad is not None:
            raise Refused(f"{bad.name} {bad.reason}")
        member = next((m for m in tree.members if m.parts == (*folder, name)), None)
        if member is not None:
            headers[name] = member.read(limits.file_bytes)
    return headers
