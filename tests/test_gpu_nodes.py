"""A sandboxed run placed on one GPU sees that GPU's device node and no other GPU's (execute/confine/gpu_nodes.py).

Without a GPU: which node is which GPU, read from the driver's /proc folder as a host shows it. With one:
the sandbox's /dev and the device CUDA finds there, for every GPU of the host.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hardware import needs_gpu

from grader.execute.confine import gpu_nodes
from grader.execute.confine.sandbox import (
    GPU_LIMITS,
    Confinement,
    child_environment,
    scratch_folder,
)
from grader.execute.gpu.detect import local_gpus
from grader.execute.runner import Placement


def driver_folder(root: Path, gpus: dict[str, int]) -> Path:
    """/proc/driver/nvidia/gpus as the driver lays it out: a folder per PCI address, its minor inside."""
    for address, minor in gpus.items():
        (root / address).mkdir(parents=True)
        (root / address / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nBus Location: \t {address}\n"
            f"Device Minor: \t {minor}\nBus Type: \t PCIe\n")
    return root


def device_folder(root: Path, minors: list[int]) -> Path:
    """A /dev whose nvidiaN entries are character devices (links to /dev/null stand in for the GPUs')."""
    root.mkdir()
    for minor in minors:
        (root / f"nvidia{minor}").symlink_to("/dev/null")
    return root


def test_gpus_are_numbered_in_bus_order_whatever_their_minors(tmp_path):
    """nvidia-smi numbers GPUs by PCI address; the driver's minors may run the other way."""
    proc = driver_folder(tmp_path / "gpus", {"0000:41:00.0": 0, "0000:01:00.0": 1})
    dev = device_folder(tmp_path / "dev", [0, 1])
    assert gpu_nodes.minors_in_bus_order(proc) == [1, 0]
    assert gpu_nodes.own_node({"CUDA_VISIBLE_DEVICES": "0"}, proc, dev) == 1
    assert gpu_nodes.own_node({"CUDA_VISIBLE_DEVICES": "1"}, proc, dev) == 0


@pytest.mark.parametrize("visible", ["", "0,1", "GPU-49e8454a-fc9d-a369-20c0-1b64dd8125bf", "2", " "])
def test_a_run_not_placed_on_one_numbered_gpu_keeps_every_node(tmp_path, visible):
    """None, several, a UUID or a GPU the host lacks: the run sees every node and CUDA picks as before."""
    proc = driver_folder(tmp_path / "gpus", {"0000:00:06.0": 0, "0000:00:07.0": 1})
    dev = device_folder(tmp_path / "dev", [0, 1])
    assert gpu_nodes.own_node({"CUDA_VISIBLE_DEVICES": visible}, proc, dev) is None


def test_where_the_driver_does_not_say_which_node_is_which_every_node_stays(tmp_path):
    """No /proc folder (a container without it), an unreadable or a garbled one, or a node missing from
    /dev: nothing is guessed."""
    dev = device_folder(tmp_path / "dev", [0, 1])
    placed = {"CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_nodes.own_node(placed, tmp_path / "absent", dev) is None
    garbled = driver_folder(tmp_path / "garbled", {"0000:00:06.0": 0})
    (garbled / "0000:00:06.0" / "information").write_text("Model: \t\t NVIDIA H100\n")
    assert gpu_nodes.own_node(placed, garbled, dev) is None
    missing_file = tmp_path / "missing-file"
    (missing_file / "0000:00:06.0").mkdir(parents=True)
    assert gpu_nodes.own_node(placed, missing_file, dev) is None
    proc = driver_folder(tmp_path / "gpus", {"0000:00:06.0": 3})
    assert gpu_nodes.own_node(placed, proc, dev) is None  # /dev/nvidia3 is not there


def test_only_nvidia_and_a_number_is_a_gpus_own_node():
    assert [gpu_nodes.is_gpu_node(n) for n in ("nvidia0", "nvidia12", "nvidiactl", "nvidia-uvm",
                                                "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")] == \
        [True, True, False, False, False, False, False]


PROBE = r"""
import ctypes, json, os
cuda = ctypes.CDLL("libcuda.so.1")
count, bus = ctypes.c_int(), ctypes.create_string_buffer(64)
status = cuda.cuInit(0)
cuda.cuDeviceGetCount(ctypes.byref(count))
buses = [bus.value.decode() for i in range(count.value) if cuda.cuDeviceGetPCIBusId(bus, 64, i) == 0]
nodes = sorted(name for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit())
print(json.dumps({"init": status, "buses": buses, "nodes": nodes}))
"""


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("gpu", local_gpus() or [0])
def test_a_sandboxed_run_placed_on_a_gpu_sees_that_gpu_alone(sandbox, gpu):
    """What a GPU child or a sanitizer run sees: one GPU's node, and CUDA finds that GPU (its PCI address is
    the GPU's in bus order) as its only device. On a two-GPU host a run on GPU 1 cannot open GPU 0."""
    if not sandbox.in_bwrap:
        pytest.skip("hardware: this machine allows no mount namespace, so every run sees every node")
    addresses = sorted(os.listdir(gpu_nodes.PROC_GPUS))
    minors = gpu_nodes.minors_in_bus_order()
    with scratch_folder("sgemm-gpu-node-") as folder:
        workdir = folder / "run"
        process = sandbox.popen([sys.executable, "-c", PROBE],
                                Confinement(workdir, GPU_LIMITS, python=True, gpu=True),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=child_environment(str(workdir), Placement(gpu=gpu).environment()))
        output = process.communicate(timeout=120)[0].decode()
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["nodes"] == [f"nvidia{minors[gpu]}"], output
    assert seen["init"] == 0 and [b.lower() for b in seen["buses"]] == [addresses[gpu].lower()], output
