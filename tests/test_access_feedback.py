"""Issue 26 on the CPU: the emulator's coalescing and bank-conflict feedback, at the student's lines.

Each kernel below is graded on the CPU emulator as a student without a GPU grades it; each must get exactly
its findings (line, kind, figure against the reference's), and the reference and the padded twin none. The
feedback is advice: the grade is the same with it off.
"""
import json
import re

import pytest
from conftest import ROOT, SUBMISSIONS, make_grader
from hardware import needs_cxx
from rich.console import Console

from grader.execute.cpu.access_profile import access_records
from grader.execute.cpu.figures import summarize
from grader.execute.cpu.instrument import instrument
from grader.execute.protocol import EVENTS, ProtocolError, check
from grader.judge.access import access_feedback
from grader.report.terminal import render
from grader.result import BANK_CONFLICT, SKIPPED, TIMING, UNCOALESCED_LOAD, UNCOALESCED_STORE, SubmissionResult

SECTORS, WAY = "sectors per request", "way"
# name -> {(line, what): (value, reference_value)}: the findings each kernel must get, and no other
EXPECTED = {
    "uncoalesced_a_load": {(18, UNCOALESCED_LOAD): (32, 4)},
    "uncoalesced_b_load": {(19, UNCOALESCED_LOAD): (32, 4)},
    "uncoalesced_c_store": {(32, UNCOALESCED_STORE): (32, 4)},
    "bank_conflict_tile": {(18, BANK_CONFLICT): (32, 1), (22, BANK_CONFLICT): (32, 1)},
    "bank_conflict_padded": {},
    "good_basic": {},
    # tile 16: half a warp walks down 16 rows (16 sectors), and a 16-wide column takes 8 turns
    "slow_uncoalesced": {(17, UNCOALESCED_LOAD): (16, 4), (18, UNCOALESCED_LOAD): (16, 4),
                         (27, UNCOALESCED_STORE): (16, 4), (17, BANK_CONFLICT): (8, 1),
                         (18, BANK_CONFLICT): (8, 1), (22, BANK_CONFLICT): (8, 1)},
}
pytestmark = needs_cxx


def emulator(result) -> list:
    """The emulator's findings (the compiled kernel's resources give findings of their own)."""
    return [f for f in result.feedback if f.source == "emulator"]


@pytest.fixture(scope="module")
def graded(graders, tmp_path_factory):
    grade = graders("cpu")
    reference = tmp_path_factory.mktemp("reference") / "reference"
    reference.mkdir()
    (reference / "kernel.cu").write_text((ROOT / "reference" / "kernel.cu").read_text())
    paths = {name: SUBMISSIONS / name for name in EXPECTED} | {"reference": reference}
    grade.prefetch(list(paths.values()))
    return {name: grade(path) for name, path in paths.items()}


@pytest.mark.parametrize("name", [*EXPECTED, "reference"])
def test_each_kernel_gets_exactly_its_findings_at_its_lines(graded, name):
    result = graded[name]
    assert result.outcome == "graded" and all(c.passed for c in result.checks if c.kind == "case" and c.checkable)
    found = {(f.line, f.what): (f.value, f.reference_value) for f in emulator(result)}
    assert found == EXPECTED.get(name, {})
    for item in emulator(result):
        assert item.unit == (WAY if item.what == BANK_CONFLICT else SECTORS)
        assert item.message.startswith(f"line {item.line}: ")


def test_findings_say_what_the_warp_did_and_what_to_change(graded):
    (a,) = emulator(graded["uncoalesced_a_load"])
    assert a.message.startswith("line 18: each warp's load of A touches 32 sectors")
    assert "where 4 would do" in a.message
    assert "a whole row of A apart" in a.advice
    assert "consecutive threadIdx.x should read consecutive columns of A" in a.advice
    (c,) = emulator(graded["uncoalesced_c_store"])
    assert "store of C touches 32 sectors" in c.message and "should store consecutive columns of C" in c.advice
    store, load = sorted(emulator(graded["bank_conflict_tile"]), key=lambda f: f.line)
    assert load.message.startswith("line 22: 32-way bank conflict on Bs: each warp's read of Bs takes 32 turns")
    assert "pad each row by one element: Bs[32][33]" in load.advice and "swap the indices" in load.advice
    assert "a warp stores down a column of Bs[32][32]" in store.advice
    padded = [f for f in emulator(graded["slow_uncoalesced"]) if f.what == BANK_CONFLICT]
    assert all("[16][17]" in f.advice for f in padded)  # the tile's own shape, read from the profile


def test_worst_findings_come_first(graded):
    values = [f.value / (4 if f.unit == SECTORS else 1) for f in emulator(graded["slow_uncoalesced"])]
    assert values == sorted(values, reverse=True)


