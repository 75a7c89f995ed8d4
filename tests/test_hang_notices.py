"""A case the GPU hung in gets the GPU's seconds from the CPU emulator beside it, no more; and after a hang the GPU
leaves out the cases the emulator stopped for a divergent barrier (hang_notices.py).

The emulator's run is the real one (the CPU driver, the harness in the sandbox, the hang kernel spinning); what
the GPU run tells it is told here through the same board on_gpu.py hands both runs. Without the notices a
hanging kernel kept the emulator at each case's whole limit, after the GPU had long given up: a hung student's
grade took a minute and ended a class's batch alone. Without the emulator's verdicts `conditional_barrier` hung
the GPU in three cases and lost the rest, which a CPU grade passes.
"""
import threading
import time

from conftest import RUN_TIMEOUT_S, SUBMISSIONS
from hardware import needs_cxx

from grader.cases import Case
from grader.config import load_config
from grader.execute.child_run import run_child
from grader.execute.hang_notices import GpuHangs
from grader.execute.protocol import gpu_hung_line, gpu_hung_notice
from grader.intake.submission import read_submission
from grader.plan import CPU, RunPlan
from grader.result import ERROR, PASSED

CASES = [Case("square_16", 16, 16, 16, 1, 10), Case("square_32", 32, 32, 32, 2, 10)]
GPU_LIMIT_S = 1.0


def test_a_notice_line_reads_back_and_an_answer_is_no_notice():
    assert gpu_hung_notice(gpu_hung_line("hidden case\n2", 3.0).decode().strip()) == ("hidden case\n2", 3.0)
    assert gpu_hung_notice("go") is None and gpu_hung_notice("go 15") is None


def test_every_listener_hears_each_hang_once_those_told_before_it_began_too():
    hangs, heard = GpuHangs(), []
    hangs.hung("a", 3.0)
    stop = hangs.listen(lambda case, limit: heard.append((case, limit)))
    hangs.hung("b", 3.0)
    hangs.hung("a", 3.0)  # the GPU child's restart does not make it a second hang
    stop()
    hangs.hung("c", 3.0)
    assert heard == [("a", 3.0), ("b", 3.0)]


@needs_cxx
def test_the_emulator_gives_a_case_the_gpu_hung_in_the_gpus_seconds(config_file):
    """square_16's notice comes while the emulator runs (a thread, as the GPU run's events are read on one); it
    times out at the GPU's second, told so; square_32, which no notice names, keeps its own limit."""
    config = load_config(config_file)
    hangs = GpuHangs()
    telling = threading.Timer(0.5, hangs.hung, ("square_16", GPU_LIMIT_S))
    started = time.monotonic()
    telling.start()
    try:
        run = run_child(read_submission(SUBMISSIONS / "hang"), config, CASES, CPU, RunPlan(CPU), gpu_hangs=hangs)
    finally:
        telling.cancel()
    cases = run.made_cases()
    assert cases["square_16"].status == ERROR
    assert f"timed out after {GPU_LIMIT_S:g} s of its own time" in cases["square_16"].message
    assert cases["square_32"].status == ERROR
    assert f"timed out after {RUN_TIMEOUT_S:g} s of its own time" in cases["square_32"].message
    # one case's own limit, not two (waits for a CPU are forgiven, up to one more limit: deadline.py)
    assert time.monotonic() - started < GPU_LIMIT_S + 2 * RUN_TIMEOUT_S + 10



def test_after_a_hang_the_gpu_leaves_out_what_the_emulator_stopped_for_a_divergent_barrier():
    """The verdicts come from the emulator's thread, some after the GPU run asks: it waits for them, and only a
    divergent barrier or collective leaves a case out (a fault or a time-out does not)."""
    hangs = GpuHangs()
    hangs.emulator_beside(["ragged_m", "ragged_n", "square_32", "rect_tall", "ragged_k", "not_judged"])
    hangs.emulated("ragged_m", "divergence")

    def emulator() -> None:
        time.sleep(0.3)
        for case, stopped_by in (("ragged_n", "warp_divergence"), ("square_32", ""), ("rect_tall", "fault")):
            hangs.emulated(case, stopped_by)
        time.sleep(0.3)
        hangs.emulated("ragged_k", "divergence")
        hangs.emulator_finished()  # never judges "not_judged"

    thread = threading.Thread(target=emulator)
    thread.start()
    started = time.monotonic()
    left_out = hangs.left_out_after_hang(
        "ragged_m", ["ragged_n", "square_32", "rect_tall", "ragged_k", "not_judged", "gpu_only"])
    thread.join()
    assert left_out == ["ragged_n", "ragged_k"]
    assert time.monotonic() - started >= 0.5  # it waited for ragged_k's verdict, not for a clock


def test_a_hang_the_emulator_did_not_stop_for_a_divergent_barrier_leaves_nothing_out():
    hangs = GpuHangs()
    assert hangs.left_out_after_hang("square_16", ["square_32"]) == []  # no emulator beside: nothing to wait for
    hangs.emulator_beside(["square_16", "square_32", "never_judged"])
    hangs.emulated("square_16", "timeout")  # an endless loop: the emulator timed out too
    hangs.emulated("square_32", "divergence")
    assert hangs.left_out_after_hang("square_16", ["square_32"]) == []
    hangs.emulator_finished()
    assert hangs.left_out_after_hang("never_judged", ["square_32"]) == []


@needs_cxx
def test_the_emulators_run_tells_which_cases_it_stopped_for_a_divergent_barrier(config_file):
    """conditional_barrier on the real emulator: its barrier inside `if (row < m && col < n)` diverges where some
    threads of a block fall outside C, and nowhere else; those are the cases a GPU leaves out after hanging in one."""
    config = load_config(config_file)
    cases = [Case("square_16", 16, 16, 16, 1, 10), Case("ragged_m", 67, 64, 64, 2, 10),
             Case("square_32", 32, 32, 32, 3, 10), Case("ragged_n", 64, 67, 64, 4, 10)]
    hangs = GpuHangs()
    hangs.emulator_beside([case.name for case in cases])
    try:
        run = run_child(read_submission(SUBMISSIONS / "conditional_barrier"), config, cases, CPU, RunPlan(CPU),
                        gpu_hangs=hangs)
    finally:
        hangs.emulator_finished()
    made = run.made_cases()
    assert [made[name].status for name in ("square_16", "ragged_m", "square_32", "ragged_n")] == [
        PASSED, ERROR, PASSED, ERROR]
    assert hangs.left_out_after_hang("ragged_m", ["square_32", "ragged_n"]) == ["ragged_n"]
