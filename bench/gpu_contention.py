"""What slows a GPU turn down while other students' work runs beside it.

    python3 gpu_contention.py [SECONDS_PER_SCENARIO] [--poison] [--allocate] [--upload] [--only SCENARIO ...]

One process holds a CUDA context and repeats a turn shaped like a submission's cases (21 shapes × 3
launches, each: fill C, launch a tiled kernel, synchronize, read C back). Beside it, in turn: nothing;
busy CPU processes; processes that create and destroy CUDA contexts; processes that keep idle contexts;
compute-sanitizer starting processes that only create a context; other processes running the same turn (what
case turns shared between students would be: device_lock.py); a kernel spinning on every SM (a hung student's).
With --poison each launch is preceded by the grader's shared-memory poison (one block per SM, waiting a bounded
time for all to arrive), and the waits that ran out are counted; with --allocate each shape gets fresh device
buffers, with --upload it copies its inputs from pageable memory. Prints the median turn per scenario and its
ratio to the turn alone, so the cause of a batch's slow turns is measured, not guessed.
"""
from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

KERNEL = r"""
#define T 16
extern "C" __global__ void tiled(int m, int n, int k, const float *A, const float *B, float *C) {
    __shared__ float a[T][T], b[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float sum = 0;
    for (int p = 0; p < (k + T - 1) / T; ++p) {
        a[threadIdx.y][threadIdx.x] = row < m && p * T + threadIdx.x < k ? A[row * k + p * T + threadIdx.x] : 0;
        b[threadIdx.y][threadIdx.x] = col < n && p * T + threadIdx.y < k ? B[(p * T + threadIdx.y) * n + col] : 0;
        __syncthreads();
        for (int i = 0; i < T; ++i) sum += a[threadIdx.y][i] * b[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) C[row * n + col] = sum;
}
extern __shared__ volatile unsigned int stale[];
extern "C" __global__ void poison(unsigned int words, unsigned int *arrived, unsigned int *expired,
                                  long long patience) {
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) stale[i] = 0x7fc00001u;
    if (threadIdx.x == 0) {
        atomicAdd(arrived, 1u);
        long long start = clock64();
        while (atomicAdd(arrived, 0u) < gridDim.x && clock64() - start < patience) { }
        if (atomicAdd(arrived, 0u) < gridDim.x) atomicAdd(expired, 1u);
    }
    __syncthreads();
}
extern "C" __global__ void fill(float *C, int count, float value) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) C[i] = value;
}
"""
SHAPES = [(s, s, s) for s in (16, 32, 64, 128, 256, 512, 1000)] + [
    (17, 33, 65), (100, 200, 300), (300, 200, 100), (1, 512, 512), (512, 1, 512), (512, 512, 1),
    (255, 257, 129), (384, 384, 384), (640, 320, 160), (7, 7, 7), (129, 129, 129), (31, 500, 77), (999, 3, 999)]
LAUNCHES = 3
POISON, POISON_BYTES, SMS = False, 0, 0  # set in main(): the grader's shared-memory poison before each launch
ALLOCATE, UPLOAD = "--allocate" in sys.argv, "--upload" in sys.argv

CHURN = """
import pycuda.driver as cuda
cuda.init()
while True:
    context = cuda.Device(0).make_context()
    buffer = cuda.mem_alloc(64 << 20)
    buffer.free()
    context.pop()
    context.detach()
"""
IDLE = """
import time, pycuda.driver as cuda
cuda.init()
context = cuda.Device(0).make_context()
time.sleep(10_000)
"""
SANITIZED_LAUNCH = """
import numpy as np, pycuda.driver as cuda
cuda.init()
context = cuda.Device(0).make_context()
tiled = cuda.module_from_file("/tmp/gpu_contention.cubin").get_function("tiled")
m, n, k = 19, 21, 50  # the shape the grader sanitizes for a 16 tile
a, b, c = (cuda.to_device(np.ones(size, np.float32)) for size in (m * k, k * n, m * n))
tiled(np.int32(m), np.int32(n), np.int32(k), a, b, c, block=(16, 16, 1), grid=(2, 2))
cuda.Context.synchronize()
if IDLE_AFTER:
    import time
    time.sleep(10_000)
context.pop()
"""
SANITIZED_START = """
import pycuda.driver as cuda
cuda.init()
context = cuda.Device(0).make_context()
buffer = cuda.mem_alloc(1 << 20)
context.pop()
context.detach()
"""


