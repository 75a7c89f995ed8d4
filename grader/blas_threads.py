"""The grading process's BLAS threads, set before numpy loads: OpenBLAS reads these variables once, at load.

The parent's one BLAS user is each case's float64 truth (two matmuls), computed on a thread while the child
starts. OpenBLAS's default is a thread per core, each spinning for a while after every call:
- on a 16-core H100 host they held a cold grade's GPU child back: its CUDA start took 0.21-0.24 s instead of
  0.10 s (bench/grade_time.py). A few threads still compute the truths before the first output is judged;
- on a 2-core machine the spinning was a tenth of a CPU grade's CPU (1.47 against 1.34 CPU-s for good_basic,
  /proc/stat, wall the same). With the shortest timeout OpenBLAS allows (2^4 cycles) they sleep at once.
At most one thread per core; set only where the user has not set it; children get their own
(sandbox.ONE_BLAS_THREAD).
"""
import os

PARENT_BLAS_THREADS = str(min(4, os.cpu_count() or 1))  # never more threads than cores
SLEEP_AT_ONCE = "4"  # OPENBLAS_THREAD_TIMEOUT: log2 of the cycles an idle thread spins (4 to 30; default 28)

for _variable, _value in (("OPENBLAS_NUM_THREADS", PARENT_BLAS_THREADS), ("MKL_NUM_THREADS", PARENT_BLAS_THREADS),
                          ("OPENBLAS_THREAD_TIMEOUT", SLEEP_AT_ONCE)):
    os.environ.setdefault(_variable, _value)
