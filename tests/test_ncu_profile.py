"""Issue 26 on a GPU: Nsight Compute's CSV read as the grader asks for it, and the advice it gives. The CSV
files under ncu_csv/ are written in the layout `ncu --csv --page raw --print-units base` prints (and one in
the details layout): header, units row, one row per kernel, ncu's ==PROF== lines around them."""
from pathlib import Path

from grader.diagnose.ncu_csv import (
    FFMA,
    GLOBAL_LD_SECTORS,
    METRICS,
    SHARED_LD_CONFLICTS,
    KernelProfile,
    number,
    parse,
)
from grader.diagnose.profile import ncu_command, profile_feedback
from grader.result import BANK_CONFLICT, THROUGHPUT, UNCOALESCED_LOAD

SAVED = Path(__file__).resolve().parent / "ncu_csv"


def saved(name: str) -> KernelProfile:
    [profile] = parse((SAVED / name).read_text())
    return profile


def test_the_raw_page_reads_every_metric_in_base_units():
    profile = saved("reference.csv")
    assert profile.kernel == "_Z7mysgemmiiiPKfS0_Pf"
    assert set(profile.metrics) == set(METRICS)
    assert profile.metrics[GLOBAL_LD_SECTORS] == 83_886_080  # thousands separators read
    assert profile.sectors_per_load == 5.0 and profile.sectors_per_store == 4.0
    assert profile.shared_load_ways == 1.0 and profile.achieved_occupancy == 93.41
    # 2 × 2048³ FLOP in 3.301 ms (5.2 TFLOP/s), against 2 × 16896 FFMA a cycle at 1.59 GHz (53.7 TFLOP/s)
    assert profile.fp32_pct == 9.7 and profile.figures()["duration_ms"] == 3.301


def test_the_details_page_reads_the_same_figures():
    assert saved("reference_details.csv").figures() == saved("reference.csv").figures()


def test_what_is_not_a_table_reads_as_nothing():
    assert parse("") == [] and parse("==PROF== ERROR: ERR_NVGPUCTRPERM\n") == []
    assert parse('"ID","Kernel Name"\n"x"\n') == []
    assert parse('"ID","Process ID"\n"0","1"\n') == []  # no kernel column


def test_a_hostile_table_cannot_make_a_figure_up():
    header = '"ID","Kernel Name","' + GLOBAL_LD_SECTORS + '","' + FFMA + '"\n'
    text = header + '"0","k","nan","1e400"\n"1","k","-","3"\n"2","short"\n' + '"3","k","' + "9" * 5000 + '","2"\n'
    profiles = parse(text)
    assert [p.metrics for p in profiles][:2] == [{}, {FFMA: 3.0}]
    assert number("n/a") is None and number("4,194,304") == 4194304.0


def test_ncu_figures_worse_than_the_references_are_told_with_both_values():
    found = profile_feedback(saved("uncoalesced_b.csv"), saved("reference.csv"))
    by_kind = {f.what: f for f in found}
    assert set(by_kind) == {THROUGHPUT, UNCOALESCED_LOAD}
    assert all(f.source == "ncu" for f in found)
    load = by_kind[UNCOALESCED_LOAD]
    assert (load.value, load.reference_value, load.unit) == (17.0, 5.0, "sectors per request")
    assert "17 sectors per request" in load.message and "reference's take 5" in load.message
    assert by_kind[THROUGHPUT].reference_value == 9.7


def test_bank_conflicts_are_told_in_ways():
    [*_, conflict] = profile_feedback(saved("bank_conflicts.csv"), saved("reference.csv"))
    assert conflict.what == BANK_CONFLICT and conflict.value == 16.0 and conflict.reference_value == 1.0
    assert "[32][33]" in conflict.advice
    assert saved("bank_conflicts.csv").metrics[SHARED_LD_CONFLICTS] > 0


def test_the_reference_against_itself_gets_no_advice():
    assert profile_feedback(saved("reference.csv"), saved("reference.csv")) == []


def test_ncu_is_asked_for_one_launch_of_the_kernel_by_its_symbol_into_a_file_of_its_own():
    command = ncu_command("/usr/local/cuda/bin/ncu", "_Z7mysgemmiiiPKfS0_Pf", Path("/w/ncu.csv"), ["launch", "x"])
    assert command[-2:] == ["launch", "x"]
    pairs = dict(zip(command, command[1:]))
    assert pairs["--page"] == "raw" and pairs["--print-units"] == "base" and pairs["--launch-count"] == "1"
    assert pairs["--kernel-name"] == "_Z7mysgemmiiiPKfS0_Pf" and pairs["--kernel-name-base"] == "mangled"
    assert pairs["--log-file"] == "/w/ncu.csv" and pairs["--metrics"].split(",") == list(METRICS)


