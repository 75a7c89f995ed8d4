"""Issue 48, "Students lost or told differently by path", as a new instructor meets it: through the `grade`
command in a subprocess, on every path. One intake rule: a student is a row from the moment a folder, a
Canvas entry or a roster line names them, whatever they handed in; a misnamed or missing kernel.cu is
decided and told the same way by `grade DIR`, `grade batch`, `grade gradescope`, `grade prairielearn` and the
service. Everything runs with --no-run (static check and compile only): intake is what is under test, and
the machine is shared.
"""
import csv
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from test_handed_in_headers import zipped

from grader.intake.student_archive import read_student_archive

GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_bytes()
LOSES_STATIC_POINTS = (SUBMISSIONS / "missing_use_barrier" / "kernel.cu").read_bytes()
EXIT_USAGE, EXIT_NOT_GRADED = 2, 4  # docs/instructors.md's exit codes


def grade(*args: str) -> subprocess.CompletedProcess:
    """`grade ARGS --no-run` as an instructor types it."""
    return subprocess.run([sys.executable, "-m", "grader", *map(str, args), "--no-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def said(run: subprocess.CompletedProcess) -> str:
    """What the terminal showed, lines unwrapped (rich wraps at the terminal's width)."""
    return " ".join((run.stdout + run.stderr).split())


def write(path, content: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def grades_rows(outdir) -> dict[str, dict]:
    rows = csv.DictReader(io.StringIO((outdir / "grades.csv").read_text(encoding="utf-8")))
    return {row["submission"]: row for row in rows if row["submission"] != "points possible"}


def canvas_rows(outdir) -> list[dict]:
    rows = csv.DictReader(io.StringIO((outdir / "canvas.csv").read_text(encoding="utf-8")))
    return [row for row in rows if row["Student"] != "Points Possible"]


def stored(outdir, key) -> dict:
    return json.loads((outdir / "students" / f"{key}.json").read_text(encoding="utf-8"))


# --- one batch, as the instructor ran it: two class folders, a Canvas zip and a roster -------------

@pytest.fixture(scope="module")
def a_class(tmp_path_factory):
    """(outdir, the batch's run, where the class's files are). One run for every batch bullet: a grade is seconds."""
    root = tmp_path_factory.mktemp("newcomer")
    first, second = root / "section1", root / "section2"
    write(first / "alice" / "kernel.cu", GOOD)
    (first / "empty").mkdir(parents=True)  # handed in nothing: the folder alone names the student
    write(first / "bin" / "kernel.cu", b"\x7fELF\x00\x01not source")
    write(first / "dave" / "sgemm.cu", GOOD)  # the only .cu file, not named kernel.cu
    write(first / "rita" / "readme.txt", b"I will hand it in tomorrow")
    # The same student in both sections: the later PATH's submission is the one graded.
    write(first / "Sam Lee (s1234567)" / "kernel.cu", LOSES_STATIC_POINTS)
    write(second / "Sam Lee (s1234567)" / "kernel.cu", GOOD)
    write(second / "carol" / "kernel.cu", LOSES_STATIC_POINTS)
    canvas = root / "canvas.zip"
    with zipfile.ZipFile(canvas, "w") as archive:
        archive.writestr("smithjane_1001_5001_kernel.cu", GOOD)
        archive.writestr("../evil_1002_5002_kernel.cu", GOOD)
        archive.writestr("/abs_1003_5003_kernel.cu", GOOD)
    roster = root / "gradebook.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Lab 3 (77)\n"
                      "    Points Possible,,,,,100\n"
                      '"Smith, Jane",1001,s1001,jsmith,A\n'
                      '"Zhou, Zed",1009,s1009,zzhou,A\n', encoding="utf-8")
    out = root / "results"
    run = grade("batch", first, second, canvas, "--roster", roster, "-o", out, "--jobs", "2")
    assert run.returncode == 0, said(run)
    return out, run, root


def test_an_empty_student_folder_is_a_row_and_a_line_in_intake_txt(a_class):
    out, _, root = a_class
    row = grades_rows(out)["empty"]
    assert row["status"] == "submission error" and "nothing handed in" in row["intake notes"]
    intake = (out / "intake.txt").read_text()
    assert f"refused: {root / 'section1'}: empty/: no kernel.cu: nothing handed in" in intake
    assert "section1: read as a folder of student submissions; 6 students" in intake  # 6 folders, 6 students


def test_canvas_entries_with_unsafe_names_are_refused_but_their_students_are_rows(a_class):
    out, _, root = a_class
    by_id = {row["ID"]: row for row in canvas_rows(out)}
    assert by_id["1002"]["SGEMM lab"] == "0"
    assert "1003" in by_id
    rows = {row["student_id"]: row for row in grades_rows(out).values()}
    assert rows["1002"]["status"] == "submission error" and "climbs out" in rows["1002"]["intake notes"]
    assert rows["1003"]["status"] == "submission error" and "absolute path" in rows["1003"]["intake notes"]
    # Refused safely: nothing of theirs was written anywhere, inside the results or outside them.
    written = [*root.rglob("*"), *root.parent.glob("*"), *root.parent.parent.glob("*"), *Path("/").glob("abs_*")]
    assert not [p for p in written if p.name in ("evil_1002_5002_kernel.cu", "abs_1003_5003_kernel.cu")]
    assert not [p for p in (out / "submissions").iterdir() if p.name.startswith(("evil", "abs"))]


def test_a_refused_students_reason_is_in_every_place_the_docs_name(a_class):
    """docs/instructors.md: grades.csv's intake notes, the result's intake_notes and intake.txt."""
    out, _, _ = a_class
    reason = "kernel.cu is a binary file, not CUDA source"
    assert reason in grades_rows(out)["bin"]["intake notes"]
    assert any(reason in note for note in stored(out, "bin")["intake_notes"])
    assert f"refused: {out.parent / 'section1'}: bin/kernel.cu: {reason}" in (out / "intake.txt").read_text()


def test_roster_students_who_handed_in_nothing_are_rows_in_canvas_and_grades_csv(a_class):
    out, run, _ = a_class
    zed = next(row for row in canvas_rows(out) if row["ID"] == "1009")
    assert (zed["Student"], zed["SIS User ID"], zed["Section"]) == ("Zhou, Zed", "s1009", "A")
    row = next(row for row in grades_rows(out).values() if row["student_name"] == "Zhou, Zed")
    assert row["status"] == "submission error" and "no submission" in row["intake notes"]
    jane = next(row for row in canvas_rows(out) if row["ID"] == "1001")
    assert jane["Student"] == "Smith, Jane"  # matched to her submission: one row, not a second "no submission"
    assert sum(row["ID"] == "1001" for row in canvas_rows(out)) == 1
    assert "Zhou, Zed" in said(run)  # the end of the run lists the 0 and why


def test_the_same_student_in_two_class_folders_is_one_row_graded_from_the_later_path(a_class):
    out, _, root = a_class
    canvas = canvas_rows(out)
    assert sum(row["SIS User ID"] == "s1234567" for row in canvas) == 1
    rows = grades_rows(out)
    sam = [row for row in rows.values() if row["student_id"] == "s1234567"]
    assert len(sam) == 1 and sam[0]["submission"] == "Sam_Lee_s1234567"  # no "-2" that reads as a second student
    # section2 (given later) holds the kernel that keeps its static points, section1 the one that loses some.
    assert sam[0]["total"] == rows["alice"]["total"] != rows["carol"]["total"]
    assert f"also handed in in {root / 'section1'}" in sam[0]["intake notes"]
    assert "the PATH given later" in sam[0]["intake notes"]


def test_a_lone_sgemm_cu_and_a_readme_alone_in_a_batch(a_class):
    out, _, _ = a_class
    rows = grades_rows(out)
    assert rows["dave"]["status"] == "graded"
    assert "no kernel.cu was handed in; graded sgemm.cu, the only .cu file" in rows["dave"]["intake notes"]
    assert rows["rita"]["status"] == "submission error"
    assert "no .cu file; found: readme.txt" in rows["rita"]["intake notes"]


# --- one student, every path: the same decision, the same words ---------------------------------------------

@pytest.fixture
def lone_sgemm(tmp_path):
    write(tmp_path / "student" / "sgemm.cu", GOOD)
    return tmp_path / "student"


@pytest.fixture
def readme_only(tmp_path):
    write(tmp_path / "student" / "readme.txt", b"see my email")
    return tmp_path / "student"


GRADED_NOTE = "no kernel.cu was handed in; graded sgemm.cu, the only .cu file"
NOTHING_NOTE = "no .cu file; found: readme.txt"


def test_grade_dir_grades_a_lone_sgemm_cu_with_a_note(lone_sgemm, tmp_path):
    run = grade(lone_sgemm, "-o", tmp_path / "out")
    assert run.returncode == 0, said(run)
    assert f"Note: {GRADED_NOTE}" in said(run)
    result = json.loads((tmp_path / "out" / "student.json").read_text())
    assert result["status"] == "graded" and result["submission"] == "student"
    assert GRADED_NOTE in result["intake_notes"]


def test_grade_dir_with_only_a_readme_lists_it_and_exits_4(readme_only, tmp_path):
    run = grade(readme_only, "-o", tmp_path / "out")
    assert run.returncode == EXIT_NOT_GRADED
    assert NOTHING_NOTE in said(run) and "Hand in your kernel as kernel.cu" in said(run)


@pytest.mark.parametrize("lms", ["gradescope", "prairielearn"])
def test_an_lms_grades_a_lone_sgemm_cu_with_a_note(lms, lone_sgemm, tmp_path):
    results = tmp_path / "results" / "results.json"
    run = grade(lms, lone_sgemm, results)
    assert run.returncode == 0, said(run)
    data = json.loads(results.read_text())
    assert f"Note: {GRADED_NOTE}" in data["output"]
    assert "not found" not in json.dumps(data)


@pytest.mark.parametrize("lms, field", [("gradescope", "output"), ("prairielearn", "format_errors")])
def test_an_lms_lists_what_a_submission_without_cu_holds(lms, field, readme_only, tmp_path):
    results = tmp_path / "results" / "results.json"
    run = grade(lms, readme_only, results)
    assert run.returncode == 0, said(run)  # an LMS entry always writes its file and exits 0
    data = json.loads(results.read_text())
    assert NOTHING_NOTE in json.dumps(data[field]) and "not found" not in json.dumps(data)


def test_the_service_reads_an_archive_by_the_same_rule(tmp_path):
    """`grade serve`'s intake of one student's archive (serve/runner.py calls it): the same choice and words."""
    taken = read_student_archive(zipped({"sgemm.cu": GOOD}), tmp_path / "a")
    assert taken.folder is not None and (taken.folder / "kernel.cu").read_bytes() == GOOD
    assert taken.notes == [GRADED_NOTE]
    refused = read_student_archive(zipped({"readme.txt": b"hi"}), tmp_path / "b")
    assert refused.folder is None and NOTHING_NOTE in refused.refusal


# --- a class given to `grade`: say so, and the command that grades it -----------------------------------------

def test_grade_on_a_folder_of_student_folders_points_to_grade_batch(tmp_path):
    write(tmp_path / "class" / "alice" / "kernel.cu", GOOD)
    write(tmp_path / "class" / "bob" / "kernel.cu", GOOD)
    run = grade(tmp_path / "class", "-o", tmp_path / "out")
    assert run.returncode == EXIT_USAGE
    assert "looks like a class (2 student folders)" in said(run)
    assert f"grade batch {tmp_path / 'class'} -o results/" in said(run)
    assert "no kernel.cu" not in said(run) and not (tmp_path / "out").exists()


def test_grade_on_a_canvas_zip_points_to_grade_batch(tmp_path):
    canvas = tmp_path / "submissions.zip"
    with zipfile.ZipFile(canvas, "w") as archive:
        archive.writestr("smithjane_1001_5001_kernel.cu", GOOD)
    run = grade(canvas, "-o", tmp_path / "out")
    assert run.returncode == EXIT_USAGE
    assert "looks like a class (a Canvas submissions download)" in said(run)
    assert f"grade batch {canvas} -o results/" in said(run) and "binary" not in said(run)
