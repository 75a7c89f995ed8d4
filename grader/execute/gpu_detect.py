"""Says whether a GPU run is possible, without initialising CUDA in this (the parent) process."""
from __future__ import annotations

import glob
import importlib.util


def gpu_unavailable_reason() -> str | None:
    """None when an NVIDIA GPU and pycuda are present; otherwise what is missing, for the user."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no NVIDIA GPU found on this machine (no /dev/nvidia* device)"
    if importlib.util.find_spec("pycuda") is None:
        return "pycuda is not installed: pip install '.[gpu]' (it builds against the CUDA toolkit)"
    return None
