"""A read of a shared entry no thread of its block stored fails a case only where its value reaches an element of C
the kernel stores (issue 47). The emulator poisons shared memory with a NaN that carries a mark, and the mark
travels with the value through arithmetic (a product with 0, fmaf, a helper's return): an element of C holding one
names the read it came from. A read whose value is discarded is a hint, worth no points.

The kernels are the ECE408 way of loading tiles without zero-fill (`if (col < n && q*T+ty < k) sB[ty][tx] = ...`,
no else), with the inner product guarded by the loop index, without that guard, and with B zero-filled but the
product unguarded (an unwritten entry of A times 0). The CPU tests need only g++; the gpu twins run on a GPU.
"""
from dataclasses import replace

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu
from rich.console import Console

from grader.judge.engines import merged_case
from grader.judge.findings import UNWRITTEN_READ
from grader.report import render
from grader.report.student_view import HINTS_TITLE, student_summary
from grader.result import CASE, FAILED, GRADED, HIDDEN, PASSED, CheckResult, SubmissionResult

GUARDED, UNGUARDED = "no_zero_fill_guarded_product", "no_zero_fill_unguarded_product"
TIMES_ZERO = "unwritten_times_zero"
# Emulated cases with k < 16, by k: the one phase's tile holds entries past k that no thread stored
K_BELOW_TILE = {"one_by_one": 1, "k_one": 1, "sub_tile": 3}
# Emulated cases with k > 16 not a multiple of 16: the last phase's entries past k hold the previous tile's values
K_RAGGED = {"ragged_k", "ragged_all", "rect_tall", "rect_wide", "rect_hidden", "primes_small", "primes_mid"}
# The large cases (by sampled blocks on the CPU) whose k is not a multiple of 16: wrong as the ragged ones
LARGE_RAGGED = {"large_ragged", "large_hidden"}
HINT = "line 21 reads entries of sub{} that no thread of the block stored"


def emulated_cases(result) -> dict[str, CheckResult]:
    return {c.name: c for c in result.checks if c.kind == CASE and not c.needs_gpu and "GPU only" not in c.message}


@needs_cxx
def test_no_zero_fill_with_a_product_guarded_by_the_loop_index_gets_full_marks_and_a_hint(graders):
    """Threads past C's edge read tile entries nobody stored and never store: every case passes, and the read is
    said once per array as a hint, not as a cause to fix."""
    result = graders("cpu")(SUBMISSIONS / GUARDED)
    assert result.score == result.checkable_max, [(c.name, c.message) for c in result.checks if not c.passed]
    cases = emulated_cases(result)
    assert len(cases) == 21 and all(c.status == PASSED and not c.unsafe and not c.fixes for c in cases.values())
    assert any(hint.startswith(HINT.format("A")) for hint in cases["ragged_m"].hints)  # rows past m: subA
    assert any(hint.startswith(HINT.format("B")) for hint in cases["ragged_n"].hints)  # columns past n: subB
    assert not cases["square_64"].hints  # no entry is read unstored where the tiles fit
    summary = student_summary(result)
    assert HINTS_TITLE in summary and "What to fix" not in summary
    assert "no point depends on them" in summary and "(ragged_m, m_one, primes_small)" in summary


@needs_cxx
def test_without_the_guard_an_unwritten_value_reaches_c_and_fails_the_case_at_the_line_that_reads_it(graders):
    cases = emulated_cases(graders("cpu")(SUBMISSIONS / UNGUARDED))
    failed = {name for name, check in cases.items() if check.status != PASSED}
    assert failed == set(K_BELOW_TILE) | K_RAGGED | LARGE_RAGGED
    for name, k in K_BELOW_TILE.items():  # thread (0, 0)'s first read past k: subA[0][k]
        check = cases[name]
        assert check.unsafe == [UNWRITTEN_READ], name
        assert (f"subA[0][{k}] is read at line 20 (thread (0, 0) of block (0, 0)) before any thread of the block "
                "stored it") in check.message, name
        assert "that value reaches C: C[0][0] (stored at line 24 by thread (0, 0) of block (0, 0))" in check.message
        assert check.fixes[0].startswith("check the loads into subA"), name
        assert "depends on the order the threads run in" not in check.message, name  # the marks differ, C does not
    for name in K_RAGGED | LARGE_RAGGED:  # stale, finite values: wrong values, no unwritten read reaches C
        assert not cases[name].unsafe and "off by" in cases[name].message, name


@needs_cxx
def test_an_unwritten_entry_times_zero_through_a_helper_and_fmaf_still_reaches_c(graders):
    """B zero-filled, A not, no guard: past k an unstored entry of A is multiplied by 0 in a helper and summed with
    fmaf. NaN × 0 is NaN: the value reaches C, and the case fails at the read; where k fills every tile, the
    unstored entries are read only by threads that store nothing, and the case passes with the hint."""
    cases = emulated_cases(graders("cpu")(SUBMISSIONS / TIMES_ZERO))
    failed = {name for name, check in cases.items() if check.status != PASSED}
    # a case failing for another reason says which (a CI run saw every case fail once, and said nothing more)
    assert failed == set(K_BELOW_TILE), {name: cases[name].message[:300] for name in failed - set(K_BELOW_TILE)}
    for name in K_BELOW_TILE:
        assert cases[name].unsafe == [UNWRITTEN_READ] and "is read at line 24" in cases[name].message, name
        assert "that value reaches C" in cases[name].message, name
    assert cases["ragged_k"].status == PASSED and not cases["ragged_k"].hints  # stale × 0: right, and no unstored read
    assert cases["ragged_m"].status == PASSED and cases["ragged_m"].hints


