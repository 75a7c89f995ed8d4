"""Says whether a GPU run is possible, without initialising CUDA in this (the parent) process."""
from __future__ import annotations

import glob
import importlib.util
import os


def local_gpus() -> list[int]:
    """This host's GPUs by index: CUDA_VISIBLE_DEVICES when set, else one per /dev/nvidiaN device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [int(g) for g in visible.split(",") if g.strip().isdigit()]
    return list(range(len(glob.glob("/dev/nvidia[0-9]*"))))


def gpu_unavailable_reason() -> str | None:
    """None when an NVIDIA GPU and pycuda are present; otherwise what is missing, for the user."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no NVIDIA GPU found on this machine (no /dev/nvidia* device)"
    if importlib.util.find_spec("pycuda") is None:
        return "pycuda is not installed: pip install '.[gpu]' (it builds against the CUDA toolkit)"
    return None
