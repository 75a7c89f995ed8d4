"""Batch intake: folders, Canvas and Gradescope downloads, and archives that try to hurt the grader."""
from __future__ import annotations

import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from grader.intake.intake import Entry, Intake, Limits, Refusal, discover, safe_name
from grader.intake.submission import read_submission


def kernel(tag: str) -> bytes:
    return (f"// {tag}\n#define TILE_SIZE 16\n"
            "__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) {}\n").encode()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def make_zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]],
             compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def zip_bytes(members: list[tuple[str, bytes]]) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()


def symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix: the high 16 bits of external_attr are st_mode
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def by_key(intake: Intake) -> dict[str, Entry]:
    keys = [e.key for e in intake.submissions]
    assert len(keys) == len(set(keys)), keys
    return {e.key: e for e in intake.submissions}


def refusal_for(intake: Intake, entry_part: str) -> Refusal:
    found = [r for r in intake.refused if entry_part in r.entry]
    assert len(found) == 1, (entry_part, intake.refused)
    return found[0]


def assert_graded(entry: Entry, tag: str) -> None:
    # The folder handed to the pipeline holds exactly that student's kernel and is named by the key.
    assert entry.path.name == entry.key
    assert entry.kernel == entry.path / "kernel.cu"
    assert entry.kernel.read_bytes() == kernel(tag)
    submission = read_submission(entry.path)
    assert submission.name == entry.key
    assert f"// {tag}\n" in submission.source


# --- folders -----------------------------------------------------------------------------------

def test_folder_of_student_folders(tmp_path):
    cls = tmp_path / "class"
    write(cls / "alice" / "kernel.cu", kernel("alice"))
    write(cls / "bob" / "src" / "kernel.cu", kernel("bob"))  # nested one level
    write(cls / "bob" / "README.md", b"notes")
    write(cls / "carol" / "notes.txt", b"I ran out of time")
    write(cls / "dave" / "sgemm.cu", kernel("dave"))  # the only .cu file, not named kernel.cu
    write(cls / "erin" / "a" / "kernel.cu", kernel("erin-a"))
    write(cls / "erin" / "b" / "kernel.cu", kernel("erin-b"))
    write(cls / "frank.cu", kernel("frank"))  # a class folder may also hold one .cu per student
    write(cls / ".git" / "kernel.cu", kernel("hidden"))  # hidden folders are never students
    write(cls / "grades.csv", b"name,score\n")

    intake = discover([cls], tmp_path / "work")

    entries = by_key(intake)
    assert sorted(entries) == ["alice", "bob", "dave", "frank"]
    for key in ("alice", "bob", "dave", "frank"):
        assert_graded(entries[key], key)
        # A folder's name is the student's name; it carries no LMS id.
        assert entries[key].student_id == "" and entries[key].student_name == key
        assert entries[key].source == str(cls)
    assert entries["bob"].entry == "bob/src/kernel.cu"
    assert any("sgemm.cu, the only .cu file" in n for n in entries["dave"].notes)
    assert entries["alice"].notes == []

    refused = {r.key: r for r in intake.refused}
    assert sorted(refused) == ["carol", "erin"]
    # The words of every path (submission.choose_kernel), relative to the student's own folder.
    assert "no kernel.cu and no .cu file; found: notes.txt" in refused["carol"].reason
    assert refused["carol"].entry == "carol/"
    assert refused["erin"].source == str(cls)
    assert "2 files named kernel.cu in your submission (a/kernel.cu, b/kernel.cu)" in refused["erin"].reason


def test_an_empty_folder_given_among_others_is_a_student_who_handed_in_nothing(tmp_path):
    """`grade batch alice/ bob/`: each PATH names a student, so an empty one is a row, not a lost student."""
    (tmp_path / "alice").mkdir()
    write(tmp_path / "bob" / "kernel.cu", kernel("bob"))
    intake = discover([tmp_path / "alice", tmp_path / "bob"], tmp_path / "work")
    assert sorted(by_key(intake)) == ["bob"]
    refused = {r.key: r for r in intake.refused}
    assert list(refused) == ["alice"] and "nothing handed in" in refused["alice"].reason


