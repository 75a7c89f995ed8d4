"""Intake for instructor batch grading: from the PATHs of `grade batch` to one folder per student.

`discover(paths, workdir)` accepts, per PATH:

- a folder of student folders (`alice/kernel.cu`, `bob/src/kernel.cu`), or of student `.cu` / `.zip` files;
- a zip of a class: the same layouts zipped, or a Canvas "Download Submissions" zip;
- a Gradescope "Export Submissions" folder or zip (`submission_metadata.yml` + `submission_<id>/`);
- one student's folder (kernel.cu at its top, or under a single wrapper folder) or one `.cu` file.

A PATH whose only content is one folder is looked into (up to 4 such wrappers, e.g.
`assignment_123_export/`). When that folder holds a kernel itself, a PATH given alone is a class of one
student, that folder (`class/alice/kernel.cu` is alice's); a PATH given among others is one student,
named after the PATH (`grade batch alice/ bob/`, with `bob/src/kernel.cu`, is bob's). The same PATH given
twice is read once (a note says so).

Each student's kernel is written to `workdir/<key>/kernel.cu`, and beside it the headers the config lets a
student hand in (`discover(handed_in=...)`) found beside the kernel, read as it is (a link or an oversized
one refuses the student); `Entry.path` is that folder, so the
pipeline grades it like any submission folder and names the result `<key>`. Keys are made of
`[A-Za-z0-9._-]`, never start with a dot, and are unique within one `discover` call (case-insensitively;
a clash gets `-2`, `-3`, ... in the order the PATHs were given).

Formats, as relied on:

- Canvas (lib/content_zipper.rb in instructure/canvas-lms): a flat zip of
  `<sortable name, lower case, only word characters>[_LATE]_<user id>_<attachment id>_<file name>`, or
  `[LATE_]anon_<anonymous id>_...` when grading is anonymous; text and URL submissions are
  `<name>[_LATE]_<user id>_text.html` / `_link.html`. The zip holds each student's current submission
  only. A file a student uploaded again under the same name is renamed by Canvas to `kernel-1.cu`,
  `kernel-2.cu`, ... (Attachment.make_unique_filename; after 7 tries, `kernel-<uuid>.cu`): that suffix
  is only a name collision, so it is dropped when matching names, and where one student has several
  files of the same name the one with the highest attachment id (the newest upload) is graded; the
  others are named in the entry's notes. `late`/`LATE` is matched in any case.
- Gradescope export: a folder (often wrapped in `assignment_<id>_export/`) holding
  `submission_metadata.yml`, a mapping from the submission folder name to `{":submitters": [{":name",
  ":sid", ":email"}], ...}`, and one `submission_<id>/` folder per submission with the files as
  uploaded. Unknown YAML tags (Ruby objects) are read as plain values. A group submission is one entry:
  `student_id` and `student_name` join the members (`members` lists them one by one).

How a student's kernel is found: the rule of every path (submission.choose_kernel, with
`Limits.kernel_depth`): a file named `kernel.cu` (any case), the shallowest; two at the same depth are
ambiguous and refused. Without one, the only `.cu` file is graded (with a note); without any `.cu`, a
single `.zip` the student handed in is opened, one level only: a zip inside a student's zip is not opened.
A binary or empty kernel refuses the student here (submission.kernel_text), so intake.txt names it.

Every student a layout names is an Entry or a keyed Refusal: a class's empty folder ("nothing handed in"),
and a Canvas entry whose name is refused as unsafe (`../evil_1002_5002_kernel.cu`: its last part still
names Canvas user 1002, whose row gives the reason; nothing is written for it). The same student named by
two PATHs (the same gradebook id; folders without an id are never merged) is one row: the PATH given
later is graded, keeping the student's first key; the other is named in its notes and in `Intake.notes`.

Safety: archives are never extracted whole. Members with unsafe names ('..', absolute, drive letters,
backslashes, control characters), symbolic links and other non-regular entries, encrypted members,
members whose names collide after case and Unicode normalisation, and members that would expand more
than `Limits.ratio`:1 are refused one by one; the kernel is streamed with a byte limit (declared and
actual size both checked); everything read from one PATH is capped by `Limits.total_bytes`. In a folder,
symbolic links below the PATH are refused, never followed. A PATH that cannot be read at all (missing,
not a zip, damaged, too many entries) is refused whole; the other PATHs go on.

A `Refusal` says where (`source`, the PATH as given), what (`entry`, the member or file; empty for a
whole PATH) and why (`reason`). Its `key` is set only when it is the reason that student is not graded
(so a caller can write that student's error result under it), and then it also carries what an `Entry`
would: the gradebook ids, `late`, and notes naming whatever else of theirs was refused. A refusal of a
member that was not needed carries the student's id and name, if known, but no key, and is named in that
student's notes too (an Entry's or their blocking Refusal's), wherever it was found: in the class archive or
inside the student's own zip. A student is in `submissions` or, by key, in `refused`: never both, never
twice.

Folder layouts carry no LMS identity: their entries have empty `student_id` and `student_name`
(as `SubmissionResult` does for a single folder), and the key is the folder's (or file's) name.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import unicodedata
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .archive import (
    ArchiveRefused,
    Bad,
    Budget,
    Limits,
    Member,
    Refused,
    Tree,
    dir_tree,
    is_junk,
    read_file,
    refused_note,
    safe_name,
    zip_tree,
)
from .submission import (
    KERNEL_FILE,
    SubmissionError,
    choose_kernel,
    files_below,
    is_hidden,
    kernel_text,
    submitted_bytes,
)

__all__ = ["Entry", "Intake", "Limits", "Refusal", "discover", "looks_like_a_class", "safe_name"]

GRADESCOPE_METADATA = "submission_metadata.yml"


@dataclass
class Entry:
    key: str  # unique, a safe file name; also the name of `path`
    student_id: str  # as the LMS knows them ("" for folder layouts); group members joined by ","
    student_name: str  # as the LMS knows them ("" for folder layouts); group members joined by ", "
    path: Path  # workdir/<key>, holding kernel.cu: grade this folder
    source: str  # the PATH as given
    entry: str  # the file graded, inside source ("" when source is the .cu file itself)
    late: bool = False  # Canvas marked the submission late
    members: list[tuple[str, str]] = field(default_factory=list)  # (id, name) of each group member
    notes: list[str] = field(default_factory=list)  # how the kernel was chosen, where that needs saying
    # The ids a gradebook matches by (see SubmissionResult): each only where the layout says what it is.
    canvas_user_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""

    @property
    def kernel(self) -> Path:
        return self.path / KERNEL_FILE

    def headers(self, names: Sequence[str]) -> dict[str, bytes]:
        """The handed-in headers intake copied beside the kernel (plain files it wrote itself)."""
        return {name: (self.path / name).read_bytes() for name in names if (self.path / name).is_file()}

    def submitted(self, names: Sequence[str]) -> bytes:
        """Everything handed in that the grade depends on: the kernel, then each header by name (the fingerprint's)."""
        return submitted_bytes(self.kernel, names)


@dataclass
class Refusal:
    source: str  # where: the PATH as given
    entry: str  # what: the member or file inside it ("" when the whole PATH is refused)
    reason: str  # why, in words a student and an instructor can act on
    key: str = ""  # set when this is why that student is not graded
    student_id: str = ""
    student_name: str = ""
    # Set with `key`, as an Entry has them: the row of a student who is not graded still says who they are.
    canvas_user_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    late: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        where = f"{self.source}: {self.entry}" if self.entry else self.source
        return f"{where}: {self.reason}"


@dataclass
class Intake:
    submissions: list[Entry] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for the instructor: which layout each PATH was read as


def discover(paths: Iterable[str | os.PathLike[str]], workdir: str | os.PathLike[str],
             limits: Limits | None = None, handed_in: Sequence[str] = ()) -> Intake:
    """Find every student's kernel in `paths`, copy it to `workdir/<key>/kernel.cu`, refuse what is unsafe.
    `handed_in`: the headers the lab lets a student hand in (config compile.handed_in_headers), copied from
    beside the kernel to beside its copy, read as the kernel is."""
    paths = list(paths)
    run = _Run(Path(workdir), limits or Limits())
    run.handed_in = tuple(handed_in)
    # One folder given alone is a class, even of one student (class/alice/kernel.cu); given among others,
    # each folder is a student, who may keep the kernel in a folder of their own (bob/src/kernel.cu).
    run.lone_path = len(paths) == 1
    for path in paths:
        run.add_path(path)
    run.one_row_per_student()
    return run.intake


def looks_like_a_class(path: str | os.PathLike[str]) -> str:
    """Why `grade PATH` (one student's submission) was given what `grade batch` reads: a class's folder or
    zip, or any zip (which `grade` does not open). The words, ending in the command to run, or ""."""
    path = Path(path)
    batch = f"grade it with `grade batch {path} -o results/`"
    if path.is_dir():
        kind = _class_kind(files_below(path, 3)[0])
        return f"{path} looks like a class ({kind}), not one student's submission: {batch}" if kind else ""
    if path.suffix.lower() != ".zip" or not path.is_file():
        return ""
    try:
        with zipfile.ZipFile(path) as archive:
            kind = _class_kind(archive.namelist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        kind = ""
    if kind:
        return f"{path} looks like a class ({kind}), which `grade` does not read: {batch}"
    return f"{path} is a zip archive, which `grade` does not open: unzip it and grade the folder, or {batch}"


def _class_kind(names: Iterable[str]) -> str:
    """Which class layout these paths ('/'-separated, relative) are, as intake reads them, or ""."""
    files = [tuple(n.split("/")) for n in names if n and not n.endswith("/")]
    files = [f for f in files if not is_junk(f) and not is_hidden(f)]
    if any(f[-1].casefold() == GRADESCOPE_METADATA for f in files):
        return _LAYOUT_NAMES["gradescope"]
    if any(_parse_canvas(f[-1]) is not None for f in files):
        return _LAYOUT_NAMES["canvas"]
    if any(len(f) == 1 and f[0].casefold().endswith(".cu") for f in files):
        return ""  # a .cu file at the top: one student's
    students = {f[0] for f in files if len(f) > 1 and f[-1].casefold().endswith((".cu", ".zip"))}
    return f"{len(students)} student folders" if len(students) > 1 else ""


def _unicode_key(name: str) -> str:
    """A key for a name with no ASCII letter or digit ("学生"): its own letters, never a generic word."""
    text = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFC", name)).strip("._-")[:56]
    return text or "submission"


# --- name patterns -----------------------------------------------------------------------------

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_CANVAS_ANON = re.compile(r"^(?:(?P<late>late)_)?(?P<uid>anon_[A-Za-z0-9]+)_(?P<aid>\d+)_(?P<file>.+)$", re.IGNORECASE)
_CANVAS = re.compile(r"^(?P<name>.+?)_(?:(?P<late>late)_)?(?P<uid>\d+)_(?P<aid>\d+)_(?P<file>.+)$", re.IGNORECASE)
_CANVAS_TEXT = re.compile(r"^(?:(?P<name>.+?)_)??(?:(?P<late>late)_)?(?P<uid>\d+|anon_[A-Za-z0-9]+)"
                          r"_(?P<kind>text|link)\.html$", re.IGNORECASE)
_CANVAS_RENAMED = re.compile(rf"^(?P<base>.+?)-(?:\d+|{_UUID})(?P<ext>(?:\.[A-Za-z0-9]+)*)$", re.IGNORECASE)


@dataclass
class _CanvasName:
    name: str
    uid: str
    late: bool
    attachment: int  # -1 for text and link submissions
    file: str  # the student's own file name, Canvas's -N suffix dropped


def _parse_canvas(filename: str) -> _CanvasName | None:
    match = _CANVAS_ANON.match(filename)
    if match:
        name = ""
    else:
        match = _CANVAS.match(filename)
        if match:
            name = match["name"]
        else:
            match = _CANVAS_TEXT.match(filename)
            if not match:
                return None
            return _CanvasName(match["name"] or "", match["uid"], bool(match["late"]), -1,
                               f"{match['kind'].lower()}.html")
    file = match["file"]
    renamed = _CANVAS_RENAMED.match(file)
    if renamed:
        file = renamed["base"] + renamed["ext"]
    return _CanvasName(name, match["uid"], bool(match["late"]), int(match["aid"]), file)


_FOLDER_PERSON = re.compile(r"^(?P<name>.*?)\s*\((?P<id>[^()\s]+)\)$")


def _folders_at(tree: Tree, prefix: tuple[str, ...]) -> set[str]:
    """The folders directly under prefix, whatever they hold (nothing, junk, only refused entries):
    beside a student's folder they make the level a class, never a wrapper."""
    below = [*tree.folders, *(m.parts[:-1] for m in tree.members), *(b.parts[:-1] for b in tree.bad if b.parts)]
    return {parts[len(prefix)] for parts in below if len(parts) > len(prefix) and parts[: len(prefix)] == prefix
            and not is_junk(parts[len(prefix):len(prefix) + 1])}


def _empty_folders(tree: Tree, prefix: tuple[str, ...], students: list[_Student]) -> list[_Student]:
    """A student for each folder of a class that holds nothing of theirs: a folder names a student, who gets a
    row saying nothing was handed in, never silence."""
    named = {student.base for student in students}
    empty = sorted(_folders_at(tree, prefix) - named)
    return [_Student(folder, "/".join((*prefix, folder)) + "/", *reversed(_folder_person(folder)))
            for folder in empty]


def _folder_person(folder: str) -> tuple[str, str]:
    """(name, id) from a student's folder or file name: "Alice Smith (s1234567)" -> ("Alice Smith",
    "s1234567"); any other name is the student's name as it is, in any script ("学生")."""
    match = _FOLDER_PERSON.match(folder.strip())
    if match and match["name"]:
        return match["name"], match["id"]
    return folder.strip(), ""


def _ids(student: _Student) -> dict[str, str]:
    """The gradebook ids of a single student: a Canvas user id, or an SIS id, or an email (a login).
    A group's joined ids match no one, so a group has none."""
    found = student.student_id
    if not found or "," in found:
        return {}
    if student.canvas_user:
        return {"canvas_user_id": found}
    return {"sis_login_id": found} if "@" in found else {"sis_user_id": found}


def _last_part(name: str) -> str:
    """The file name at the end of an archive member's name, safe or not ("../x_1_2_kernel.cu" -> "x_1_2_kernel.cu")."""
    return name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _gradebook_id(row: Entry | Refusal) -> tuple[str, str] | None:
    """The id a gradebook knows this student by, or None (a folder without an id, a group)."""
    for kind in ("canvas_user_id", "sis_user_id", "sis_login_id"):
        if getattr(row, kind):
            return kind, getattr(row, kind).casefold()
    return None


def _is_kernel(name: str) -> bool:
    return name.casefold() == KERNEL_FILE


# --- students ----------------------------------------------------------------------------------

@dataclass
class _File:
    rel: tuple[str, ...]  # path within the student's own files, as matched
    member: Member
    display: str  # the member's name as the archive or folder has it


@dataclass
class _Student:
    base: str  # the key before it is made unique
    label: str  # names the student's files in messages ("alice/", "smith_101_...")
    student_id: str = ""
    student_name: str = ""
    files: list[_File] = field(default_factory=list)
    bad: list[tuple[tuple[str, ...], Refusal]] = field(default_factory=list)
    late: bool = False
    members: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_files: list[str] = field(default_factory=list)  # Canvas text and link submissions
    canvas_user: bool = False  # student_id is a Canvas user id (else an SIS id, or an email: a login)
    inner_refused: list[Refusal] = field(default_factory=list)  # members refused inside the student's own zip

    def refused_notes(self, blocking: Refusal | None = None) -> list[str]:
        """Every member of theirs that was refused, but the one that is why they are not graded."""
        return [refused_note(refusal.entry, refusal.reason) for refusal in
                [*(refusal for _, refusal in self.bad), *self.inner_refused] if refusal is not blocking]


class _Blocked(Exception):
    """The student's kernel was refused as a member; that refusal is the student's verdict."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


def _holds_kernel(members, folder: tuple[str, ...]) -> bool:
    """Whether a kernel file sits directly in this folder."""
    return any(m.parts[:-1] == folder and _is_kernel(m.parts[-1]) for m in members)


class _Run:
    def __init__(self, workdir: Path, limits: Limits) -> None:
        self.workdir = workdir
        self.limits = limits
        self.intake = Intake()
        self.used: set[str] = set()
        self.seen_paths: dict[str, str] = {}
        self.lone_path = False
        self.handed_in: tuple[str, ...] = ()
        workdir.mkdir(parents=True, exist_ok=True)

    # keys and output

    def _key(self, base: str) -> str:
        base = safe_name(safe_name(base, fallback="")[:56], fallback="") or _unicode_key(base)  # room for "-N"
        key, n = base, 1
        while key.casefold() in self.used:
            n += 1
            key = f"{base}-{n}"
        self.used.add(key.casefold())
        return key

    def _write(self, key: str, data: bytes, headers: dict[str, bytes] | None = None) -> Path:
        if not key or "/" in key or "\\" in key or key.startswith("."):
            raise ValueError(f"unsafe key {key!r}")  # keys come from _key(); this only guards a bug
        folder = self.workdir / key
        folder.mkdir(exist_ok=True)
        for name, content in {**(headers or {}), KERNEL_FILE: data}.items():  # names: config's, plain
            tmp = folder / f".{name}.tmp"
            tmp.write_bytes(content)
            os.replace(tmp, folder / name)
        return folder

    def _refuse(self, source: str, entry: str, reason: str, **who: str) -> Refusal:
        refusal = Refusal(source, entry, reason, **who)
        self.intake.refused.append(refusal)
        return refusal

    def _blame(self, refusal: Refusal, student: _Student) -> None:
        """`refusal` is why this student is not graded: their row keeps who they are, whether the LMS marked
        them late, and what else of theirs was refused."""
        refusal.key = self._key(student.base)
        refusal.student_id, refusal.student_name = student.student_id, student.student_name
        for name, value in _ids(student).items():
            setattr(refusal, name, value)
        refusal.late = student.late
        refusal.notes = student.notes + student.refused_notes(refusal)

    def one_row_per_student(self) -> None:
        """A student named by two PATHs (the same Canvas user id, SIS id or login; a name alone never merges two
        students) is one row: the submission in the PATH given later is the one graded, as a resubmission would
        be (within one PATH, the later key); the others are named in its notes and in intake.txt."""
        order = {source: i for i, source in enumerate(self.seen_paths.values())}
        rows = [*self.intake.submissions, *(r for r in self.intake.refused if r.key)]
        by_student: dict[tuple[str, str], list[Entry | Refusal]] = {}
        for row in sorted(rows, key=lambda r: (order.get(r.source, -1), r.key.casefold())):
            ident = _gradebook_id(row)
            if ident is not None:
                by_student.setdefault(ident, []).append(row)
        for same in by_student.values():
            if len(same) > 1:
                self._keep_the_last(same)

    def _keep_the_last(self, same: list[Entry | Refusal]) -> None:
        kept, earlier = same[-1], same[:-1]
        where = "; ".join(f"{row.source}: {row.entry or row.key}" for row in earlier)
        first_key = earlier[0].key
        for row in earlier:
            if isinstance(row, Entry):
                self.intake.submissions.remove(row)
                shutil.rmtree(row.path)  # the copy intake made of a kernel that is not graded
            else:
                row.key = ""  # still named in intake.txt, no longer a row of its own
        self._rename(kept, first_key)  # the student's key, not a "-2" that reads as a second student
        kept.notes.append(f"also handed in in {where}: not graded, the submission in {kept.source} (the PATH "
                          "given later) is graded")
        self.intake.notes.append(f"{kept.key}: the same student in {where} and in {kept.source}; graded the one in "
                                 f"{kept.source} (the PATH given later)")

    def _rename(self, row: Entry | Refusal, key: str) -> None:
        if isinstance(row, Entry):
            shutil.rmtree(self.workdir / key, ignore_errors=True)  # an earlier run's copy under that key
            row.path = row.path.rename(self.workdir / key)
        row.key = key

    # PATHs

    def add_path(self, raw: str | os.PathLike[str]) -> None:
        source = os.fspath(raw)
        path = Path(raw)
        budget = Budget(self.limits.total_bytes)
        real = os.path.realpath(path)
        if real in self.seen_paths:
            self.intake.notes.append(f"{source}: skipped, the same as {self.seen_paths[real]}, given before")
            return
        self.seen_paths[real] = source
        try:
            if path.is_dir():
                tree = dir_tree(path, source, self.limits, budget, skip=(self.workdir,))
                self._tree(tree, source, path.resolve().name, budget)
            elif path.suffix.lower() == ".zip" and path.is_file():
                self._zip(path, source, budget)
            elif path.suffix.lower() == ".cu" and path.is_file():
                self._single_file(path, source, budget)
            elif not path.exists():
                self._refuse(source, "", "not found: give a folder, a .zip archive or a .cu file")
            else:
                self._refuse(source, "", "is not a submission: give a folder, a .zip archive or a .cu file "
                                         "(other archive formats are not read)")
        except ArchiveRefused as exc:
            self._refuse(source, "", exc.reason)
        except Exception as exc:  # noqa: BLE001 (one PATH, whatever goes wrong, never stops the batch)
            self._refuse(source, "", f"could not be read ({type(exc).__name__}: {exc})")

    def _zip(self, path: Path, source: str, budget: Budget) -> None:
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
            raise ArchiveRefused(f"is not a readable zip archive ({exc}); download it again") from None
        with zf:
            tree = zip_tree(zf, source, self.limits, budget)
            self._tree(tree, source, path.stem, budget)

    def _single_file(self, path: Path, source: str, budget: Budget) -> None:
        base = safe_name(path.stem)
        try:
            data = read_file(path, budget, self.limits.file_bytes, follow=True)
        except Refused as exc:
            self._refuse(source, "", exc.reason, key=self._key(base))
            return
        key = self._key(base)
        self.intake.submissions.append(Entry(key, "", "", self._write(key, data), source, ""))

    # layouts

    def _tree(self, tree: Tree, source: str, outer_name: str, budget: Budget) -> None:
        members = [m for m in tree.members if not is_junk(m.parts)]
        bad = list(tree.bad)
        prefix: tuple[str, ...] = ()
        layout = "class"
        for _ in range(5):  # up to 4 wrapper folders, then the level is classified
            level = [m for m in members if m.parts[: len(prefix)] == prefix]
            top = [m.parts[-1] for m in level if len(m.parts) == len(prefix) + 1]
            dirs = {m.parts[len(prefix)] for m in level if len(m.parts) > len(prefix) + 1}
            if any(name.casefold() == GRADESCOPE_METADATA for name in top):
                layout = "gradescope"
                break
            canvas = sum(_parse_canvas(name) is not None for name in top)
            if canvas and canvas > len(dirs):
                layout = "canvas"
                break
            if any(_is_kernel(name) for name in top):
                layout = "single"
                break
            if not top and len(dirs) == 1 and len(_folders_at(tree, prefix)) <= 1:
                only = next(iter(dirs))
                if self.lone_path and _holds_kernel(level, (*prefix, only)):
                    break  # a class of one student: that folder is theirs
                prefix += (only,)
                continue
            break
        members = [m for m in members if m.parts[: len(prefix)] == prefix]
        students, stray = {
            "gradescope": self._gradescope,
            "canvas": self._canvas,
            "single": self._single,
            "class": self._class,
        }[layout](members, bad, prefix, source, outer_name)
        if layout == "class":
            students += _empty_folders(tree, prefix, students)
        for item in stray:  # refused members that belong to no student
            self._refuse(source, item.name, item.reason)
        if not students and not stray and not self.lone_path:  # a PATH among others is a student: still a row
            students = [_Student(outer_name, "", *reversed(_folder_person(outer_name)))]
        if not students and not stray:
            self._refuse(source, "", f"holds no submissions: no {KERNEL_FILE}, .cu or .zip file was found")
            return
        before = len(self.intake.submissions)
        for student in sorted(students, key=lambda s: (s.base.casefold(), s.label)):
            self._grade_one(student, source, budget)
        graded = len(self.intake.submissions) - before
        self.intake.notes.append(f"{source}: read as {_LAYOUT_NAMES[layout]}; {len(students)} "
                                 f"{'student' if len(students) == 1 else 'students'}, {graded} to grade")

    def _assign(self, members, bad, prefix, student_for, students):
        """Each member file to the student it belongs to; refused entries to theirs where known."""
        for m in members:
            found = student_for(m.parts[len(prefix):])
            if found:
                found[0].files.append(_File(found[1], m, m.name))
        stray = self._attach_bad(bad, prefix, student_for)
        return list(students.values()), stray

    def _attach_bad(self, bad: list[Bad], prefix: tuple[str, ...], student_of) -> list[Bad]:
        """Give each refused member to its student (student_of(rel parts) -> (_Student, rel) or None)."""
        stray = []
        for item in bad:
            if item.parts is None or item.parts[: len(prefix)] != prefix or is_junk(item.parts):
                stray.append(item)
                continue
            found = student_of(item.parts[len(prefix):])
            if found is None:
                stray.append(item)
                continue
            student, rel = found
            refusal = Refusal("", item.name, item.reason, student_id=student.student_id,
                              student_name=student.student_name)
            student.bad.append((rel, refusal))
        return stray

    def _single(self, members, bad, prefix, source, outer_name):
        person, sis = _folder_person(outer_name)
        student = _Student(outer_name, "/".join(prefix) + "/" if prefix else source, sis, person)
        for m in members:
            student.files.append(_File(m.parts[len(prefix):], m, m.name))
        stray = self._attach_bad(bad, prefix, lambda rel: (student, rel))
        return [student], stray

    def _class(self, members, bad, prefix, source, outer_name):
        students: dict[str, _Student] = {}

        def student_for(rel: tuple[str, ...]) -> tuple[_Student, tuple[str, ...]] | None:
            label = "/".join(prefix + rel[:1])
            if len(rel) > 1:
                name, own, label = rel[0], rel[1:], label + "/"
            elif rel[0].casefold().endswith(".cu"):  # a class of .cu files: each one is that student's kernel
                name, own = rel[0][: -len(".cu")], (KERNEL_FILE,)
            elif rel[0].casefold().endswith(".zip"):
                name, own = rel[0][: -len(".zip")], rel
            else:
                return None
            if name not in students:
                person, sis = _folder_person(name)
                students[name] = _Student(name, label, sis, person)
            return students[name], own

        return self._assign(members, bad, prefix, student_for, students)

    def _canvas(self, members, bad, prefix, source, outer_name):
        students: dict[str, _Student] = {}
        kept: dict[tuple[str, str], tuple[int, _File]] = {}
        dropped: dict[tuple[str, str], list[str]] = {}

        def student_for(rel: tuple[str, ...]) -> tuple[_Student, _CanvasName] | None:
            parsed = _parse_canvas(rel[0]) if len(rel) == 1 else None
            if parsed is None:
                return None
            student = students.get(parsed.uid)
            if student is None:
                base = f"{parsed.name}_{parsed.uid}" if parsed.name else parsed.uid
                student = students[parsed.uid] = _Student(base, f"{parsed.name or parsed.uid} "
                                                                f"(Canvas user {parsed.uid})",
                                                          parsed.uid, parsed.name,
                                                          canvas_user=not parsed.uid.startswith("anon_"))
            student.late = student.late or parsed.late
            return student, parsed

        for m in members:
            found = student_for(m.parts[len(prefix):])
            if not found:
                continue
            student, parsed = found
            if parsed.attachment < 0:
                student.not_files.append(f"{'a text entry' if parsed.file == 'text.html' else 'a link'} ({m.name})")
                continue
            slot = (parsed.uid, parsed.file.casefold())
            file = _File((parsed.file,), m, m.name)
            if slot in kept:
                older, newer = sorted([kept[slot], (parsed.attachment, file)], key=lambda t: t[0])
                dropped.setdefault(slot, []).append(older[1].display)
                kept[slot] = newer
            else:
                kept[slot] = (parsed.attachment, file)
        for (uid, _), (_, file) in sorted(kept.items()):
            student = students[uid]
            student.files.append(file)
            if dropped.get((uid, file.rel[0].casefold())):
                student.notes.append(f"{file.display} is the newest of the uploads named {file.rel[0]}; "
                                     f"not graded: {', '.join(sorted(dropped[(uid, file.rel[0].casefold())]))}")

        def bad_for(rel):
            found = student_for(rel)
            return (found[0], (found[1].file,)) if found else None

        unplaced = [item for item in bad if item.parts is None and bad_for((_last_part(item.name),))]
        for item in unplaced:  # `../evil_1002_5002_kernel.cu`: never written anywhere, but user 1002 gets a row
            student, rel = bad_for((_last_part(item.name),))
            student.bad.append((rel, Refusal("", item.name, item.reason, student_id=student.student_id,
                                             student_name=student.student_name)))
        stray = self._attach_bad([item for item in bad if item not in unplaced], prefix, bad_for)
        return list(students.values()), stray

    def _gradescope(self, members, bad, prefix, source, outer_name):
        people: dict[str, list[tuple[str, str]]] = {}
        meta = [m for m in members if len(m.parts) == len(prefix) + 1
                and m.parts[-1].casefold() == GRADESCOPE_METADATA]
        try:
            data = meta[0].read(self.limits.metadata_bytes)
            people = _gradescope_people(yaml.load(data, Loader=_MetadataLoader))
        except (Refused, yaml.YAMLError, UnicodeDecodeError) as exc:
            reason = exc.reason if isinstance(exc, Refused) else f"is not valid YAML ({_one_line(exc)})"
            self._refuse(source, meta[0].name, f"{reason}; the submissions are graded without student names")
        students: dict[str, _Student] = {}

        def student_for(rel: tuple[str, ...]) -> tuple[_Student, tuple[str, ...]] | None:
            if len(rel) < 2:
                return None
            folder = rel[0]
            student = students.get(folder)
            if student is None:
                who = people.get(folder, [])
                ids = [i for i, _ in who]
                names = [n for _, n in who]
                first_id = next((i for i in ids if i), "")
                base = folder
                if who:
                    base = f"{names[0]}_{first_id or folder}"
                    if len(who) > 1:
                        base += f"_and_{len(who) - 1}_more"
                where = "/".join(prefix + (folder,)) + "/"
                student = students[folder] = _Student(base, where, ",".join(i for i in ids if i),
                                                      ", ".join(n for n in names if n),
                                                      members=list(who) if len(who) > 1 else [])
            return student, rel[1:]

        return self._assign(members, bad, prefix, student_for, students)

    # one student

    def _grade_one(self, student: _Student, source: str, budget: Budget) -> None:
        who = {"student_id": student.student_id, "student_name": student.student_name}
        for _, refusal in student.bad:
            refusal.source = source
            self.intake.refused.append(refusal)
        # A refused kernel.cu is the student's verdict: never fall back to some other file instead.
        blocking = next((r for rel, r in student.bad
                         if _is_kernel(rel[-1]) and len(rel) - 1 <= self.limits.kernel_depth), None)
        if blocking is not None:
            self._blame(blocking, student)
            return
        try:
            data, entry, notes, headers = self._kernel_of(student, student.files, source, budget, nested=False)
        except _Blocked as exc:
            self._blame(exc.refusal, student)
            return
        except Refused as exc:
            blocking = next((r for rel, r in student.bad if rel[-1].casefold().endswith((".cu", ".zip"))), None)
            if blocking is None or student.files:
                blocking = self._refuse(source, exc.entry or student.label, exc.reason, **who)
            self._blame(blocking, student)
            return
        key = self._key(student.base)
        self.intake.submissions.append(Entry(key, student.student_id, student.student_name,
                                             self._write(key, data, headers), source, entry, student.late,
                                             list(student.members), student.notes + notes + student.refused_notes(),
                                             **_ids(student)))

    def _kernel_of(self, student: _Student, files: list[_File], source: str, budget: Budget,
                   nested: bool) -> tuple[bytes, str, list[str], dict[str, bytes]]:
        """(content, entry name, notes, the handed-in headers beside it) of the student's kernel, or Refused."""
        limits = self.limits
        by_path = {"/".join(f.rel): f for f in files}
        try:
            chosen_path, notes = choose_kernel(by_path, limits.kernel_depth)  # the rule of every path
        except SubmissionError as exc:
            return self._no_kernel(student, files, source, budget, nested, str(exc))
        chosen = by_path[chosen_path]
        try:
            data = chosen.member.read(limits.file_bytes)
            kernel_text(chosen.rel[-1], data)  # binary or empty: refused here, so intake.txt names it
        except Refused as exc:
            raise Refused(exc.reason, chosen.display) from None
        except SubmissionError as exc:
            raise Refused(str(exc), chosen.display) from None
        return data, chosen.display, notes, self._headers_beside(chosen, files, student)

    def _no_kernel(self, student: _Student, files: list[_File], source: str, budget: Budget, nested: bool,
                   reason: str) -> tuple[bytes, str, list[str], dict[str, bytes]]:
        """No .cu file to grade by the rule (`reason` says why): a single zip the student handed in is opened
        instead; otherwise the student is refused with the rule's words."""
        within = [f for f in files if len(f.rel) - 1 <= self.limits.kernel_depth]
        if any(f.rel[-1].casefold().endswith(".cu") for f in within):  # .cu files there, none chosen
            raise Refused(reason)
        zips = [f for f in within if f.rel[-1].casefold().endswith(".zip")]
        if len(zips) == 1:
            return self._kernel_in_zip(student, zips[0], source, budget, nested)
        if zips:
            listed = ", ".join("/".join(f.rel) for f in zips[:8])
            raise Refused(f"no {KERNEL_FILE}, and {len(zips)} zip files ({listed}): hand in one")
        if not files and student.not_files:
            raise Refused(f"no {KERNEL_FILE} was handed in, only {', '.join(student.not_files)}")
        raise Refused(reason)

    def _headers_beside(self, kernel: _File, files: list[_File], student: _Student) -> dict[str, bytes]:
        """The handed-in headers in the kernel's folder, read as it is; one refused (a link, too large) refuses
        the student, with the reason (grading without it would only say it is missing)."""
        headers = {}
        for name in self.handed_in:
            rel = (*kernel.rel[:-1], name)
            bad = next((refusal for where, refusal in student.bad if where == rel), None)
            if bad is not None:
                raise Refused(bad.reason, bad.entry)
            found = next((f for f in files if f.rel == rel), None)
            if found is not None:
                try:
                    headers[name] = found.member.read(self.limits.file_bytes)
                except Refused as exc:
                    raise Refused(exc.reason, found.display) from None
        return headers

    def _kernel_in_zip(self, student: _Student, file: _File, source: str, budget: Budget,
                       nested: bool) -> tuple[bytes, str, list[str], dict[str, bytes]]:
        if nested:
            raise Refused(f"{file.rel[-1]} is a zip inside a zip, which is not opened: hand in {KERNEL_FILE}, "
                          f"or one zip that holds it", file.display)
        try:
            blob = file.member.read(self.limits.archive_bytes, verb="opened")
            inner = zipfile.ZipFile(io.BytesIO(blob))
        except Refused as exc:
            raise Refused(exc.reason, file.display) from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
            raise Refused(f"{file.rel[-1]} is not a readable zip archive ({exc})", file.display) from None
        try:
            tree = zip_tree(inner, f"{source} > {file.display}", self.limits, budget, nested=True)
        except ArchiveRefused as exc:
            raise Refused(f"{file.rel[-1]} {exc.reason}", file.display) from None
        who = {"student_id": student.student_id, "student_name": student.student_name}
        refused_kernel = None
        for item in tree.bad:
            if item.parts is not None and is_junk(item.parts):
                continue
            refusal = self._refuse(source, f"{file.display} > {item.name}", item.reason, **who)
            student.inner_refused.append(refusal)
            if item.parts and _is_kernel(item.parts[-1]) and refused_kernel is None:
                refused_kernel = refusal
        if refused_kernel is not None:
            raise _Blocked(refused_kernel)
        files = [_File(m.parts, m, f"{file.display} > {m.name}") for m in tree.members if not is_junk(m.parts)]
        return self._kernel_of(student, files, source, budget, nested=True)


_LAYOUT_NAMES = {
    "gradescope": "a Gradescope export",
    "canvas": "a Canvas submissions download",
    "single": "one student's submission",
    "class": "a folder of student submissions",
}


# --- Gradescope metadata -----------------------------------------------------------------------

class _MetadataLoader(yaml.SafeLoader):
    """SafeLoader that reads tags it does not know (Ruby objects in Gradescope's YAML) as plain values."""


def _plain(loader: yaml.SafeLoader, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_MetadataLoader.add_constructor(None, _plain)


def _field(record: dict, name: str) -> str:
    for key in (f":{name}", name):
        value = record.get(key)
        if value is not None:
            return str(value).strip()
    return ""


def _gradescope_people(data: object) -> dict[str, list[tuple[str, str]]]:
    """{submission folder: [(student id, name), ...]}; the id is the SID, else the email."""
    people: dict[str, list[tuple[str, str]]] = {}
    if not isinstance(data, dict):
        return people
    for folder, record in data.items():
        if not isinstance(record, dict):
            continue
        submitters = record.get(":submitters", record.get("submitters")) or []
        if not isinstance(submitters, list):
            continue
        who = [(_field(s, "sid") or _field(s, "email"), _field(s, "name")) for s in submitters if isinstance(s, dict)]
        if who:
            people[str(folder)] = who
    return people


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
