"""Says whether a GPU run is possible, without initialising CUDA in this (the parent) process."""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re


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


@functools.cache
def driver_version() -> str:
    """The loaded NVIDIA kernel driver's version ("550.54.15"), read from /proc; "" where none is loaded."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as version:
            found = re.search(r"Kernel Module(?: for \S+)?\s+(\d[\w.]*)", version.read())
    except OSError:
        return ""
    return found[1] if found else ""