def test_the_same_student_in_two_paths_is_one_row_from_the_later_path_run_after_run(tmp_path):
    """The later PATH's submission counts even when it is the refused one; the row keeps the student's first key,
    and a second run into the same workdir (--resume) finds the same."""
    for section, data in (("s1", kernel("first")), ("s2", b"")):
        write(tmp_path / section / "Sam Lee (s42)" / "kernel.cu", data)
        write(tmp_path / section / "other" / "kernel.cu", kernel(section))
    for _ in range(2):
        intake = discover([tmp_path / "s1", tmp_path / "s2"], tmp_path / "work")
        assert "Sam_Lee_s42" not in by_key(intake)
        sam = [r for r in intake.refused if r.key and r.sis_user_id == "s42"]
        assert [r.key for r in sam] == ["Sam_Lee_s42"] and "empty" in sam[0].reason
        assert any(f"also handed in in {tmp_path / 's1'}" in note for note in sam[0].notes)
        assert sorted(by_key(intake)) == ["other", "other-2"]  # no id: never merged


def test_workdir_inside_the_class_folder_and_a_path_given_twice(tmp_path):
    cls = tmp_path / "class"
    write(cls / "alice" / "kernel.cu", kernel("alice"))
    write(cls / "bob" / "kernel.cu", kernel("bob"))
    archive = make_zip(tmp_path / "class.zip", [("class/carol/kernel.cu", kernel("carol")),
                                                 ("class/dave/kernel.txt", b"oops")])

    intake = discover([cls, archive, str(cls) + "/", archive], cls / "work")  # a re-run would find work/

    assert sorted(by_key(intake)) == ["alice", "bob", "carol"]  # not "work", nothing twice
    again = discover([cls], cls / "work")
    assert sorted(by_key(again)) == ["alice", "bob"]
    [dave] = intake.refused
    assert (dave.key, dave.source, dave.entry) == ("dave", str(archive), "class/dave/")
    assert sum("skipped, the same as" in n for n in intake.notes) == 2


def test_single_student_folder_nested_folder_and_cu_file(tmp_path):
    write(tmp_path / "alice" / "kernel.cu", kernel("alice"))
    write(tmp_path / "alice" / "notes.md", b"")
    write(tmp_path / "bob" / "src" / "kernel.cu", kernel("bob"))  # one wrapper folder: still bob's
    single = write(tmp_path / "loose" / "carol_final.cu", kernel("carol"))

    intake = discover([tmp_path / "alice", tmp_path / "bob", single], tmp_path / "work")

    entries = by_key(intake)
    assert sorted(entries) == ["alice", "bob", "carol_final"]
    assert_graded(entries["alice"], "alice")
    assert_graded(entries["bob"], "bob")
    assert_graded(entries["carol_final"], "carol")
    assert entries["carol_final"].entry == ""
    assert intake.refused == []


def test_symlinks_and_oversized_files_in_a_folder_are_refused(tmp_path):
    cls = tmp_path / "class"
    write(cls / "alice" / "kernel.cu", kernel("alice"))
    secret = write(tmp_path / "reference" / "kernel.cu", kernel("reference"))
    (cls / "mallory").mkdir(parents=True)
    os.symlink(secret, cls / "mallory" / "kernel.cu")  # would leak the reference into a compile error
    write(cls / "oscar" / "kernel.cu", b"//" + b"x" * (300 * 1024))

    intake = discover([cls], tmp_path / "work")

    assert sorted(by_key(intake)) == ["alice"]
    mallory = refusal_for(intake, "mallory/kernel.cu")
    assert mallory.key == "mallory" and "symbolic link" in mallory.reason
    oscar = [r for r in intake.refused if r.key == "oscar"]
    assert len(oscar) == 1 and "300 kB: larger than 256 kB, so it is not graded" in oscar[0].reason
    assert not (tmp_path / "work" / "mallory").exists()
    assert not (tmp_path / "work" / "oscar").exists()


# --- Canvas --------------------------------------------------------------------------------------

