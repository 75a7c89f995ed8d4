"""How long each compute-sanitizer tool's launch holds the GPU, per kind of kernel (GPU host).

Usage: python3 bench/sanitizer_turn.py [RUNS] [--kernels NAME,NAME,...] [NAME=VALUE ...] [-- EXTRA TOOL OPTIONS]
A tool's launch has a turn on the GPU that no case or timing measurement shares, so the time from the
launch program's "go" to its "launched" is GPU time the rest of a batch waits for. One at a time, outside
the sandbox, each corpus kernel (tile 16) under each tool as the grader runs it, RUNS times: the median
turn, and the whole tool run. NAME=VALUE sets an environment variable for the runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from benchlib import corpus_cubin, gpu_arch

from grader.contract import REFERENCE
from grader.diagnose.launcher import launcher
from grader.diagnose.run import TOOLS, launch_command, sanitizer_path, tool_command
from grader.execute.nvcc.kernel_params import kernel_symbol

KERNELS = ["good_basic", "missing_load_barrier", "missing_use_barrier", "no_bounds_checks"]


def turn_of(command: list[str]) -> tuple[float, float]:
    """(seconds from "go" to "launched", seconds of the whole run) of one tool run."""
    read_fd, write_fd = os.pipe()
    control_read, control_write = os.pipe()
    started = time.perf_counter()
    proc = subprocess.Popen([*command, str(write_fd), str(control_read)], pass_fds=(write_fd, control_read),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_fd)
    os.close(control_read)
    go = launched = None
    with os.fdopen(read_fd) as events:
        for line in events:
            event = json.loads(line)["event"]
            if event == "await_device":
                go = time.perf_counter()
                os.write(control_write, b"go\n")
            elif event == "launched":
                launched = time.perf_counter()
    os.close(control_write)
    proc.wait()
    if go is None or launched is None:
        return float("nan"), time.perf_counter() - started
    return launched - go, time.perf_counter() - started


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    runs = int(args[0]) if args and args[0].isdigit() else 3
    kernels = args[args.index("--kernels") + 1].split(",") if "--kernels" in args else KERNELS
    os.environ.update(arg.split("=", 1) for arg in args if "=" in arg)
    tool_path = sanitizer_path()
    arch = gpu_arch()
    with tempfile.TemporaryDirectory() as work:
        program = launcher(Path(work))
        print(f"{' '.join(a for a in args if '=' in a) or 'default environment'} {' '.join(extra)}")
        for kernel in kernels:
            cubin = corpus_cubin(Path(work), kernel, arch)
            cells = []
            for tool, spec in TOOLS.items():
                launch = launch_command(program, cubin, REFERENCE, 16, spec.shape(16),
                                        kernel_symbol(cubin.read_bytes(), REFERENCE))
                command = tool_command(tool_path, tool, os.devnull, launch, tuple(extra))
                measured = [turn_of(command) for _ in range(runs)]
                cells.append(f"{tool} turn {median(m[0] for m in measured) * 1000:6.0f} ms"
                             f" (run {median(m[1] for m in measured):4.1f} s)")
            print(f"  {kernel:22s} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
