"""The program compute-sanitizer watches: one launch of the student's kernel on a small, ragged shape.

Run as `python -m grader.execute.sanitizer_child SOURCE KERNEL TILE M N K EVENTS_FILE` under
compute-sanitizer, in the sandbox; a SOURCE.cubin beside SOURCE (with the .cu suffix replaced) is loaded
instead of compiling. A, B and C are allocated at exactly their sizes (memcheck's padding then makes any
overrun hit no other buffer), and their device addresses are sent first as the protocol's `buffers`
event (to EVENTS_FILE, not stdout, which the kernel's printf shares), so the parent can name the buffer
an address belongs to.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from .compile import prepare_source
from .protocol import Channel


def main(argv: list[str]) -> int:
    source, kernel_name = Path(argv[1]).read_text(encoding="utf-8"), argv[2]
    tile, m, n, k = (int(value) for value in argv[3:7])
    import pycuda.autoinit  # noqa: F401  (a context for this process only)
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    cubin = Path(argv[1]).with_suffix(".cubin")
    if cubin.is_file():  # the GPU run's own build of this file
        module = cuda.module_from_buffer(cubin.read_bytes())
    else:  # the same text the grader compiles: the #line directive keeps the sanitizer's lines the student's
        module = SourceModule(prepare_source(source), options=["-lineinfo"], cache_dir=False)
    kernel = module.get_function(kernel_name)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    buffers = {"A": cuda.to_device(a), "B": cuda.to_device(b), "C": cuda.mem_alloc(m * n * 4)}
    sizes = {"A": a.nbytes, "B": b.nbytes, "C": m * n * 4}
    events = os.open(argv[7], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    Channel(events).send("buffers", buffers={name: [int(buffers[name]), sizes[name]] for name in buffers})
    os.close(events)
    grid = ((n + tile - 1) // tile, (m + tile - 1) // tile, 1)
    kernel(np.int32(m), np.int32(n), np.int32(k), buffers["A"], buffers["B"], buffers["C"],
           block=(tile, tile, 1), grid=grid)
    cuda.Context.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
