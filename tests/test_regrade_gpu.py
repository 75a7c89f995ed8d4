"""On a real GPU (issue 51): a result records the GPU, the driver and the toolkit it was graded with;
`grade reproduce` of it matches on the same GPU, and on the CPU emulator says which verdicts differ and that
the machine is why."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]


def grade(config, *args, backend: str = "gpu") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *map(str, args), "--config", str(config), "--backend",
                           backend], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def gpu_result(config_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-graded")
    graded = grade(config_file, SUBMISSIONS / "good_basic", "-o", out)
    assert graded.returncode == 0, graded.stderr
    assert "Graded with:" in graded.stdout and "on NVIDIA" in graded.stdout
    return out / "good_basic.json"


def test_a_gpu_result_records_its_gpu_driver_and_toolkit(gpu_result):
    stored = json.loads(gpu_result.read_text())
    assert stored["backend"] == "gpu" and stored["device"]
    assert stored["provenance"]["driver"] and stored["provenance"]["toolkit"]


def test_reproduce_on_the_same_gpu_matches(config_file, gpu_result):
    again = grade(config_file, "reproduce", gpu_result, SUBMISSIONS / "good_basic")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Reproduced: every verdict matches" in " ".join(again.stdout.split())


@needs_cxx
def test_reproduce_on_the_cpu_emulator_says_the_machine_differs(config_file, gpu_result):
    device = json.loads(gpu_result.read_text())["device"]
    again = grade(config_file, "reproduce", gpu_result, SUBMISSIONS / "good_basic", backend="cpu")
    said = " ".join(again.stdout.split())
    assert again.returncode == 7, said
    # compute-sanitizer's diagnosis is a GPU grade's check only (the CPU decides timing by the speed model): the
    # machine is why the gradings differ.
    assert "compute-sanitizer: skipped 0/0 → —" in said, said
    assert f"Why (what differs between the two gradings): machine: {device} → CPU emulator" in said, said
