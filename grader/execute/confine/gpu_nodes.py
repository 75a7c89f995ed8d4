"""Which device node is which GPU, so that a sandboxed run placed on one GPU sees that GPU's node alone.

Two reasons. Nothing a sandboxed run starts can open another GPU of the host, where another student's
timing runs. And the driver starts a CUDA program by opening every GPU it can see, work a host does one program at
a time: on a two-H100 host, 32 launch programs side by side started 12.7 a second when each saw only its
own GPU's node, against 9.7 when each saw both (bench/sanitizer_cost.py --own-node). In a class's batch
(bench/batch_300.py) the gain did not stand out from the spread between runs.

A GPU is numbered as nvidia-smi numbers it: its place in PCI bus order. CUDA numbers GPUs fastest first,
which is the same order on a host of one model of GPU; a run that sees one node sees one device, number 0.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU, named by its PCI bus address
GPU_NODE = re.compile(r"nvidia(\d+)")
MINOR_LINE = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.MULTILINE)


def minors_in_bus_order(proc_gpus: Path = PROC_GPUS) -> list[int]:
    """Each GPU's device minor (its /dev/nvidiaN), in PCI bus order; [] when the driver does not say."""
    try:
        folders = sorted(proc_gpus.iterdir())  # addresses like 0000:00:06.0: fixed width, so sorted by bus
    except OSError:
        return []
    minors = []
    for folder in folders:
        try:
            match = MINOR_LINE.search((folder / "information").read_text())
        except OSError:
            return []
        if match is None:
            return []
        minors.append(int(match.group(1)))
    return minors


def named_index(env: Mapping[str, str]) -> int | None:
    """The one GPU CUDA_VISIBLE_DEVICES names by number; None for none, several, or a UUID."""
    value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    return int(value) if value.isdigit() else None


def own_node(env: Mapping[str, str], proc_gpus: Path = PROC_GPUS, dev: Path = Path("/dev")) -> int | None:
    """The device minor of the one GPU env places a run on, when the driver says which node that is and
    the node is there; None otherwise (the run then sees every node, and env picks its GPU as before)."""
    index = named_index(env)
    minors = minors_in_bus_order(proc_gpus)
    if index is None or index >= len(minors):
        return None
    minor = minors[index]
    return minor if (dev / f"nvidia{minor}").is_char_device() else None


def is_gpu_node(name: str) -> bool:
    """/dev/nvidiaN is a GPU's own node; nvidiactl, nvidia-uvm and the rest are the driver's, shared."""
    return GPU_NODE.fullmatch(name) is not None