def test_canvas_download_groups_files_per_student(tmp_path):
    archive = make_zip(tmp_path / "submissions.zip", [
        ("smithjohn_101_1001_kernel.cu", kernel("john")),
        ("smithjane_202_2001_kernel.cu", kernel("jane")),  # same last name: kept apart by user id
        ("smithjane_202_2002_README.txt", b"readme"),
        ("doe_late_303_3001_kernel.cu", kernel("doe")),
        ("roe_LATE_404_4001_kernel.cu", kernel("roe")),
        ("lee_505_5001_kernel.cu", kernel("lee-old")),
        ("lee_505_5007_kernel-1.cu", kernel("lee-new")),  # Canvas renamed the newer upload
        ("kim_606_6001_report.pdf", b"%PDF-1.4"),
        ("park_707_7001_lab3.zip", zip_bytes([("lab3/src/kernel.cu", kernel("park")),
                                               ("lab3/README", b"")])),
        ("ng_808_8001_kernel-2.cu", kernel("ng")),  # only the renamed upload is in the download
        ("late_anon_Ab1cD_9001_kernel.cu", kernel("anon")),  # anonymous grading
        ("zhao_909_text.html", b"<p>my kernel is ...</p>"),  # a text entry, not a file
    ])

    intake = discover([archive], tmp_path / "work")

    entries = by_key(intake)
    assert sorted(entries) == ["anon_Ab1cD", "doe_303", "lee_505", "ng_808", "park_707", "roe_404",
                               "smithjane_202", "smithjohn_101"]
    expect = {"smithjohn_101": ("101", "smithjohn", "john", False),
              "smithjane_202": ("202", "smithjane", "jane", False),
              "doe_303": ("303", "doe", "doe", True),
              "roe_404": ("404", "roe", "roe", True),
              "lee_505": ("505", "lee", "lee-new", False),
              "park_707": ("707", "park", "park", False),
              "ng_808": ("808", "ng", "ng", False),
              "anon_Ab1cD": ("anon_Ab1cD", "", "anon", True)}
    for key, (sid, name, tag, late) in expect.items():
        entry = entries[key]
        assert (entry.student_id, entry.student_name, entry.late) == (sid, name, late), key
        assert entry.source == str(archive)
        assert_graded(entry, tag)
    assert entries["lee_505"].entry == "lee_505_5007_kernel-1.cu"
    assert any("lee_505_5001_kernel.cu" in n for n in entries["lee_505"].notes)  # the older one, named
    assert entries["park_707"].entry == "park_707_7001_lab3.zip > lab3/src/kernel.cu"

    refused = {r.key: r for r in intake.refused}
    assert sorted(refused) == ["kim_606", "zhao_909"]
    assert refused["kim_606"].student_id == "606" and "report.pdf" in refused["kim_606"].reason
    assert refused["zhao_909"].student_name == "zhao"
    assert refused["zhao_909"].reason == "no kernel.cu was handed in, only a text entry (zhao_909_text.html)"
    assert any("Canvas" in note for note in intake.notes)


# --- Gradescope ----------------------------------------------------------------------------------

METADATA = """\
submission_1001:
  :submitters:
  - :name: Alice Liddell
    :sid: '42'
    :email: alice@example.edu
  :created_at: 2024-03-01 10:00:00.000000000 -08:00
  :score: !ruby/object:BigDecimal 18:0.5e1
submission_1002:
  :submitters:
  - :name: Bob Ross
    :sid: '77'
    :email: bob@example.edu
  - :name: Carol Danvers
    :sid: '78'
    :email: carol@example.edu
submission_1003:
  :submitters:
  - :name: Dan Brown
    :sid: ''
    :email: dan@example.edu
"""


def gradescope_members(root: str) -> list[tuple[str, bytes]]:
    return [
        (f"{root}submission_metadata.yml", METADATA.encode()),
        (f"{root}submission_1001/kernel.cu", kernel("alice")),
        (f"{root}submission_1002/lab/kernel.cu", kernel("bob-carol")),
        (f"{root}submission_1003/Kernel.cu", kernel("dan")),
        (f"{root}submission_1004/kernel.cu", kernel("nobody")),  # not in the metadata
        (f"{root}submission_1005/answers.txt", b"42"),
        (f"__MACOSX/{root}._submission_metadata.yml", b"\0"),
    ]


