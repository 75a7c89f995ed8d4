"""The grading process's BLAS threads, set before numpy loads: OpenBLAS reads the variable once, at load.

The parent's one BLAS user is each case's float64 truth (two matmuls), computed on a thread while the GPU child
starts and compiles. OpenBLAS's default, a thread per core that spins between calls, held a cold grade's child
back on a 16-core H100 host: its CUDA start took 0.21–0.24 s instead of 0.10 s (bench/grade_time.py). A few
threads still compute the truths before the first output is judged, and they are kept in the cache after.
At most one per core; set only where the user has not set it; children get their own (sandbox.ONE_BLAS_THREAD).
"""
import os

PARENT_BLAS_THREADS = str(min(4, os.cpu_count() or 1))  # never more threads than cores

for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, PARENT_BLAS_THREADS)
