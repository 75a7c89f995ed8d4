"""What one compute-sanitizer tool run costs in CPU, next to what else a batch spends per student (GPU host).

Usage: python3 bench/sanitizer_cost.py [RUNS] [--side-by-side N,N,...] [--gpus G,G,...] [--own-node] [--only NAME]
                                      [--kernel SUBMISSION]
                                      [--shape M,N,K] [NAME=VALUE ...] [-- EXTRA TOOL OPTIONS ...]
One at a time on a quiet machine, outside the sandbox (only the grader's reference kernel runs, never a
student's): the launch program alone, each tool as the grader runs it (and with the extra options, if
given), nvcc on a corpus kernel as the GPU child compiles it, and a GPU child's CUDA start-up. CPU is
user + system time of the process and everything it waited for (RUSAGE_CHILDREN), so the figures add
up to what a 16-core host can do per second. --side-by-side runs N copies of each tool run (and of the
launch program alone) at once, RUNS times each, and prints runs per second: whether tool runs on one GPU
scale with the cores or queue on something else; --only keeps one of those runs (launch, racecheck, …);
--gpus 0,1 spreads the side-by-side runs over those GPUs (whether a second GPU adds throughput); with
--own-node each of those runs sees only its GPU's device node (/dev/nvidiaN), as a container given one GPU.
NAME=VALUE sets an environment variable for every measured run (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1).
--kernel runs a corpus submission's kernel (tile 16) instead of the reference's, --shape on another shape
than the grader's; an extra option replaces the grader's own of that name.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from statistics import median

from benchlib import ROOT, corpus_cubin, gpu_arch, reference_cubin

from grader.contract import REFERENCE
from grader.diagnose.launcher import launcher
from grader.diagnose.run import TOOLS, launch_command, ragged_shape, sanitizer_path
from grader.execute.confine import gpu_nodes
from grader.execute.confine.sandbox import ONE_BLAS_THREAD, bwrap_binary, nvidia_device_nodes
from grader.execute.nvcc.compile import prepare_source
from grader.execute.nvcc.kernel_params import kernel_symbol


def cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


OWN_NODE: list[str] = []  # bwrap, when --own-node: each run sees only its GPU's device node


def own_node(command: list[str], gpu: str) -> list[str]:
    """command in a bubblewrap mount namespace whose /dev holds the NVIDIA nodes the grader's sandbox gives a
    run placed on `gpu`: the driver's shared ones and that GPU's alone (execute/confine/gpu_nodes.py)."""
    minor = gpu_nodes.own_node({"CUDA_VISIBLE_DEVICES": gpu})
    binds = [arg for node in nvidia_device_nodes(minor) for arg in ("--dev-bind", node, node)]
    return [OWN_NODE[0], "--dev-bind", "/", "/", "--dev", "/dev", *binds, "--", *command]


def measured(command: list[str], protocol: bool = False, cwd: str | None = None,
             gpu: str | None = None) -> tuple[float, float, bool]:
    """(wall s, CPU s, whether the kernel launched) of one run of command, on `gpu` if given."""
    fds: tuple[int, ...] = ()
    if gpu is not None and OWN_NODE:
        command, gpu = own_node(command, gpu), None
    if protocol:  # the launch program's event and control pipes, answered in advance
        read_fd, write_fd = os.pipe()
        control_read, control_write = os.pipe()
        os.write(control_write, b"go\n")
        command, fds = [*command, str(write_fd), str(control_read)], (write_fd, control_read)
    before, started = cpu_children(), time.perf_counter()
    env = None if gpu is None else {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    proc = subprocess.Popen(command, pass_fds=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                            env=env)
    events = b""
    if protocol:
        for fd in fds:
            os.close(fd)
        while chunk := os.read(read_fd, 65536):
            events += chunk
        os.close(read_fd)
        os.close(control_write)
    proc.wait()
    return time.perf_counter() - started, cpu_children() - before, b'"launched"' in events or not protocol


def report(label: str, runs: list[tuple[float, float, bool]]) -> None:
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    launched = sum(r[2] for r in runs)
    print(f"{label:48s} wall {median(walls):6.2f} s  CPU {median(cpus):6.2f} s  (median of {len(runs)}, "
          f"launched {launched}/{len(runs)})", flush=True)


def side_by_side(label: str, command: list[str], copies: int, runs: int, gpus: list[str]) -> None:
    """copies threads, each running command runs times back to back (spread over `gpus`, if given): runs per
    second and the median run."""
    before, started = cpu_children(), time.perf_counter()
    with ThreadPoolExecutor(copies) as pool:
        results = list(pool.map(lambda i: measured(command, protocol=True, gpu=gpus[i % len(gpus)] if gpus else None),
                                range(copies * runs)))
    wall, cpu = time.perf_counter() - started, cpu_children() - before
    per_run = median(r[0] for r in results)
    where = (f" on GPUs {','.join(gpus)}" if gpus else "") + (" (own node)" if OWN_NODE else "")
    print(f"{label + where:40s} x{copies:<3d} {len(results) / wall:6.2f} runs/s, median run {per_run:6.2f} s,"
          f" CPU {cpu / len(results):5.2f} s per run, launched {sum(r[2] for r in results)}/{len(results)}", flush=True)


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    copies = [int(c) for c in args[args.index("--side-by-side") + 1].split(",")] if "--side-by-side" in args else []
    runs = int(args[0]) if args and args[0].isdigit() else 3
    only = args[args.index("--only") + 1] if "--only" in args else ""
    gpus = args[args.index("--gpus") + 1].split(",") if "--gpus" in args else []
    if "--own-node" in args:
        OWN_NODE.append(bwrap_binary() or sys.exit("--own-node needs bubblewrap"))
    kernel = args[args.index("--kernel") + 1] if "--kernel" in args else ""
    shape = args[args.index("--shape") + 1].split(",") if "--shape" in args else [str(x) for x in ragged_shape(16)]
    os.environ.update(arg.split("=", 1) for arg in args if "=" in arg)
    tool = sanitizer_path()
    with tempfile.TemporaryDirectory() as work:
        arch = gpu_arch()
        program = launcher(Path(work))
        cubin = corpus_cubin(Path(work), kernel, arch) if kernel else reference_cubin(Path(work), arch)
        launch = launch_command(program, cubin, REFERENCE, 16, tuple(map(int, shape)),
                                kernel_symbol(cubin.read_bytes(), REFERENCE))
        if copies:
            commands = {"launch program alone": launch}
            for name, spec in TOOLS.items():
                commands[name] = [tool, "--tool", name, *spec.options, "--show-backtrace", "no", *launch]
                if extra:
                    commands[f"{name} {' '.join(extra)}"] = [*commands[name][:-len(launch)], *extra, *launch]
            for label, command in commands.items():
                if only and not label.startswith(only):
                    continue
                for count in copies:
                    side_by_side(label, command, count, runs, gpus)
            return
        if not only:
            report("launch program alone", [measured(launch, protocol=True) for _ in range(runs)])
        for name, spec in TOOLS.items():
            if only and not name.startswith(only):
                continue
            base = [tool, "--tool", name, *without(list(spec.options), extra), "--show-backtrace", "no",
                    "--print-limit", "50"]
            report(f"{name} (as the grader runs it)", [measured([*base, *launch], protocol=True) for _ in range(runs)])
            if extra:
                report(f"{name} {' '.join(extra)}", [measured([*base, *extra, *launch], protocol=True)
                                                     for _ in range(runs)])
        if only:
            return
        student = (ROOT / "tests" / "submissions" / "good_basic" / "kernel.cu").read_text()
        for index in range(runs):  # each text unique, as in a class
            Path(work, f"s{index}.cu").write_text(prepare_source(student + f"// {index}\n"))
        report("nvcc --cubin of a student kernel", [
            measured(["nvcc", "--cubin", "-lineinfo", "-arch", arch, f"s{index}.cu", "-o", f"s{index}.cubin"],
                     cwd=work) for index in range(runs)])
        for label, code, threads in [
                ("python + numpy", "import numpy", ""),
                ("python + numpy, one BLAS thread", "import numpy", "1"),
                ("python + numpy + pycuda, cuInit", "import numpy, pycuda.driver as c; c.init()", "1"),
                ("GPU child start-up (python, pycuda, context)", "import numpy, pycuda.driver as c; c.init(); "
                 "x = c.Device(0).make_context(); x.pop()", ""),
                ("the same, one BLAS thread", "import numpy, pycuda.driver as c; c.init(); "
                 "x = c.Device(0).make_context(); x.pop()", "1")]:
            with blas_threads(threads):
                report(label, [measured([sys.executable, "-c", code]) for _ in range(runs)])


def without(options: list[str], extra: list[str]) -> list[str]:
    """The grader's options for a tool, minus those (with their values) that extra gives again."""
    kept, skip = [], False
    for index, option in enumerate(options):
        if skip:
            skip = False
            continue
        if option in extra:
            skip = index + 1 < len(options) and not options[index + 1].startswith("--")
            continue
        kept.append(option)
    return kept


@contextmanager
def blas_threads(count: str):
    saved = {name: os.environ.pop(name, None) for name in BLAS_THREADS}
    os.environ.update(dict.fromkeys(BLAS_THREADS, count) if count else {})
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


BLAS_THREADS = tuple(ONE_BLAS_THREAD)  # the variables the grader sets for its children


if __name__ == "__main__":
    main()