def check_gradescope(intake: Intake, source: str) -> None:
    entries = by_key(intake)
    assert sorted(entries) == ["Alice_Liddell_42", "Bob_Ross_77_and_1_more", "Dan_Brown_dan_example.edu",
                               "submission_1004"]
    alice = entries["Alice_Liddell_42"]
    assert (alice.student_id, alice.student_name, alice.members) == ("42", "Alice Liddell", [])
    group = entries["Bob_Ross_77_and_1_more"]
    assert (group.student_id, group.student_name) == ("77,78", "Bob Ross, Carol Danvers")
    assert group.members == [("77", "Bob Ross"), ("78", "Carol Danvers")]
    dan = entries["Dan_Brown_dan_example.edu"]
    assert (dan.student_id, dan.student_name) == ("dan@example.edu", "Dan Brown")  # no SID: the email
    # Gradebook ids, each in its own kind: an SID is an SIS user id, an email a login, never a Canvas id.
    assert (alice.sis_user_id, alice.sis_login_id, alice.canvas_user_id) == ("42", "", "")
    assert (dan.sis_user_id, dan.sis_login_id, dan.canvas_user_id) == ("", "dan@example.edu", "")
    assert (group.sis_user_id, group.sis_login_id, group.canvas_user_id) == ("", "", "")  # joined ids match no one
    assert entries["submission_1004"].student_id == ""
    for key, tag in (("Alice_Liddell_42", "alice"), ("Bob_Ross_77_and_1_more", "bob-carol"),
                     ("Dan_Brown_dan_example.edu", "dan"), ("submission_1004", "nobody")):
        assert entries[key].source == source
        assert_graded(entries[key], tag)
    assert [r.key for r in intake.refused] == ["submission_1005"]
    assert "no kernel.cu" in intake.refused[0].reason


def test_gradescope_export_zip(tmp_path):
    archive = make_zip(tmp_path / "export.zip", gradescope_members("assignment_9100_export/"))
    intake = discover([archive], tmp_path / "work")
    check_gradescope(intake, str(archive))
    assert any("Gradescope" in note for note in intake.notes)


def test_gradescope_export_folder(tmp_path):
    root = tmp_path / "export"
    for name, data in gradescope_members(""):
        write(root / name, data)
    intake = discover([root], tmp_path / "work")
    check_gradescope(intake, str(root))


def test_gradescope_bad_metadata_still_grades_every_submission(tmp_path):
    archive = make_zip(tmp_path / "export.zip", [
        ("submission_metadata.yml", b"submission_1: [unclosed\n"),
        ("submission_1/kernel.cu", kernel("one")),
        ("submission_2/kernel.cu", kernel("two")),
    ])
    intake = discover([archive], tmp_path / "work")
    entries = by_key(intake)
    assert sorted(entries) == ["submission_1", "submission_2"]
    assert_graded(entries["submission_2"], "two")
    [bad] = intake.refused
    assert (bad.source, bad.entry, bad.key) == (str(archive), "submission_metadata.yml", "")
    assert "not valid YAML" in bad.reason and "graded without student names" in bad.reason


# --- archive safety --------------------------------------------------------------------------------

