"""Token pasting judged by what the preprocessor makes, not by the idiom: indexing macros built with `##` grade
in full on every path (one grade on the CPU, a class in a batch), and a paste of macro arguments is expanded in
the sandbox, where each refused name it builds is refused (tests/exploits/paste_*: test_exploits.py)."""
import csv
import io
import subprocess
import sys

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

from grader.execute.confine.sandbox import detect
from grader.execute.macros import pastes_judged
from grader.result import PASSED, SKIPPED
from grader.source.include_policy import ARCH_DEPENDENT, PASTE, check_source

pytestmark = needs_cxx
PASTING = ["index_macro_pasting", "paste_helper_macro"]


@pytest.mark.parametrize("name", PASTING)
def test_an_indexing_macro_built_by_pasting_gets_full_marks_on_the_cpu(graders, name):
    result = graders("cpu")(SUBMISSIONS / name)
    checked = [c for c in result.checks if c.status != SKIPPED]
    assert [(c.name, c.message) for c in checked if c.status != PASSED] == []
    assert {c.kind for c in checked} >= {"compile", "static", "case"}
    assert sum(c.score for c in checked) == sum(c.max_score for c in checked) > 0


def test_a_class_with_pasting_macros_grades_in_full_in_a_batch(tmp_path):
    """The batch's workers meet the same policy, expansion and sandbox as one grade."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "small.yaml").write_text("cases:\n  - {name: ragged, m: 37, n: 21, k: 45, seed: 2, points: 30}\n")
    text = (ROOT / "config.yaml").read_text().replace("testcases: testcases", f"testcases: {cases}")
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}"))
    for name in PASTING:
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "kernel.cu").write_bytes((SUBMISSIONS / name / "kernel.cu").read_bytes())
    command = [sys.executable, "-m", "grader", "batch", str(tmp_path / "class"), "-o", str(tmp_path / "out"),
               "--config", str(config), "--backend", "cpu"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=600)
    rows = csv.DictReader(io.StringIO((tmp_path / "out" / "grades.csv").read_text()))
    students = {row["submission"]: row for row in rows if row["submission"] != "points possible"}
    assert sorted(students) == PASTING
    for row in students.values():  # every check the CPU can make, in full (timing needs a GPU)
        assert row["status"] == "graded" and float(row["total"]) == float(row["max"]) == 40, row


def test_a_harmless_argument_paste_is_cleared_by_its_expansion_and_a_harmful_one_is_not():
    """Judged in the sandbox by the compilers' own preprocessors (well under the compile's time: its figure is in
    the report of this change)."""
    helper = "#define CAT(a, b) a ## b\n"
    files = {"kernel.cu": helper + "int CAT(num, Phases);\n", "tile.cuh": "x"}
    harmful = {"kernel.cu": helper + '#include "tile.cuh"\n', "tile.cuh": 'void f() { CAT(as, m)("nop"); }\n'}
    for judged_files, refused in ((files, []), (harmful, [("kernel.cu", 1, "builds asm")])):
        found = {name: check_source(text, handed_in=["tile.cuh"]) for name, text in judged_files.items()}
        assert [v.kind for vs in found.values() for v in vs] == [PASTE]
        judged, seconds = pastes_judged(judged_files, found, [], "sm_90", detect(), 120)
        told = [(name, v.line, "builds asm" if "token pasting (##) builds asm" in v.reason else v.reason)
                for name, vs in judged.items() for v in vs]
        assert told == refused and 0 < seconds < 120


def test_a_paste_in_a_file_that_tests_the_gpu_architecture_is_not_expanded_once():
    source = "#define CAT(a, b) a ## b\n#if __CUDA_ARCH__ >= 900\nint CAT(x, y);\n#endif\n"
    judged, seconds = pastes_judged({"kernel.cu": source}, {"kernel.cu": check_source(source)}, [], "sm_90",
                                    detect(), 120)
    assert [v.reason for v in judged["kernel.cu"]] == [ARCH_DEPENDENT] and seconds == 0