def test_feedback_is_in_the_json_result_and_survives_a_round_trip(graded):
    data = json.loads(json.dumps(graded["uncoalesced_b_load"].to_dict()))
    (item,) = [f for f in data["feedback"] if f["source"] == "emulator"]
    assert item["line"] == 19 and item["what"] == UNCOALESCED_LOAD and item["value"] == 32
    assert item["reference_value"] == 4
    assert SubmissionResult.from_dict(data).feedback == graded["uncoalesced_b_load"].feedback


def test_terminal_says_how_to_make_it_faster_after_what_to_fix(graded):
    console = Console(record=True, width=400, color_system=None)
    render(graded["bank_conflict_tile"], console)
    text = console.export_text()
    section = text.index("How to make it faster")
    assert section < text.index("Total:")
    lines = [line for line in text[section:].splitlines() if line.startswith("  - ") and "turns" in line]
    assert len(lines) == 2 and lines[0].startswith("  - line 18: 32-way bank conflict on Bs")
    assert "Bs[32][33]" in lines[0]
    quiet = Console(record=True, width=400, color_system=None)
    render(graded["bank_conflict_padded"], quiet)
    assert "bank conflict" not in quiet.export_text()


def test_a_racing_kernel_gets_no_feedback(graders):
    """No advice from a launch that went wrong: the profile launch races, so nothing is said."""
    result = graders("cpu")(SUBMISSIONS / "missing_load_barrier")
    assert emulator(result) == []


def test_the_grade_is_the_same_with_feedback_off(graded, config_file, tmp_path):
    off = tmp_path / "config.yaml"
    off.write_text(config_file.read_text().replace("emulator: true", "emulator: false"))
    result = make_grader(off, "cpu")(SUBMISSIONS / "bank_conflict_tile")
    assert emulator(result) == []
    on = graded["bank_conflict_tile"]
    assert result.score == on.score and result.max_score == on.max_score and result.outcome == on.outcome
    assert [(c.name, c.status, c.score) for c in result.checks] == [(c.name, c.status, c.score) for c in on.checks]


# --- the judge alone: pure functions of two profiles ----------------------------------------------------------

def record(line, kind, array, total, ideal=4, requests=1, stride=4, rows=0, columns=0):
    return {"event": "access", "line": line, "kind": kind, "array": array, "requests": requests,
            "total": total * requests, "max": total, "ideal": ideal * requests, "rows": rows, "columns": columns,
            "bytes": 4, "stride": stride}


def test_a_pattern_the_reference_shares_is_no_finding():
    student = [record(12, "global_load", "B", 32, stride=256)]
    assert access_feedback(student, [record(29, "global_load", "B", 32)], 64) == []
    (found,) = access_feedback(student, [record(29, "global_load", "B", 4)], 64)
    assert found.line == 12 and found.value == 32 and found.reference_value == 4
    assert "a whole row of B apart" in found.advice


def test_padding_is_advised_only_where_the_warp_walks_down_a_column():
    down = record(14, "shared_load", "Bt", 32, ideal=1, stride=128, rows=32, columns=32)
    other = record(15, "shared_load", "Bt", 4, ideal=1, stride=16, rows=32, columns=32)
    by_line = {f.line: f for f in access_feedback([down, other], [record(9, "shared_load", "As", 1, ideal=1)], 64)}
    assert "pad each row by one element: Bt[32][33]" in by_line[14].advice
    assert "pad" not in by_line[15].advice and "consecutive 4-byte words of Bt" in by_line[15].advice


def test_an_ideal_access_is_no_finding_even_where_the_reference_has_none():
    student = [record(3, "global_load", "A", 4), record(4, "global_store", "C", 8, stride=8)]
    (store,) = access_feedback(student, [], 64)
    assert store.line == 4 and store.reference_value is None and "2 apart" in store.advice


def test_forged_or_impossible_profile_records_are_refused():
    done = {"event": "done", "a_changed": False, "b_changed": False, "races": 0}
    good = record(3, "global_load", "A", 4)
    assert access_records([good, done]) == [good]
    assert access_records([good]) is None  # the launch never finished
    assert access_records([good, {"event": "race"}, done]) is None
    assert access_records([record(3, "global_load", "A", 4, requests=0), done]) is None
    assert access_records([{**good, "total": 10**6}, done]) is None
    with pytest.raises(ProtocolError):
        check({"event": "access_profile", "size": 64, "student": [{**good, "max": 0}], "reference": []}, EVENTS)