def test_each_unsafe_member_is_refused_and_the_rest_is_graded(tmp_path):
    bomb = b"\0" * (20 * 1024 * 1024)  # 20 MB of zeros: ~20 kB compressed
    archive = make_zip(tmp_path / "class.zip", [
        ("class/alice/kernel.cu", kernel("alice")),
        ("class/../../evil/kernel.cu", kernel("evil")),
        ("/etc/cron.d/kernel.cu", kernel("abs")),
        ("C:/Windows/kernel.cu", kernel("drive")),
        ("class\\bob\\kernel.cu", kernel("bob")),
        (symlink_info("class/mallory/kernel.cu"), b"/etc/passwd"),
        ("class/trent/kernel.cu", bomb),
        ("class/peggy/kernel.cu", kernel("peggy-1")),
        ("class/peggy/KERNEL.cu", kernel("peggy-2")),
        ("class/victor/kernel.cu", kernel("victor")),
        (symlink_info("class/victor/notes.txt"), b"/etc/shadow"),
    ])

    intake = discover([archive], tmp_path / "work")

    entries = by_key(intake)
    assert sorted(entries) == ["alice", "victor"]
    assert_graded(entries["alice"], "alice")
    assert_graded(entries["victor"], "victor")
    assert all(r.source == str(archive) for r in intake.refused)

    assert "climbs out" in refusal_for(intake, "../../evil/kernel.cu").reason
    assert "absolute path" in refusal_for(intake, "/etc/cron.d/kernel.cu").reason
    assert "drive letter" in refusal_for(intake, "C:/Windows/kernel.cu").reason
    assert "backslash" in refusal_for(intake, "class\\bob\\kernel.cu").reason
    for unplaced in ("../../evil", "/etc/cron.d", "C:/Windows", "bob\\"):
        assert refusal_for(intake, unplaced).key == ""  # belongs to no student

    mallory = refusal_for(intake, "class/mallory/kernel.cu")
    assert mallory.key == "mallory" and "symbolic link" in mallory.reason
    trent = refusal_for(intake, "class/trent/kernel.cu")
    assert trent.key == "trent" and "zip bomb" in trent.reason and "20 MB" in trent.reason
    peggy = [r for r in intake.refused if "peggy" in r.entry]
    assert len(peggy) == 2 and all("appears 2 times" in r.reason for r in peggy)
    assert [r.key for r in peggy].count("peggy") == 1  # one verdict for the student
    victor = refusal_for(intake, "class/victor/notes.txt")  # refused, but victor is graded
    assert victor.key == "" and "symbolic link" in victor.reason

    assert {r.key for r in intake.refused if r.key} == {"mallory", "trent", "peggy"}
    written = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert written == ["alice", "victor"]  # nothing else reached the disk


def test_declared_size_is_not_trusted(tmp_path):
    # A member whose header says 1000 bytes but holds 300 kB: refused as damaged, never read past 1000.
    path = make_zip(tmp_path / "class.zip", [("alice/kernel.cu", kernel("alice")),
                                              ("bob/kernel.cu", b"/" * (300 * 1024))])
    raw = bytearray(path.read_bytes())
    local = raw.find(b"PK\x03\x04bob"[:4], raw.find(b"bob/kernel.cu") - 30)
    assert raw[local + 30: local + 30 + len("bob/kernel.cu")] == b"bob/kernel.cu"
    struct.pack_into("<I", raw, local + 22, 1000)  # uncompressed size in the local header
    central = raw.find(b"PK\x01\x02", raw.find(b"PK\x01\x02") + 4)  # bob's central directory record
    assert raw[central + 46: central + 46 + len("bob/kernel.cu")] == b"bob/kernel.cu"
    struct.pack_into("<I", raw, central + 24, 1000)
    path.write_bytes(bytes(raw))

    intake = discover([path], tmp_path / "work")

    assert sorted(by_key(intake)) == ["alice"]
    bob = refusal_for(intake, "bob/kernel.cu")
    assert bob.key == "bob" and "damaged" in bob.reason
    assert not (tmp_path / "work" / "bob").exists()


def test_oversized_member_is_refused_by_its_declared_size(tmp_path):
    archive = make_zip(tmp_path / "class.zip", [("alice/kernel.cu", kernel("alice")),
                                                 ("oscar/kernel.cu", b"/" * (300 * 1024))],
                       compression=zipfile.ZIP_STORED)
    intake = discover([archive], tmp_path / "work")
    assert sorted(by_key(intake)) == ["alice"]
    oscar = refusal_for(intake, "oscar/kernel.cu")
    assert oscar.key == "oscar" and oscar.reason == "kernel.cu is 300 kB: larger than 256 kB, so it is not graded"


def test_corrupt_archives_are_refused_whole_and_the_batch_goes_on(tmp_path):
    garbage = write(tmp_path / "garbage.zip", b"this is not a zip file at all" * 10)
    good = make_zip(tmp_path / "good.zip", [("alice/kernel.cu", kernel("alice")), ("bob/kernel.cu", kernel("bob"))])
    truncated = write(tmp_path / "truncated.zip", good.read_bytes()[:-40])  # the central directory cut off
    folder = write(tmp_path / "carol" / "kernel.cu", kernel("carol")).parent
    tarball = write(tmp_path / "class.tar.gz", b"\x1f\x8b")

    intake = discover([garbage, truncated, tmp_path / "missing.zip", tarball, good, folder], tmp_path / "work")

    assert sorted(by_key(intake)) == ["alice", "bob", "carol"]
    reasons = {r.source: r for r in intake.refused}
    assert set(reasons) == {str(garbage), str(truncated), str(tmp_path / "missing.zip"), str(tarball)}
    assert all(r.entry == "" and r.key == "" for r in intake.refused)
    assert "not a readable zip archive" in reasons[str(garbage)].reason
    assert "not a readable zip archive" in reasons[str(truncated)].reason
    assert "not found" in reasons[str(tmp_path / "missing.zip")].reason
    assert "not a submission" in reasons[str(tarball)].reason


