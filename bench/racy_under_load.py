"""Is a racy kernel's verdict the same when other CUDA programs use the GPU beside its turn? (GPU host)

Usage: python3 bench/racy_under_load.py [ROUNDS] [--noise N] [--kernel NAME]
In a batch, other students' processes start contexts, load modules and start sanitizer tools on the GPU
outside the turns, and the GPU time-slices between contexts: another context's kernel can run between
the grader's poisoning of shared memory and the student's launch, and leave finite values where the
racy kernel reads a tile element nobody stored yet (a 1×1×1 case then passes). This grades a corpus
kernel (missing_load_barrier by default) ROUNDS times alone, sanitizer off, first on a quiet GPU and
then with N noise processes (the grader's own code, outside any sandbox) that keep launching kernels
which fill every SM's shared memory with zeros. It prints each case's verdicts per setting and exits 1
if any case's verdict was not the same in every round of both.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchlib import ROOT, config_with_cache, grade_alone

NOISE = r"""
import sys, numpy as np, pycuda.autoinit, pycuda.driver as cuda
from pycuda.compiler import SourceModule
kernel = SourceModule('''
extern __shared__ float stale[];
__global__ void zero_shared(unsigned int words, long long spin) {
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) stale[i] = 0.0f;
    long long start = clock64();
    while (clock64() - start < spin) { }
}''').get_function("zero_shared")
device = pycuda.autoinit.device
words = 48 * 1024 // 4
blocks = device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT) * 4
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    kernel(np.uint32(words), np.int64(20_000), block=(256, 1, 1), grid=(blocks, 1), shared=words * 4)
    cuda.Context.synchronize()
"""


def case_verdicts(student: Path, config: Path, out: Path, rounds: int) -> dict[str, Counter]:
    seen: dict[str, Counter] = {}
    for index in range(rounds):
        result = grade_alone(student, config, out / str(index), "gpu", sanitize=False)
        for check in result.checks:
            if check.kind == "case":
                seen.setdefault(check.name, Counter())[check.status] += 1
    return seen


def main() -> int:
    args = sys.argv[1:]
    rounds = int(args[0]) if args and args[0].isdigit() else 10
    noise = int(args[args.index("--noise") + 1]) if "--noise" in args else 2
    kernel = args[args.index("--kernel") + 1] if "--kernel" in args else "missing_load_barrier"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        student = work / "class" / kernel
        student.mkdir(parents=True)
        (student / "kernel.cu").write_text((ROOT / "tests" / "submissions" / kernel / "kernel.cu").read_text())
        config = config_with_cache(work / "cache", work)
        quiet = case_verdicts(student, config, work / "quiet", rounds)
        noisy_processes = [subprocess.Popen([sys.executable, "-c", NOISE], stdout=subprocess.PIPE, text=True)
                           for _ in range(noise)]
        try:
            for process in noisy_processes:
                process.stdout.readline()  # its context is up and its kernel compiled
            loaded = case_verdicts(student, config, work / "loaded", rounds)
        finally:
            for process in noisy_processes:
                process.kill()
                process.wait()
    flips = 0
    print(f"{kernel}, {rounds} rounds each: case verdicts on a quiet GPU | beside {noise} noise processes")
    for case in quiet:
        both = quiet[case] + loaded.get(case, Counter())
        flips += len(both) > 1
        mark = "  <- not the same every time" if len(both) > 1 else ""
        print(f"  {case:14s} {dict(quiet[case])} | {dict(loaded.get(case, Counter()))}{mark}")
    print(f"{flips} case(s) whose verdict changed")
    return 1 if flips else 0


if __name__ == "__main__":
    sys.exit(main())
