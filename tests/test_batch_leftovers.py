"""Nothing of a killed or interrupted `grade batch` stays in the temporary root (its folders hold student code):
kill -9 and a rerun at once, many times over, and Ctrl-C (issues 51 and 48). Real batches on the CPU backend."""
import os
import shutil
import signal
import time

import pytest
from conftest import SUBMISSIONS, left_in, owners_of
from hardware import needs_cxx
from test_batch import batch, write_config

pytestmark = needs_cxx
ROUNDS = 6


@pytest.fixture
def slow_class(tmp_path):
    """Three students whose kernels hang until the 2 s run limit: each grade holds its folder for seconds."""
    folder = tmp_path / "class"
    for name in ("hang_a", "hang_b", "hang_c"):
        (folder / name).mkdir(parents=True)
        shutil.copy(SUBMISSIONS / "hang" / "kernel.cu", folder / name / "kernel.cu")
    return folder


@pytest.fixture
def two_second_config(tmp_path):
    return write_config(tmp_path / "config", "  - {name: square_32, m: 32, n: 32, k: 32, seed: 1, points: 90}\n",
                        {"run_s: 10": "run_s: 2"})


def grading_folders(root) -> list[str]:
    return [name for name in left_in(root) if name.startswith("sgemm-grade-")]


def wait_for_new_grading(root, seen: set[int], running, timeout_s: float = 120) -> set[int]:
    """Waits until a grade folder of an owner not seen before is there (this batch grades now): its owners."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running.poll() is None:
        owners = owners_of(grading_folders(root)) - seen
        if owners:
            return owners
        time.sleep(0.02)
    raise AssertionError(f"the batch graded nobody (exit {running.poll()}): {left_in(root)}")


def test_kill_9_and_resume_at_once_again_and_again_leaves_nothing(two_second_config, slow_class, tmp_path,
                                                                   temp_root):
    env = {**os.environ, "TMPDIR": str(temp_root)}
    out, seen = tmp_path / "out", set()
    for _ in range(ROUNDS):
        running = batch(two_second_config, slow_class, "-o", out, "--jobs", "2", "--resume", env=env)
        seen |= wait_for_new_grading(temp_root, seen, running)
        running.send_signal(signal.SIGKILL)  # and the next run starts at once, its workers still ending
        running.wait()
    finished = batch(two_second_config, slow_class, "-o", out, "--jobs", "2", "--resume", env=env)
    stdout, stderr = finished.communicate(timeout=300)
    assert finished.returncode == 0, stderr
    assert len(seen) >= ROUNDS  # every killed run was grading: each left folders of its own
    assert left_in(temp_root) == [], f"left by the killed runs: {left_in(temp_root)}"
    assert "3 students" in stdout


@pytest.mark.parametrize("to_group", [True, False], ids=["terminal Ctrl-C", "SIGINT to the batch alone"])
def test_ctrl_c_of_a_batch_leaves_nothing_in_the_temporary_root(two_second_config, slow_class, tmp_path, temp_root,
                                                                to_group):
    env = {**os.environ, "TMPDIR": str(temp_root)}
    # A terminal's Ctrl-C is SIGINT to the batch's whole process group, its workers included; `kill -INT` to the
    # batch alone leaves its workers to it. SIGINT at its default action (a process that ignores it passes that on).
    running = batch(two_second_config, slow_class, "-o", tmp_path / "out", "--jobs", "2", env=env,
                    start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_new_grading(temp_root, set(), running)
    if to_group:
        os.killpg(running.pid, signal.SIGINT)
    else:
        running.send_signal(signal.SIGINT)
    stdout, stderr = running.communicate(timeout=60)
    assert running.returncode == 130 and "--resume" in stderr and "Traceback" not in stderr, stderr
    assert left_in(temp_root) == [], "left by the interrupted batch"