def test_too_many_entries_refuses_that_archive_only(tmp_path):
    crowded = make_zip(tmp_path / "crowded.zip", [(f"s{i}/kernel.cu", kernel(f"s{i}")) for i in range(6)])
    small = make_zip(tmp_path / "small.zip", [("alice/kernel.cu", kernel("alice")), ("bob/kernel.cu", kernel("bob"))])
    intake = discover([crowded, small], tmp_path / "work", Limits(entries=5))
    assert sorted(by_key(intake)) == ["alice", "bob"]
    [refusal] = intake.refused
    assert refusal.source == str(crowded) and refusal.entry == ""
    assert "holds 6 entries: more than the 5" in refusal.reason


def test_total_extracted_size_is_capped_per_archive(tmp_path):
    members = [(f"s{i}/kernel.cu", kernel(f"s{i}") + b"/" * 1000) for i in range(5)]
    archive = make_zip(tmp_path / "class.zip", members)
    size = len(members[0][1])
    intake = discover([archive], tmp_path / "work", Limits(total_bytes=3 * size))
    assert sorted(by_key(intake)) == ["s0", "s1", "s2"]
    late = [r for r in intake.refused if r.key in ("s3", "s4")]
    assert len(late) == 2 and all("expands to more than" in r.reason for r in late)


def test_student_zip_is_opened_one_level_only(tmp_path):
    inner = zip_bytes([("kernel.cu", kernel("too deep"))])
    archive = make_zip(tmp_path / "class.zip", [
        ("alice/alice.zip", zip_bytes([("alice/kernel.cu", kernel("alice"))])),
        ("bob/bob.zip", zip_bytes([("bob.zip", inner)])),  # a zip in a zip in the class zip
        ("carol/carol.zip", b"PK\x03\x04 not really"),
        ("dave/dave.zip", zip_bytes([("../kernel.cu", kernel("dave"))])),
    ])
    intake = discover([archive], tmp_path / "work")

    entries = by_key(intake)
    assert sorted(entries) == ["alice"]
    assert_graded(entries["alice"], "alice")
    assert entries["alice"].entry == "alice/alice.zip > alice/kernel.cu"
    refused = {r.key: r for r in intake.refused if r.key}
    assert "zip inside a zip" in refused["bob"].reason
    assert "not a readable zip archive" in refused["carol"].reason
    assert refused["carol"].entry == "carol/carol.zip"
    dave = refusal_for(intake, "dave/dave.zip > ../kernel.cu")
    assert "climbs out" in dave.reason


def test_keys_are_safe_unique_and_stable(tmp_path):
    one = make_zip(tmp_path / "one.zip", [("alice/kernel.cu", kernel("alice-1")),
                                           ("-bob-/kernel.cu", kernel("bob"))])
    two = tmp_path / "two"
    write(two / "Alice" / "kernel.cu", kernel("alice-2"))
    write(two / "Zoë Müller" / "kernel.cu", kernel("zoe"))
    write(two / "CON" / "kernel.cu", kernel("con"))

    first = discover([one, two], tmp_path / "work1")
    second = discover([one, two], tmp_path / "work2")

    keys = [e.key for e in first.submissions]
    assert keys == [e.key for e in second.submissions]  # same input, same keys
    entries = by_key(first)
    assert sorted(entries) == ["Alice-2", "CON_", "Zoe_Muller", "alice", "bob"]
    assert_graded(entries["alice"], "alice-1")
    assert_graded(entries["Alice-2"], "alice-2")  # a case-insensitive clash gets a suffix
    assert_graded(entries["bob"], "bob")
    for key in keys:
        assert key == safe_name(key) and not key.startswith(".") and "/" not in key