@needs_cxx
def test_a_nan_stored_on_purpose_with_the_marks_bits_is_wrong_values_not_an_unwritten_read(graders, tmp_path):
    """The mark cannot be forged into anything but a failure: a kernel that stores the mark's bits itself, and
    reads no unstored entry, fails by its values, told as a NaN it stored, not as a read it never made."""
    source = (SUBMISSIONS / "tile_width_named" / "kernel.cu").read_text()
    store = next(line for line in source.splitlines() if line.strip().startswith("C[") and "=" in line)
    forged = source.replace(store, store + "\n        if (row == 0 && col == 0) C[0] = __int_as_float(0x7FCB0001);")
    folder = tmp_path / "forged_mark"
    folder.mkdir()
    (folder / "kernel.cu").write_text(forged)
    cases = emulated_cases(graders("cpu")(folder))
    assert all(check.status == FAILED for check in cases.values())
    for check in cases.values():
        assert not check.unsafe and "NaN or infinite, stored by the kernel" in check.message, check.name
        assert "reaches C" not in check.message and not check.hints, check.name


def test_where_the_gpus_c_was_right_by_luck_the_emulators_unwritten_value_in_c_fails_the_case_and_says_so():
    on_gpu = CheckResult("k_one", CASE, PASSED, 3, 3, "correct (64×48×1)", metrics={"m": 64})
    emulated = CheckResult("k_one", CASE, FAILED, 0, 3, "C = A×B …: subA[0][1] is read at line 20 …",
                           fixes=["check the loads into subA: …"], unsafe=[UNWRITTEN_READ])
    merged = merged_case(on_gpu, emulated)
    assert merged.status == FAILED and merged.unsafe == [UNWRITTEN_READ] and merged.fixes == emulated.fixes
    assert merged.message.startswith(emulated.message)
    assert merged.message.endswith("on the GPU C came out right in this case, by luck: the shared entries no thread "
                                   "stored held values that happened not to change it")
    wrong_on_gpu = merged_case(replace(on_gpu, status=FAILED, score=0, message="C = A×B …: NaN"), emulated)
    assert wrong_on_gpu.message == emulated.message  # wrong on both: nothing was luck


def test_a_hint_of_the_emulator_goes_with_the_gpus_passed_check():
    hint = "line 21 reads entries of subB that no thread of the block stored …"
    on_gpu = CheckResult("ragged_n", CASE, PASSED, 4, 4, "correct (64×67×64)")
    merged = merged_case(on_gpu, replace(on_gpu, hints=[hint]))
    assert merged.status == PASSED and merged.hints == [hint] and merged.message == on_gpu.message


def test_a_hint_is_said_once_with_the_cases_it_showed_in_and_never_for_hidden_cases_alone():
    shown, hidden_only = "line 21 reads entries of subB …", "line 21 reads entries of subA …"
    checks = [CheckResult(name, CASE, PASSED, 4, 4, "correct", hints=[shown]) for name in ("ragged_n", "rect_wide")]
    checks += [CheckResult("primes_mid", CASE, PASSED, 4, 4, "correct", visibility=HIDDEN, hints=[shown, hidden_only])]
    result = SubmissionResult("s", GRADED, checks=checks)
    console = Console(record=True, width=200, color_system=None)
    render(result, console)
    text = console.export_text()
    assert text.count(HINTS_TITLE) == 1 and text.count(shown) == 1 and hidden_only not in text
    assert "(ragged_n, rect_wide and 1 hidden)" in text and "What to fix" not in text
    summary = student_summary(result)
    assert f"- {shown} (ragged_n, rect_wide and 1 hidden)" in summary and hidden_only not in summary


@pytest.mark.gpu
@needs_gpu
@needs_cxx
def test_on_a_gpu_no_zero_fill_with_a_guarded_product_gets_full_marks(graders):
    result = graders("gpu")(SUBMISSIONS / GUARDED)
    assert result.score == result.max_score == 100, [(c.name, c.message) for c in result.checks if not c.passed]
    cases = {c.name: c for c in result.checks if c.kind == CASE}
    assert any(hint.startswith(HINT.format("A")) for hint in cases["ragged_m"].hints)


@pytest.mark.gpu
@needs_gpu
@needs_cxx
def test_on_a_gpu_the_unguarded_twin_fails_the_same_cases_with_the_same_cause(graders):
    on_cpu = emulated_cases(graders("cpu")(SUBMISSIONS / UNGUARDED))
    result = graders("gpu")(SUBMISSIONS / UNGUARDED)
    on_gpu = {name: check for name, check in emulated_cases(result).items() if name in on_cpu}
    assert {name: c.status for name, c in on_gpu.items()} == {name: c.status for name, c in on_cpu.items()}
    for name in K_BELOW_TILE:  # unsafe on the emulator: its check is the case's, word for word
        assert (on_gpu[name].message, on_gpu[name].fixes, on_gpu[name].unsafe) == (
            on_cpu[name].message, on_cpu[name].fixes, on_cpu[name].unsafe), name
    for name in K_RAGGED:
        assert not on_gpu[name].unsafe, name
    large = {name: on_gpu[name].status for name in ("square_512", *LARGE_RAGGED)}  # whole on the GPU, sampled here
    assert large == {"square_512": PASSED, "large_ragged": FAILED, "large_hidden": FAILED}
