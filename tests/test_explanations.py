"""Explanations a TA would write: one root cause per failing pattern, at the student's line, true to what they
wrote, and never a fix for something the code already does. Each kernel here makes one classic mistake (or is
its corrected twin); each test names the cause, the line and the expression the words must give, and the
advice they must not.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx
from rich.console import Console

from grader.report.terminal import render
from grader.result import CASE, PASSED, STATIC

pytestmark = needs_cxx


def cpu(graders, name: str):
    return graders("cpu")(SUBMISSIONS / name)


def failing(result) -> dict:
    return {c.name: c for c in result.checks if c.kind == CASE and c.status not in (PASSED, "skipped")}


def terminal_lines(result, width: int = 80) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    render(result, console)
    return console.export_text().splitlines()


def test_a_barrier_ending_each_inner_loop_iteration_is_the_barrier_after_using_the_tiles(graders):
    """It runs after every read of the tiles and before the next phase's stores: nothing races, the static check
    counts it, and the advice says what it costs, at its line."""
    result = cpu(graders, "barrier_in_inner_loop")
    assert failing(result) == {}
    statics = {c.name: c for c in result.checks if c.kind == STATIC}
    assert all(c.status == PASSED for c in statics.values()), statics
    assert statics["barrier after using tiles"].metrics["line"] == 31
    cost = [f for f in result.feedback if f.source == "static check"]
    assert [f.line for f in cost] == [31] and "move it after the inner loop" in cost[0].advice


@pytest.mark.parametrize("name", ["missing_use_barrier", "missing_load_barrier", "b_column_unbounded"])
def test_a_one_bug_report_fits_on_a_screen(graders, name):
    """One cause: one bullet with the checks it explains and one case told in full, ≤ 60 lines at 80 columns."""
    lines = terminal_lines(cpu(graders, name))
    assert len(lines) <= 60, "\n".join(lines)
    assert sum(1 for line in lines if line.startswith("  - ") or line.startswith("   1.")) == 1, "\n".join(lines)


def test_a_hip_file_is_told_what_it_uses_at_its_lines():
    from grader.source.signature import hip_problem

    told = hip_problem((SUBMISSIONS / "hip_port" / "kernel.cu").read_text())
    assert "line 1 includes <hip/hip_runtime.h> (CUDA: <cuda_runtime.h>)" in told
    assert "line 31 calls hipLaunchKernelGGL (CUDA: kernel<<<grid, block>>>(…))" in told
    assert "hipMalloc" not in told  # it does not call it
    only_malloc = hip_problem("#include <cstdio>\n/* a comment\n over two lines */\nvoid f() { hipMalloc(0, 0); }\n")
    assert "line 4 calls hipMalloc (CUDA: cudaMalloc)" in only_malloc and "hipLaunchKernelGGL" not in only_malloc


def test_a_compile_that_passed_tells_only_warnings_about_the_students_lines():
    """nvcc's remark on silencing warnings and ptxas's notes about nothing the student wrote are left out."""
    from grader.execute.compile import warnings_of

    log = ('kernel.cu(5): warning #177-D: variable "x" was declared but never referenced\n      int x;\n'
           '          ^\n\nRemark: The warnings can be suppressed with "-diag-suppress <warning-number>"\n\n'
           "ptxas warning : Registers are spilled to local memory\n")
    assert warnings_of(log, "a\nb\nc\nd\n  int x;\n") == (
        'compiled with warnings:\nline 5: warning #177-D: variable "x" was declared but never referenced\n'
        "    int x;\n        ^")
    assert warnings_of('Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"\n') == "compiled"


def test_junit_tells_each_cause_once_in_full_and_points_the_other_cases_to_it(graders, tmp_path):
    from junitparser import JUnitXml

    from grader.report.junit_report import to_junit_xml

    result = cpu(graders, "missing_use_barrier")
    path = tmp_path / "r.junit.xml"
    path.write_text(to_junit_xml([result]))
    texts = {case.name: case.result[0].message for case in next(iter(JUnitXml.fromfile(str(path))))
             if case.result and case.result[0].message}
    full = [name for name, text in texts.items() if "elements of C are wrong" in text]
    assert full == ["case square_64"], full
    assert "(the same cause as square_64: the barrier after using the tiles is missing" in texts["case ragged_m"]


def test_gradescope_and_prairielearn_tell_each_cause_once_in_full(graders):
    from grader.report.gradescope import to_gradescope
    from grader.report.prairielearn import to_prairielearn

    result = cpu(graders, "missing_use_barrier")
    gradescope = {t["name"]: t["output"] for t in to_gradescope(result)["tests"]}
    prairielearn = {t["name"]: t["output"] for t in to_prairielearn(result)["tests"]}
    for outputs, example, other in ((gradescope, "case: square_64", "case: ragged_m"),
                                    (prairielearn, "square_64", "ragged_m")):
        assert "elements of C are wrong" in outputs[example]
        assert sum("elements of C are wrong" in text for text in outputs.values()) == 1
        assert outputs[other].endswith("(the same cause as square_64)")