def test_a_cluster_task_carries_profile_to_its_worker(tmp_path, config_file):
    from grader.classroom.cluster import remote_task
    from grader.config import load_config
    from grader.intake.intake import Entry
    from grader.pipeline import GPU, RunPlan

    (tmp_path / "kernel.cu").write_text("__global__ void mysgemm() {}\n")
    entry = Entry("s", "", "", tmp_path, "s", "kernel.cu")
    config = load_config(config_file)
    assert remote_task(entry, config, [], RunPlan(GPU, profile=True)).profile is True
    assert remote_task(entry, config, [], RunPlan(GPU)).profile is False


def test_a_table_in_ncus_automatic_units_reads_as_in_base_units():
    # ms, cycle/nsecond, Msector and Ginst where base units print ns, hertz, sector and inst
    auto, base = saved("reference_auto_units.csv"), saved("reference.csv")
    assert auto.figures() == base.figures()
    assert auto.metrics[GLOBAL_LD_SECTORS] == base.metrics[GLOBAL_LD_SECTORS] == 83_886_080


def test_the_source_page_reads_each_lines_counters():
    """`ncu --page source --csv --print-source cuda,sass` of bank_conflict_tile on an H200 (256³, tile 32): the
    transposed store of Bs (line 18) takes 32 wavefronts for each it needs, the read at line 22 mixes As's
    broadcast with Bs's column; the global loads and the store of C are as coalesced as their bytes allow."""
    from grader.diagnose.ncu_csv import parse_source_lines

    lines = parse_source_lines((SAVED / "bank_conflict_tile_source.csv").read_text())
    assert lines[18].shared_ways() == 32 and lines[17].shared_ways() == 1
    assert 5 < lines[22].shared_ways() < 6 and lines[22].excess_sectors() is None
    assert lines[17].excess_sectors() == 1 and lines[27].excess_sectors() == 1
    assert 11 in lines and lines[11].figures() == {"excess_sectors": None, "shared_ways": None}


def test_a_source_page_that_is_not_ncus_reads_as_no_lines():
    from grader.diagnose.ncu_csv import parse_source_lines

    text = (SAVED / "bank_conflict_tile_source.csv").read_text()
    assert parse_source_lines("") == {} and parse_source_lines(text.replace('"L1 Wavefronts Shared"', '"x"')) == {}
    forged = text + '"99","",' + ",".join(['"1e12"'] * 3) + "\n"  # a row of the wrong width is not a line
    assert 99 not in parse_source_lines(forged)


def test_only_the_students_files_table_is_read():
    """A module's page has a table per source file: the grader's helpers (late warps) have lines 18 and 27 too."""
    from grader.diagnose.ncu_csv import parse_source_lines

    text = (SAVED / "bank_conflict_tile_source.csv").read_text()
    helpers = text.replace('"File Path","kernel.cu"', '"File Path","<grader: helpers>"').replace('"524288","16384"',
                                                                                                 '"16384","16384"')
    assert parse_source_lines(helpers + text)[18].shared_ways() == 32
    assert parse_source_lines(text + helpers)[18].shared_ways() == 32
    assert parse_source_lines(helpers) == {} and parse_source_lines(helpers, "<grader: helpers>")[18].shared_ways() == 1


def test_the_emulators_findings_carry_what_ncu_measured_at_their_lines():
    from grader.diagnose.ncu_csv import parse_source_lines
    from grader.judge.access import measured_on_the_gpu
    from grader.result import Feedback

    lines = parse_source_lines((SAVED / "bank_conflict_tile_source.csv").read_text())
    conflict = Feedback(BANK_CONFLICT, "line 18: 32-way bank conflict on Bs", "pad it", line=18, source="emulator")
    elsewhere = Feedback(BANK_CONFLICT, "line 40: a line ncu never saw", "pad it", line=40, source="emulator")
    measured = Feedback(BANK_CONFLICT, "measured on the timing shape", "", source="ncu")
    told = measured_on_the_gpu([conflict, elsewhere, measured], lines)
    assert told[0].message == ("line 18: 32-way bank conflict on Bs; Nsight Compute measured this line's "
                               "shared-memory accesses on the GPU at 32 wavefronts for each one they need")
    assert told[1:] == [elsewhere, measured]
    load = Feedback(UNCOALESCED_LOAD, "line 17: each warp's load of A ...", "", line=17, source="emulator")
    assert measured_on_the_gpu([load], lines)[0].message.endswith("on the GPU at 1× the sectors their bytes need")
