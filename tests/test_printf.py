"""A kernel that prints is graded as if it did not: students leave debug lines in their kernels.

`printf_debug` is `good_basic` with `printf("C[%d][%d] = %f\\n", …)` before its store. On an H200 a
million threads printing through the driver's FIFO took 119 s for one 1031×1031 launch, so before the
grader switched printf off past the first launch (execute/gpu/late_warps.py, PRINTS) the GPU grade timed out
the large cases and lost the timing check: 74/100, where the CPU grade was full.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.judge.printed import LINE_CHARACTERS, PRINTS_NOTE, kernel_output
from grader.report.student_view import student_summary
from grader.result import PASSED, SPILLS


def test_the_kernels_lines_stop_at_the_graders_own():
    log = "C[0][0] = 1.0\n\nC[0][1] = 2.0\n[grader] case square_512 crashed or hung\nC[9][9] = 3.0\n"
    assert kernel_output(log) == ["C[0][0] = 1.0", "C[0][1] = 2.0"]
    assert kernel_output("[... output truncated by the grader ...]\nC[0][0] = 1.0\n") == []


def test_the_kernels_lines_cannot_steer_the_terminal_or_flood_the_report():
    shown = kernel_output("\x1b[2J\x1b[31mred\n" + "x" * 5000 + "\n" * 3 + "a\nb\nc\nd\n")
    assert shown[0] == "?[2J?[31mred"
    assert len(shown[1]) == LINE_CHARACTERS and shown[1].endswith("…")
    assert len(shown) == 3


def _told_it_prints(result) -> None:
    assert result.printed and result.printed[0].startswith("C[")
    summary = student_summary(result)
    assert PRINTS_NOTE in summary and f"  | {result.printed[0]}" in summary


def _no_array_advice(result) -> None:
    """Its local memory is printf's argument buffer: advice about per-thread arrays would mislead."""
    spills = [f for f in result.feedback if f.what == SPILLS]
    assert all("printf" in f.message and "arrays" not in f.advice for f in spills), spills


@needs_cxx
def test_a_printing_kernel_gets_the_cpu_grade_of_its_silent_twin(graders):
    printing, silent = (graders("cpu")(SUBMISSIONS / name) for name in ("printf_debug", "good_basic"))
    assert {c.name: c.status for c in printing.checks} == {c.name: c.status for c in silent.checks}
    assert printing.score == silent.score and all(c.status == PASSED for c in printing.checks if not c.needs_gpu)
    _told_it_prints(printing)
    assert not silent.printed
    _no_array_advice(printing)


@pytest.mark.gpu
@needs_gpu
@needs_cxx
def test_a_printing_kernel_gets_the_gpu_grade_of_its_silent_twin(graders):
    printing, silent = (graders("gpu")(SUBMISSIONS / name) for name in ("printf_debug", "good_basic"))
    assert {c.name: c.status for c in printing.checks} == {c.name: c.status for c in silent.checks}
    assert printing.score == printing.max_score == silent.score
    _told_it_prints(printing)
    _no_array_advice(printing)


@pytest.mark.gpu
@needs_gpu
@needs_cxx
def test_an_endless_kernel_is_still_told_as_one(graders):
    result = graders("gpu")(SUBMISSIONS / "hang")
    assert any("did not finish" in c.message for c in result.checks)