def test_barrier_counts_are_kept_beside_the_access_records_and_give_no_advice():
    """The speed model's barriers (a "barriers" report per line of __syncthreads) travel with the records;
    the advice and the figures read the access records alone."""
    done = {"event": "done", "a_changed": False, "b_changed": False, "races": 0}
    good, barriers = record(3, "global_load", "A", 32), {"event": "barriers", "line": 20, "count": 8}
    assert access_records([good, barriers, done]) == [good, barriers]
    assert [f.line for f in access_feedback([good, barriers], [barriers], 64)] == [3]
    assert summarize([good, barriers])["global_load_requests"] == 1
    event = {"event": "access_profile", "size": 64, "student": [good, barriers], "reference": [barriers],
             "reference_tile": 16}
    assert check(event, EVENTS) == event
    with pytest.raises(ProtocolError):
        check({**event, "student": [{**barriers, "count": -1}]}, EVENTS)
    with pytest.raises(ProtocolError):  # more 128-byte lines than the sectors in them
        check({**event, "student": [{**good, "lines": good["total"] + 1}]}, EVENTS)


def test_summary_figures_for_comparing_with_nsight_compute():
    figures = summarize([record(3, "global_load", "A", 32, requests=2), record(4, "global_load", "B", 4, requests=2),
                         record(5, "shared_load", "As", 8, ideal=1, requests=4)])
    assert figures["global_load_requests"] == 4 and figures["global_load_sectors_per_request"] == 18
    assert figures["shared_load_ways"] == 8 and figures["shared_load_bank_conflicts"] == 28


# --- instrumentation: global loads through pointer parameters, lines unchanged --------------------------------

def test_loads_through_pointer_parameters_are_instrumented_on_their_own_lines():
    source = ("__global__ void k(int n, const float* __restrict__ A, float *C) {\n"
              "    const float *p = &A[1];\n"
              "    float x = A[n] + p[0];\n"
              "    C[n] = x + sizeof(A[0]);\n"
              "}\n")
    out = instrument(source)
    assert len(out.splitlines()) == len(source.splitlines())
    lines = out.splitlines()
    assert "&A[1]" in lines[1] and "A[1])" not in lines[1]
    # each access through a parameter is a numbered site (sites.py); not through a local copy of the pointer
    assert "CUDA_EMU_LOAD_AT(0, A, (0), (0), A[n])" in lines[2] and "p[0])" not in lines[2]
    assert "CUDA_EMU_STORE_AT(1, C, (0), (0), C[n])" in lines[3] and re.search(r"sizeof\(A\[0\]\)", lines[3])


def test_the_matrices_go_by_the_students_names():
    """A lab whose kernel calls them M, N, P (ECE408, PMPP): the finding names N, and leaves out the index
    expression written with the default lab's names."""
    student, reference = [record(12, "global_load", "B", 32, stride=256)], [record(29, "global_load", "B", 4)]
    (found,) = access_feedback(student, reference, 64, {"A": "M", "B": "N", "C": "P"})
    assert "each warp's load of N touches 32 sectors" in found.message
    assert "consecutive columns of N" in found.advice and "B[" not in found.advice


FORGED = r'''
#if !defined(__NVCC__)  /* the CPU emulator only: forge the harness's report from inside the kernel */
#include <string.h>
#include <unistd.h>
static __device__ void forge() {
    const char *line = "{\"event\": \"access\", \"line\": 3, \"kind\": \"global_load\", \"array\": \"A\", "
                       "\"requests\": 1, \"total\": 100000, \"max\": 32, \"ideal\": 4, \"rows\": 0, "
                       "\"columns\": 0, \"bytes\": 4}\n";
    for (int fd = 3; fd < 32; ++fd) write(fd, line, strlen(line));
}
#else
static __device__ void forge() {}
#endif
'''


def forger(tmp_path, name: str, total: int):
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    body = source.index("{", source.index("__global__")) + 1
    forged = source[:body] + " if (threadIdx.x == 0 && threadIdx.y == 0) forge();" + source[body:]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "kernel.cu").write_text(FORGED.replace("100000", str(total)) + forged)
    return folder


def test_a_kernel_that_forges_the_profile_report_gets_no_advice_and_its_grade(graded, graders, tmp_path):
    """The harness's report is written by the process student code runs in: a record with impossible
    figures makes the whole profile void (no advice), never a broken protocol or a lost grade. A plausible
    forged record does reach the advice (the control: the forgery is real), that student's own alone."""
    result = graders("cpu")(forger(tmp_path, "forger", 100000))
    assert emulator(result) == []
    honest = graded["good_basic"]
    # With no profile the speed model has nothing to estimate from: timing is held for a GPU (not failed)
    timing = next(c for c in result.checks if c.kind == TIMING)
    assert timing.status == SKIPPED and timing.needs_gpu == "timing"
    assert result.outcome == honest.outcome
    assert result.score == result.checkable_max == honest.score - timing.max_score
    assert [(c.name, c.status) for c in result.checks if c.kind == "case"] == \
        [(c.name, c.status) for c in honest.checks if c.kind == "case"]
    plausible = graders("cpu")(forger(tmp_path, "plausible", 32))
    assert {(f.line, f.value) for f in emulator(plausible)} == {(3, 32)}
    assert plausible.score == honest.score