# A hung student's kernel: every SM spinning for two seconds a launch, again and again
SPINNING = r"""
import numpy as np, pycuda.autoinit, pycuda.driver as cuda
from pycuda.compiler import SourceModule
spin = SourceModule('extern "C" __global__ void spin(long long n) '
                    '{ long long s = clock64(); while (clock64() - s < n) {} }', no_extern_c=True).get_function("spin")
while True:
    spin(np.int64(4_000_000_000), block=(256, 1, 1), grid=(132 * 8, 1))
    cuda.Context.synchronize()
"""
# Another student's case turn at the same time: this bench's own turn loop, alone, for as long as it is let run
OTHER_TURN = ("import sys; sys.path.insert(0, {folder!r}); "
              "sys.argv = ['gpu_contention.py', '100000', '--only', 'alone']; "
              "import gpu_contention; gpu_contention.main()")

SCENARIOS = ("alone", "16 busy CPUs", "6 context churners", "16 idle contexts", "3 sanitizer starts",
             "6 churners + 16 busy CPUs", "48 busy CPUs", "15 sanitizer launches", "15 idle sanitized contexts",
             "1 other turn", "3 other turns", "1 spinning kernel")


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs so far, from /proc/stat."""
    fields = [float(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def turn_seconds(functions, buffers) -> float:
    import numpy as np
    import pycuda.driver as cuda
    tiled, fill, poison = functions
    a, b, c, counters = buffers
    host = np.empty(1000 * 1000, np.float32)
    started = time.perf_counter()
    for m, n, k in SHAPES:
        if ALLOCATE:  # as the grader's case turn did: fresh buffers per case
            fresh = [cuda.mem_alloc(4 * size) for size in (m * k, k * n, m * n, m * k, k * n, m * n, m * n)]
            a, b, c = fresh[:3]
        if UPLOAD:  # inputs copied from pageable memory
            for buffer, size in zip((a, b, c, a, b), (m * k, k * n, m * n, m * k, k * n)):
                cuda.memcpy_htod(buffer, host[:size])
        for _ in range(LAUNCHES):
            if POISON:
                cuda.memset_d32(counters, 0, 1)
                poison(np.uint32(POISON_BYTES // 4), counters, np.uintp(int(counters) + 4), np.int64(20_000_000),
                       block=(1024, 1, 1), grid=(SMS, 1), shared=POISON_BYTES)
            fill(c, np.int32(m * n), np.float32(np.nan), block=(256, 1, 1), grid=((m * n + 255) // 256, 1))
            tiled(np.int32(m), np.int32(n), np.int32(k), a, b, c, block=(16, 16, 1),
                  grid=((n + 15) // 16, (m + 15) // 16))
            cuda.Context.synchronize()
            cuda.memcpy_dtoh(host[:m * n], c)
        if ALLOCATE:
            for buffer in fresh:
                buffer.free()
    return time.perf_counter() - started


def background(scenario: str) -> list[subprocess.Popen]:
    python = sys.executable
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    loop = f"while true; do {sanitizer} --tool racecheck {python} -c '{SANITIZED_START}' >/dev/null 2>&1; done"

    def tool_loop(tool: str) -> list[str]:
        script = "IDLE_AFTER = False\n" + SANITIZED_LAUNCH
        return ["bash", "-c", f"while true; do {sanitizer} --tool {tool} {python} -c '{script}' >/dev/null 2>&1; done"]

    other_turn = OTHER_TURN.format(folder=os.path.dirname(os.path.abspath(__file__)))

    def tool_idle(tool: str) -> list[str]:
        return [sanitizer, "--tool", tool, python, "-c", "IDLE_AFTER = True\n" + SANITIZED_LAUNCH]
    commands = {
        "alone": [],
        "16 busy CPUs": [[python, "-c", "while True: pass"]] * 16,
        "6 context churners": [[python, "-c", CHURN]] * 6,
        "16 idle contexts": [[python, "-c", IDLE]] * 16,
        "3 sanitizer starts": [["bash", "-c", loop]] * 3,
        "6 churners + 16 busy CPUs": [[python, "-c", CHURN]] * 6 + [[python, "-c", "while True: pass"]] * 16,
        "48 busy CPUs": [[python, "-c", "while True: pass"]] * 48,
        "15 sanitizer launches": [tool_loop(tool) for tool in ("racecheck", "memcheck", "synccheck")] * 5,
        "15 idle sanitized contexts": [tool_idle(tool) for tool in ("racecheck", "memcheck", "synccheck")] * 5,
        "1 other turn": [[python, "-c", other_turn]],
        "3 other turns": [[python, "-c", other_turn]] * 3,
        "1 spinning kernel": [[python, "-c", SPINNING]],
    }[scenario]
    return [subprocess.Popen(c, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for c in commands]


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else 8.0
    import numpy as np
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule
    cuda.init()
    context = cuda.Device(0).make_context()
    try:
        global POISON, POISON_BYTES, SMS
        module = SourceModule(KERNEL, no_extern_c=True)
        functions = (module.get_function("tiled"), module.get_function("fill"), module.get_function("poison"))
        attribute = cuda.device_attribute
        POISON_BYTES = cuda.Device(0).get_attribute(attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        SMS = cuda.Device(0).get_attribute(attribute.MULTIPROCESSOR_COUNT)
        functions[2].set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, POISON_BYTES)
        buffers = [cuda.to_device(np.random.default_rng(1).random(1000 * 1000, dtype=np.float32)) for _ in range(3)]
        buffers.append(cuda.mem_alloc(8))
        cuda.memset_d32(buffers[3], 0, 2)
        POISON = "--poison" in sys.argv
        turn_seconds(functions, buffers)  # warm
        baseline = None
        from pycuda.compiler import compile as compile_cubin
        with open("/tmp/gpu_contention.cubin", "wb") as cubin:
            cubin.write(compile_cubin(KERNEL, no_extern_c=True))
        for scenario in sys.argv[sys.argv.index("--only") + 1:] if "--only" in sys.argv else SCENARIOS:
            helpers = background(scenario)
            time.sleep((8.0 if "idle sanitized" in scenario else 2.0) if helpers else 0.0)  # let them get going
            busy_before = cpu_busy()
            turns, until = [], time.perf_counter() + seconds
            while time.perf_counter() < until:
                turns.append(turn_seconds(functions, buffers))
            for helper in helpers:
                os.killpg(helper.pid, signal.SIGKILL)
                helper.wait()
            busy_after = cpu_busy()
            busy = (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1)
            expired = np.zeros(2, np.uint32)
            cuda.memcpy_dtoh(expired, buffers[3])
            cuda.memset_d32(buffers[3], 0, 2)
            median = statistics.median(turns)
            baseline = baseline or median
            print(f"{scenario:28s} turns {len(turns):4d}  median {median * 1000:7.1f} ms  "
                  f"max {max(turns) * 1000:7.1f} ms  ×{median / baseline:5.2f}  CPUs busy {busy:4.0%}"
                  + (f"  poison waits expired {expired[1]}" if POISON else ""), flush=True)
    finally:
        context.pop()


if __name__ == "__main__":
    main()