def test_safe_name():
    assert safe_name("../../etc/passwd") == "etc_passwd"
    assert safe_name(".hidden") == "hidden"
    assert safe_name("a\\b:c*d") == "a_b_c_d"
    assert safe_name("Ünïcødé name") == "Unicde_name"
    assert safe_name("...") == "submission"
    assert safe_name("李雷") == "submission"
    assert safe_name("nul.txt") == "nul.txt_"
    assert len(safe_name("x" * 200)) == 64


@pytest.mark.parametrize("name", ["a/../../b.cu", "/abs/kernel.cu", "C:rel.cu", "d\\e.cu", "f\x01g/kernel.cu",
                                  "../kernel.cu", "./../x/kernel.cu"])
def test_unsafe_member_names_never_reach_the_disk(tmp_path, name):
    archive = make_zip(tmp_path / "one.zip", [("ok/kernel.cu", kernel("ok")), ("ok2/kernel.cu", kernel("ok2")),
                                               (name, kernel("bad"))])
    work = tmp_path / "work"
    intake = discover([archive], work)
    assert sorted(by_key(intake)) == ["ok", "ok2"]
    [refusal] = intake.refused
    assert (refusal.source, refusal.entry, refusal.key) == (str(archive), name, "")
    assert "not unpacked" in refusal.reason
    assert sorted(p.name for p in work.iterdir()) == ["ok", "ok2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.zip", "work"]


def test_folder_names_keep_the_students_name_and_id(tmp_path):
    cls = tmp_path / "class"
    write(cls / "Alice Smith (s1234567)" / "kernel.cu", kernel("alice"))
    write(cls / "学生" / "kernel.cu", kernel("xuesheng"))
    write(cls / "José Núñez" / "kernel.cu", kernel("jose"))
    entries = by_key(discover([cls], tmp_path / "work"))
    assert sorted(entries) == ["Alice_Smith_s1234567", "Jose_Nunez", "学生"]  # never "submission"
    alice = entries["Alice_Smith_s1234567"]
    assert (alice.student_name, alice.sis_user_id, alice.canvas_user_id) == ("Alice Smith", "s1234567", "")
    assert entries["学生"].student_name == "学生"
    assert_graded(entries["学生"], "xuesheng")
    assert entries["Jose_Nunez"].student_name == "José Núñez"


def test_a_canvas_zip_gives_canvas_user_ids_but_not_for_anonymous_grading(tmp_path):
    archive = make_zip(tmp_path / "canvas.zip", [("smithjohn_12345_678901_kernel.cu", kernel("john")),
                                                  ("anon_k3Xz_678902_kernel.cu", kernel("anon"))])
    entries = {e.student_id: e for e in discover([archive], tmp_path / "work").submissions}
    assert entries["12345"].canvas_user_id == "12345"
    assert entries["anon_k3Xz"].canvas_user_id == ""


@pytest.mark.parametrize("sibling", ["empty", "junk", "refused"])
def test_a_class_folder_with_one_valid_student_is_a_class(tmp_path, sibling):
    cls = tmp_path / "class"
    write(cls / "alice" / "kernel.cu", kernel("alice"))
    if sibling == "empty":
        (cls / "bob").mkdir()
    elif sibling == "junk":
        write(cls / "bob" / ".DS_Store", b"\0")
    else:
        (cls / "bob").mkdir()
        (cls / "bob" / "kernel.cu").symlink_to("/etc/passwd")
    intake = discover([cls], tmp_path / "work")
    entries = by_key(intake)
    assert sorted(entries) == ["alice"], intake.notes  # a class of one, not a student named "class"
    assert_graded(entries["alice"], "alice")
    assert any("a folder of student submissions" in n for n in intake.notes)


def test_a_class_folder_of_one_student_is_a_class(tmp_path):
    """Given alone, a folder holding one student folder is a class of one: the row is that student's."""
    write(tmp_path / "class" / "alice" / "kernel.cu", kernel("alice"))
    intake = discover([tmp_path / "class"], tmp_path / "work")
    entries = by_key(intake)
    assert sorted(entries) == ["alice"]
    assert_graded(entries["alice"], "alice")

    zipped = tmp_path / "lab3.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("lab3/alice/kernel.cu", kernel("alice"))
    assert sorted(by_key(discover([zipped], tmp_path / "work-zip"))) == ["alice"]
