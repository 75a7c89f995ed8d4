"""A case the GPU hung in gets the GPU's seconds from the CPU emulator beside it, no more (hang_notices.py).

The emulator's run is the real one (the CPU driver, the harness in the sandbox, the hang kernel spinning); what
the GPU run tells it is told here through the same board on_gpu.py hands both runs. Without the notices a
hanging kernel kept the emulator at each case's whole limit, after the GPU had long given up: a hung student's
grade took a minute and ended a class's batch alone.
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
from grader.result import ERROR

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

