"""The GPU child: compiles one submission and the reference, runs the cases, times them.

Runs as `python -m grader.execute.gpu.child JOB_FILE EVENT_FD CONTROL_FD` in a process of its own; the only code that
touches CUDA. It reads JOB_FILE only once the parent says on CONTROL_FD that it is written (protocol.await_job).
After any CUDA error it reports and exits: a fault poisons the context for good.
"""
# ruff: noqa: E402 - run as the GPU child, CUDA starts initialising before the imports below (EarlyInit)
from __future__ import annotations

import ctypes
import threading
import time

CU_CTX_SCHED_BLOCKING_SYNC = 0x04  # cuda.h: a wait for the GPU blocks on a sync primitive


class EarlyInit:
    """CUDA started in a thread of its own, begun before this module's other imports when it runs as the GPU
    child: cuInit and the device's primary context (hundreds of milliseconds each on a large GPU) overlap the
    imports of numpy and pycuda, since ctypes lets go of the interpreter while the driver works. pycuda's own
    init() then finds CUDA started, and retaining the primary context finds it made."""

    def __init__(self):
        self.init_s = self.context_s = 0.0
        self.initialised = threading.Event()  # cuInit returned (or could not be called)
        self.thread = threading.Thread(target=self._start, daemon=True, name="cuda-start")
        self.thread.start()

    def _start(self) -> None:
        started = time.perf_counter()
        try:
            driver = ctypes.CDLL("libcuda.so.1")
            failed = driver.cuInit(0)
            self.init_s = time.perf_counter() - started
            self.initialised.set()
            device, context = ctypes.c_int(), ctypes.c_void_p()
            if not failed and not driver.cuDeviceGet(ctypes.byref(device), 0):
                started = time.perf_counter()
                # A wait for the GPU sleeps instead of spinning a core: in a batch the cores are the emulator's
                # and the compilers'. Timing is read from CUDA events, on the GPU's clock, so it is unchanged.
                driver.cuDevicePrimaryCtxSetFlags(device, CU_CTX_SCHED_BLOCKING_SYNC)
                driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)  # held until the process ends
                self.context_s = time.perf_counter() - started
        except (OSError, AttributeError):
            pass  # no driver to load: pycuda's init() says so, as it would have
        finally:
            self.initialised.set()

    def wait_for_init(self) -> None:
        self.initialised.wait()

    def wait(self) -> None:
        self.thread.join()


EARLY = EarlyInit() if __name__ == "__main__" else None

import os
import resource
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ...contract import REFERENCE, KernelContract
from ...judge.input_files import child_inputs
from ...judge.input_records import CACHED, GENERATED
from ...judge.layout import GUARD_BEFORE, POISON_BITS, guard_after, guarded_layout, guarded_size
from ...judge.tolerance import uniform_bound
from ..confine.proc import BACKGROUND_NICE, die_with_parent
from ..job import CaseSpec, Job, TimingSpec, student_output
from ..nvcc.compile import (
    COUNT_KERNEL,
    DIFFER_KERNEL,
    FILL_KERNEL,
    NO_EXTERN_C,
    POISON_SHARED_KERNEL,
    TILE_PROBE_SYMBOL,
    TOUCH_KERNEL,
    cubin_key,
    student_compile_message,
)
from ..nvcc.cubin_cache import BUILT, GRADED, OFFERED
from ..nvcc.kernel_params import kernel_symbol, parameter_problem
from ..protocol import Channel, await_job
from .late_warps import OFF, PRINTS, SKEW_SYMBOL, skew_for

cuda = None  # pycuda.driver, imported in main() so that importing this module needs no GPU




class KernelFault(Exception):
    """A CUDA error during a launch: the context is unusable from here on."""


def main(argv: list[str]) -> int:
    die_with_parent()
    global cuda
    import pycuda.driver as cuda_driver

    cuda = cuda_driver
    # Started before its job may be ready (spawn.py): imported, CUDA starting in EarlyInit's thread, it waits
    await_job(int(argv[3]))
    job, channel = Job.load(Path(argv[1]), forget=True), Channel(int(argv[2]))
    control = os.fdopen(int(argv[3]), "r")
    channel.send("phase", phase="startup")
    with ThreadPoolExecutor(4) as pool:  # two compiles ahead (on a hint), the toolchain, two compiles
        # A cold grade's compiles need only the GPU's architecture: with the last child's (the hint) they
        # start now, while CUDA initialises; they are kept only if this GPU's toolchain turns out the same.
        # Where the parent builds them (compile_ahead.py), its toolchain answer brings them.
        ahead = pool.submit(Worker.compile_ahead, job, pool) if job.toolchain_hint and not job.parent_compiles else None
        if EARLY is not None:
            EARLY.wait_for_init()
        started = time.perf_counter()
        cuda.init()
        init_s = time.perf_counter() - started + (EARLY.init_s if EARLY is not None else 0.0)
        device = cuda.Device(0)
        worker = Worker(job, channel, device, control)
        worker.init_s = init_s
        # Nothing before the modules load needs a context: nvcc's version, the parent's offer of cached
        # cubins and both compiles go on while the driver makes it, where EarlyInit has not.
        compiled = pool.submit(worker.compile_both, pool, ahead)
        started = time.perf_counter()
        if EARLY is not None:
            EARLY.wait()  # the primary context made (one retain at a time)
        context = device.retain_primary_context()  # made by EarlyInit already, where it ran
        context.push()
        worker.context_s = max(time.perf_counter() - started, EARLY.context_s if EARLY is not None else 0.0)
        cubins = compiled.result()
    if cubins is None:
        context.pop()
        return 1
    try:
        worker.run(cubins)
    except KernelFault as fault:
        channel.send("fault", error=str(fault))
        flush_output()
        os._exit(0)  # skip context teardown: after a fault it can hang or abort
    context.pop()
    channel.send("done")
    # Nothing is left to say, and the parent waits for this process to end: the driver frees the context as
    # the process exits, without the interpreter's and pycuda's own teardown first.
    flush_output()
    os._exit(0)


def flush_output() -> None:
    """What the kernels printed (the driver writes it through the C library's buffered stdout) and Python's
    own output, into the log before os._exit, which flushes neither."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass  # no C library to ask: what it buffered is lost, as a crash would lose it


class Worker:
    def __init__(self, job: Job, channel: Channel | None, device, control):
        self.job, self.channel, self.device, self.control = job, channel, device, control
        self.arch = "sm_%d%d" % device.compute_capability() if device is not None else ""
        self.nvcc_version = ""
        self.student_compiled = ""  # the text whose cubin is the student's: the whole file or its device side
        self.host_code_left_out = False
        self.keys: dict[str, str] = {}  # source -> its cache key, so the parent can find the student's cubin
        self.stale_shared: StaleShared | None = None
        self.differences: Differences | None = None
        self.context_s = 0.0  # how long the driver took to make the context (the instructor's figure)
        self.init_s = 0.0  # and to initialise CUDA (cuInit)
        self.student: bytes | str = b""  # what compile_ahead compiled (a cubin, or the compiler's message)
        self.reference: bytes | str = b""
        self.compile_s: dict[str, float] = {}  # per source, how long its cubin took (offered or compiled)
        self.compiled_ahead = False  # both cubins came from compile_ahead (the toolchain hint was right)
        self.printed = False  # the kernel's printf has had its one launch (late_warps.PRINTS)
        # Each case's outputs written and its event sent on a thread of their own, in case order, while the turn
        # goes on to the next case's launches: written in the turn's own thread they were a quarter of it.
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="outputs")
        self.writing: list[Future] = []

    def run(self, cubins: dict[str, bytes | str]) -> None:
        try:
            self._run(cubins)
        finally:
            self.written()  # every case told before anything after it (a fault, the end)

    def written(self) -> None:
        """Every case's outputs written and its event sent (a write's error raised here, as it would have been)."""
        writing, self.writing = self.writing, []
        for future in writing:
            future.result()

    def _run(self, cubins: dict[str, bytes | str]) -> None:
        loaded = self.load_modules(cubins)
        if loaded is None:
            return
        student, reference = loaded
        # Host work and device memory before the turn: every other child waits while this one holds the GPU.
        inputs = [(spec, *child_inputs(spec.inputs, spec.m, spec.n, spec.k, spec.seed, spec.distribution))
                  for spec in self.job.cases]
        timing_memory = TimingMemory(self.job.timing, self.device) if self.job.timing else None
        if inputs:
            case_memory = CaseMemory(inputs, self.job.launches_per_case)
            if not self.turn("await_device"):  # one turn for all the cases
                return
            for spec, a, b, cached in inputs:
                self.channel.send("phase", phase="case", case=spec.name)
                self.run_case(spec, a, b, student, reference, case_memory, cached)
            student.late_warps(OFF)  # timing measures the kernel as the GPU schedules it
            self.written()  # the parent judges every case before it gives a timing turn
        while timing_memory is not None:
            # Only the parent judges correctness, so it decides whether timing (or timing again) is worth it.
            repetitions = self.turn("await_timing")
            if not repetitions:
                return
            self.channel.send("phase", phase="timing")
            self.channel.send("timing", **self.time_kernels(self.job.timing, repetitions, student, reference,
                                                            timing_memory))

    def turn(self, request: str) -> int:
        """Ask the parent for a turn on the GPU and wait: "go" (with the repetitions to time) or "skip"."""
        self.channel.send(request)
        answer = self.control.readline().split()
        if not answer or answer[0] != "go":
            return 0
        return int(answer[1]) if len(answer) > 1 else 1

    # -- compile -------------------------------------------------------------------------------

    def compile_both(self, pool: ThreadPoolExecutor, ahead: Future | None = None) -> dict[str, bytes | str] | None:
        """The student's and the reference's cubins, compiled side by side once the parent (which keeps the
        compile cache) has put this job's cached ones in our folder; None if the parent is gone. Those
        compiled ahead with the toolchain hint are taken where this GPU's toolchain is the hint's."""
        from pycuda.compiler import get_nvcc_version

        self.nvcc_version = get_nvcc_version("nvcc")
        self.channel.send("toolchain", arch=self.arch, nvcc=self.nvcc_version)
        if self.control.readline().strip() != "ready":
            return None
        self.channel.send("phase", phase="compile")
        if ahead is not None and [self.arch, self.nvcc_version] == self.job.toolchain_hint:
            early = ahead.result()
            self.adopt(early)
            self.compiled_ahead = True
            return {"student": early.student, "reference": early.reference}
        student = pool.submit(self.compile_student)
        reference = self.compile(self.job.reference_source)
        return {"student": student.result(), "reference": reference}

    @staticmethod
    def compile_ahead(job: Job, pool: ThreadPoolExecutor) -> Worker:
        """Both cubins for the hinted architecture and nvcc, before CUDA is up: a Worker of its own, with no
        device, whose results and figures compile_both adopts when the hint was right."""
        early = Worker(job, None, None, None)
        early.arch, early.nvcc_version = job.toolchain_hint
        student = pool.submit(early.compile_student)
        early.reference = early.compile(job.reference_source)
        early.student = student.result()
        return early

    def adopt(self, early: Worker) -> None:
        """What compile_ahead compiled, as if compiled here."""
        self.student_compiled, self.host_code_left_out = early.student_compiled, early.host_code_left_out
        self.keys.update(early.keys)
        self.compile_s.update(early.compile_s)

    def load_modules(self, cubins: dict[str, bytes | str]):
        for who in ("reference", "student"):
            if isinstance(cubins[who], str):
                self.channel.send("compile_error", target=who, message=cubins[who])
                return None
        declared = parameter_problem(cubins["student"], self.job.contract)
        if declared:  # launched as the lab launches it, the kernel would read the wrong bytes
            self.channel.send("compile_error", target="student", message=declared, mismatch=True)
            return None
        kernels = {}
        for who, cubin in cubins.items():
            # The reference is the grader's own kernel, launched through its own fixed signature whatever
            # parameter order the lab gives the student's.
            kernel = Kernel.load(cubin, REFERENCE if who == "reference" else self.job.contract)
            if isinstance(kernel, str):
                self.channel.send("kernel_missing", target=who, message=kernel)
                return None
            kernels[who] = kernel
        # The module graded, for the parent to keep whatever the cache keeps: the sanitizer's launch uses it.
        _write_atomically(Path(self.job.workdir, GRADED), cubins["student"])
        self.channel.send("compiled", device=self.device.name(), arch=self.arch, cpu_s=cpu_seconds(),
                          pci_bus_id=self.device.pci_bus_id(), context_s=round(self.context_s, 4),
                          init_s=round(self.init_s, 4),
                          student_compile_s=round(self.compile_s.get(self.student_compiled, 0.0), 4),
                          reference_compile_s=round(self.compile_s.get(self.job.reference_source, 0.0), 4),
                          compiled_ahead=self.compiled_ahead,
                          tile_size=kernels["student"].tile, reference_tile=kernels["reference"].tile,
                          host_code_left_out=self.host_code_left_out,
                          cubins={"student": self.keys.get(self.student_compiled, "")})
        if kernels["student"].tile not in self.job.contract.tile_sizes or not kernels["reference"].tile:
            return None  # the parent explains why nothing runs
        self.stale_shared = StaleShared(kernels["reference"].module, self.device)
        self.differences = Differences(kernels["reference"].module, self.job.launches_per_case)
        return kernels["student"], kernels["reference"]

    def compile_student(self) -> bytes | str:
        """The whole file, as SourceModule compiles it; failing that, its device side alone."""
        self.student_compiled = self.job.student_source
        cubin = self.compile(self.job.student_source)
        if isinstance(cubin, str) and self.job.device_side_source:
            fallback = self.compile(self.job.device_side_source)
            if not isinstance(fallback, str):
                self.host_code_left_out = True
                self.student_compiled = self.job.device_side_source
                return fallback
        return cubin

    def compile(self, source: str) -> bytes | str:
        """A cubin, or the compiler's message for the student. The parent offered the cached ones in our
        folder; what is compiled here is left for it to keep."""
        started = time.perf_counter()
        try:
            return self._compile(source)
        finally:
            self.compile_s[source] = self.compile_s.get(source, 0.0) + time.perf_counter() - started

    def _compile(self, source: str) -> bytes | str:
        from pycuda.compiler import compile as pycuda_compile

        in_background()  # nvcc holds no turn on the GPU: a child that holds one gets the CPUs first
        headers = self.job.headers if source != self.job.reference_source else {}
        key = cubin_key(source, self.job.options, self.arch, self.nvcc_version, headers)
        self.keys[source] = key
        offered = Path(self.job.workdir, OFFERED, key + ".cubin")
        if offered.is_file():
            return offered.read_bytes()
        folder = self.handed_in_folder()
        try:
            # The function SourceModule itself calls, with the text's own linkage (compile.py), its nvcc flags;
            # the headers handed in with the file where its `#include "name"` finds them.
            cubin = pycuda_compile(source, options=list(self.job.options), arch=self.arch, cache_dir=False,
                                   no_extern_c=NO_EXTERN_C, include_dirs=[folder] if headers else [])
        except cuda.CompileError as err:
            log = f"{err.stdout or ''}{err.stderr or ''}".replace(folder + "/", "")  # `tiling.cuh(5): error`
            return student_compile_message(log, self.job.original_source)
        _write_atomically(Path(self.job.workdir, BUILT, key + ".cubin"), cubin)
        return cubin

    def handed_in_folder(self) -> str:
        """The folder holding the headers handed in with the student's file (written once, by this child)."""
        folder = Path(self.job.workdir, HANDED_IN)
        if self.job.headers and not folder.is_dir():
            folder.mkdir()
            for name, text in self.job.headers.items():
                Path(folder, name).write_text(text, encoding="utf-8")
        return str(folder)

    # -- cases ---------------------------------------------------------------------------------

    def run_case(self, spec: CaseSpec, a: np.ndarray, b: np.ndarray, student: Kernel, reference: Kernel,
                 memory: CaseMemory, cached: bool) -> None:
        """The student's kernel first, `launches_per_case` times on the same inputs, each on poisoned C and
        poisoned shared memory, the launches after the first with late warps (late_warps.py: a race shows
        every time); then the reference: its output is never in GPU memory while student code runs. Each
        distinct output the student's launches gave is kept for the parent to judge.

        The GPU itself tells whether a launch changed A or B (against pristine copies, from which every
        launch and the reference get them back) and whether C differs from the first launch's, so only
        outputs that differ cross back as well as the first. A and B crossed from the host before the turn;
        C's poisoned image is made on the GPU. Everything is queued at once, the first output and the
        reference's copied into page-locked memory, and the case waits for the GPU once: each wait is a
        round trip through the host, whose CPUs in a batch are the emulators' and the compilers'."""
        launches, words = self.job.launches_per_case, guarded_size(spec.m, spec.n)
        pristine_a, pristine_b = memory.pristine[spec.name]
        first_landing, reference_landing = memory.landing[spec.name]
        memory.poison_image(spec.m, spec.n)
        self.differences.clear()
        for launch in range(launches):
            memory.restore_inputs(spec.name, a, b)  # as the case made them, whatever the last launch stored
            memory.poison_past_inputs(a, b)
            guarded(cuda.memcpy_dtod, memory.c, memory.poisoned, 4 * words)
            self.stale_shared.warm((memory.a, a.size), (memory.b, b.size), (memory.c, words))
            # each block poisons its own shared memory at entry; printf prints in the grade's first launch only
            student.late_warps(skew_for(launch, prints=launch == 0 and not self.printed))
            self.printed = True
            start, stop = memory.events[launch]
            guarded(start.record)
            student.launch(spec.m, spec.n, spec.k, memory.a, memory.b, memory.c + GUARD_BEFORE * 4)
            guarded(stop.record)
            pairs = [(memory.a, pristine_a, a.size), (memory.b, pristine_b, b.size)]
            self.differences.count(launch, *pairs, *([(memory.c, memory.first, words)] if launch else []))
            guarded(cuda.memcpy_dtod, memory.outputs[launch], memory.c, 4 * words)
        guarded(cuda.memcpy_dtoh_async, first_landing, memory.first)
        memory.restore_inputs(spec.name, a, b)
        reference.launch(spec.m, spec.n, spec.k, memory.a, memory.b, memory.reference)
        guarded(cuda.memcpy_dtoh_async, reference_landing, memory.reference)
        synchronize()  # the case's one wait: a fault or a hang in any of its launches shows here
        changed = self.differences.read()
        outputs = [first_landing]
        for launch in range(1, launches):
            if changed[launch][2]:  # rare (a race, a launch that reads C): compared here, kept if new
                c_host = download(memory.outputs[launch], first_landing)
                if not any(np.array_equal(c_host.view(np.uint32), seen.view(np.uint32)) for seen in outputs):
                    outputs.append(c_host)
        seconds = min(guarded(stop.time_since, start) for start, stop in memory.events[:launches]) / 1000
        told = dict(case=spec.name, seconds=seconds, a_changed=any(count[0] for count in changed),
                    b_changed=any(count[1] for count in changed), launches=launches, distinct_outputs=len(outputs),
                    inputs=CACHED if cached else GENERATED)
        self.writing.append(self.writer.submit(self._tell_case, spec, outputs, reference_landing, told))

    def _tell_case(self, spec: CaseSpec, outputs: list[np.ndarray], ref_out: np.ndarray, told: dict) -> None:
        """A case's outputs in its files, then its event: the parent reads the files when the event comes."""
        for index, output in enumerate(outputs):
            np.save(self.job.output_path(spec.name, student_output(index)), output)
        np.save(self.job.output_path(spec.name, "reference"), ref_out)
        self.channel.send("case", **told)

    # -- timing --------------------------------------------------------------------------------

    def time_kernels(self, spec: TimingSpec, repetitions: int, student: Kernel, reference: Kernel,
                     memory: TimingMemory) -> dict:
        """CUDA-event timing with an L2 flush before every launch, the student's kernel then the reference's.

        Every repetition gets fresh A and B (filled on the GPU from a new seed), and the student's output is
        compared on the GPU with the reference's on the same inputs (a count of far elements, read back
        before the next launch, so no later student launch can change it). C is poisoned before every
        launch and the reference's output before every student launch: no output of an earlier launch (and
        no expected value) is in GPU memory while student code runs. Nothing large crosses to the host, so
        the GPU is held for the launches alone.
        """
        m, n, k = spec.m, spec.n, spec.k
        phase_started = time.perf_counter()
        bound = np.float32(uniform_bound(k, spec.k_factor, spec.abs_tol))
        fill = reference.module.get_function(FILL_KERNEL)
        count_far = reference.module.get_function(COUNT_KERNEL)
        d_a, d_b, d_c, d_ref, d_far = memory.a, memory.b, memory.c, memory.reference, memory.far
        flush, flush_words, far_host, start, stop = (memory.flush, memory.flush_words, memory.far_host,
                                                     memory.start, memory.stop)

        def on_grid(kernel, count: int, *args) -> None:
            guarded(lambda: kernel(*args, block=(256, 1, 1), grid=((count + 255) // 256, 1)))

        def refill(rep: int) -> None:
            for pointer, count, salt in ((d_a, m * k, 0x51ED), (d_b, k * n, 0xB0B)):
                seed = np.uint32((spec.seed * 1_000_003 + rep * 7919 + salt) & 0xFFFFFFFF)
                on_grid(fill, count, pointer, np.uint32(count), seed)

        def launch(kernel: Kernel, rep: int, out) -> float:
            guarded(cuda.memset_d32, flush, rep, flush_words)
            guarded(cuda.memset_d32, out, POISON_BITS, m * n)
            self.stale_shared.poison()
            start.record()
            kernel.launch(m, n, k, int(d_a), int(d_b), int(out))
            stop.record()
            guarded(stop.synchronize)
            return stop.time_since(start)

        def far_elements() -> int:
            guarded(cuda.memset_d32, d_far, 0, 1)
            on_grid(count_far, m * n, d_c, d_ref, np.uint32(m * n), bound, d_far)
            guarded(cuda.memcpy_dtoh, far_host, d_far)
            return int(far_host[0])

        wrong, first_wrong, times = 0, None, {"student": [], "reference": []}
        total = spec.warmup + repetitions
        for rep in range(total):
            refill(rep)
            guarded(cuda.memset_d32, d_ref, POISON_BITS, m * n)
            student_ms, reference_ms = launch(student, rep, d_c), launch(reference, rep, d_ref)
            if rep >= spec.warmup:
                times["student"].append(student_ms)
                times["reference"].append(reference_ms)
            if far_elements():
                wrong += 1
                first_wrong = rep + 1 if first_wrong is None else first_wrong
        return {"student_ms": times["student"], "reference_ms": times["reference"], "launches": total,
                "wrong_launches": wrong, "first_wrong_launch": first_wrong, "m": m, "n": n, "k": k,
                "phase_s": time.perf_counter() - phase_started, "peak_gflops": fp32_peak_gflops(self.device)}


class StaleShared:
    """The GPU's state before a student's launch, the same whatever ran before it (compile.py says why):
    before a timed launch, poison in every SM's shared memory, so that a tile read before it is written
    reads the same wrong value every time; before a case's launch, its buffers warm (the launch poisons its
    own shared memory: late_warps.py). The kernels are the grader's, in the reference's module."""

    PATIENCE_CYCLES = 20_000_000  # ~10 ms: all blocks are resident within microseconds on a GPU held alone

    def __init__(self, module, device):
        self.function = module.get_function(POISON_SHARED_KERNEL)
        attribute = cuda.device_attribute
        self.nbytes = device.get_attribute(attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        guarded(self.function.set_attribute, cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, self.nbytes)
        self.blocks = device.get_attribute(attribute.MULTIPROCESSOR_COUNT)
        self.arrived = guarded(cuda.mem_alloc, 4)
        self.touch = module.get_function(TOUCH_KERNEL)

    def warm(self, *buffers: tuple[int, int]) -> None:
        """Before a case's launch: read each (pointer, float count) buffer. A case's launches poison shared
        memory themselves, at the kernel's entry (late_warps.py)."""
        for pointer, count in buffers:
            guarded(lambda p=pointer, c=count: self.touch(np.uintp(p), np.uint32(c), self.arrived,
                                                          block=(256, 1, 1), grid=(self.blocks * 4, 1)))

    def poison(self) -> None:
        guarded(cuda.memset_d32, self.arrived, 0, 1)
        guarded(lambda: self.function(np.uint32(self.nbytes // 4), np.uint32(POISON_BITS), self.arrived,
                                      np.int64(self.PATIENCE_CYCLES), block=(1024, 1, 1), grid=(self.blocks, 1),
                                      shared=self.nbytes))


class Differences:
    """On the GPU, in how many words each pair of buffers differs, per launch of a case; read back with the
    case's other copies, after its one wait."""

    PAIRS = 3

    def __init__(self, module, launches: int):
        self.function = module.get_function(DIFFER_KERNEL)
        self.counts = guarded(cuda.mem_alloc, 4 * self.PAIRS * launches)
        self.host = cuda.pagelocked_zeros((launches, self.PAIRS), np.uint32)

    def clear(self) -> None:
        guarded(cuda.memset_d32, self.counts, 0, self.host.size)

    def count(self, launch: int, *pairs: tuple[int, int, int]) -> None:
        """Queue, for each (pointer, pointer, word count), the count of words that differ bit for bit."""
        for index, (x, y, words) in enumerate(pairs):
            counter = np.uintp(int(self.counts) + 4 * (self.PAIRS * launch + index))
            guarded(lambda x=x, y=y, words=words, counter=counter: self.function(
                np.uintp(int(x)), np.uintp(int(y)), np.uint32(words), counter,
                block=(256, 1, 1), grid=((words + 255) // 256, 1)))

    def read(self) -> list[list[int]]:
        """Each launch's counts, in the order its pairs were given (0 where it gave fewer)."""
        guarded(cuda.memcpy_dtoh, self.host, self.counts)
        return self.host.tolist()


def download(pointer, like: np.ndarray) -> np.ndarray:
    """A device buffer's words, in a new array shaped like `like`."""
    host = np.empty_like(like)
    guarded(cuda.memcpy_dtoh, host, pointer)
    return host


# Every value of the late-warps switch (each combination of late_warps.py's bits, PRINTS the highest), page-locked:
# a launch's switch is copied from a word of its own, queued in order with the launches, and no later launch's
# value overwrites it before it is read.
SWITCH_VALUES = 2 * PRINTS


class Kernel:
    """A loaded kernel with its tile size, launched as its contract says."""

    def __init__(self, module, function, tile: int | None, contract: KernelContract):
        self.module, self.function, self.tile, self.contract = module, function, tile, contract
        function.prepare("".join("i" if size == 4 else "P" for size in contract.argument_bytes))
        self.skew = module.get_global(SKEW_SYMBOL)[0]  # every module the grader compiles has one
        self.skew_now = OFF
        self.switch_values = cuda.pagelocked_empty(SWITCH_VALUES, np.uint32)
        self.switch_values[:] = np.arange(SWITCH_VALUES, dtype=np.uint32)

    def late_warps(self, skew: int) -> None:
        """How the kernel's next launches hold back warps (late_warps.py), queued before them."""
        if skew != self.skew_now:
            guarded(cuda.memcpy_htod_async, self.skew, self.switch_values[skew:skew + 1])
            self.skew_now = skew

    @classmethod
    def load(cls, cubin: bytes, contract: KernelContract) -> Kernel | str:
        """The contract's kernel, by its symbol in the cubin: mangled (C++ linkage) or plain (extern "C")."""
        module = guarded(cuda.module_from_buffer, cubin)
        try:
            function = module.get_function(kernel_symbol(cubin, contract))
        except cuda.LogicError:
            return f"kernel {contract.name} not found in the compiled module"
        return cls(module, function, _tile_size(module), contract)

    def launch(self, m: int, n: int, k: int, a: int, b: int, c: int) -> None:
        launch = self.contract.launch(m, n, self.tile)
        guarded(self.function.prepared_call, launch.grid, launch.block, *self.contract.arguments(m, n, k, a, b, c),
                shared_size=launch.shared_bytes)  # extern __shared__ arrays: contract.dynamic_shared_bytes


def _tile_size(module) -> int | None:
    try:
        pointer, _ = module.get_global(TILE_PROBE_SYMBOL)
    except cuda.LogicError:
        return None
    value = np.zeros(1, np.int32)
    guarded(cuda.memcpy_dtoh, value, pointer)
    return int(value[0])


class CaseMemory:
    """Device memory for every case of a turn, allocated before any turn at the largest case's sizes and
    kept until the child ends. An allocation waits on the driver, and while other processes allocate
    (compute-sanitizer's tools do, a lot), a turn that allocated per case took tens of times longer
    (bench/gpu_contention.py --allocate); allocating at the turn's start still tripled a batch's turns.
    Every case's A and B cross from the host here too, into pristine copies of their own, and the first
    output and the reference's get page-locked landing buffers: a pageable copy across the bus, either
    way, is a copy the turn waits for."""

    def __init__(self, inputs: list[tuple[CaseSpec, np.ndarray, np.ndarray, bool]], launches: int):
        cases = [spec for spec, *_ in inputs]
        # A and B are followed by poison: a load past either's end (a missing bound) reads NaN, whatever
        # lies there (zeros after the largest case's inputs made such a kernel right by luck).
        self.a_words = max(case.m * case.k + guard_after(case.k) for case in cases)
        self.b_words = max(case.k * case.n + guard_after(case.n) for case in cases)
        c_words = max(guarded_size(case.m, case.n) for case in cases)
        a_words, b_words = self.a_words, self.b_words
        pristine_words = sum(_aligned(a.size) + _aligned(b.size) for _, a, b, _ in inputs)
        self.allocations = allocate_words(a_words, b_words, pristine_words, c_words, c_words, c_words,
                                          *[c_words] * launches)
        (self.a, self.b, pristine, self.poisoned, self.c, self.reference,
         *self.outputs) = (int(allocation) for allocation in self.allocations)
        self.first = self.outputs[0]  # each launch's C is kept apart until the case's wait: the first's, here
        self.events = [(cuda.Event(), cuda.Event()) for _ in range(launches)]  # each launch's start and end
        self.pristine: dict[str, tuple[int, int]] = {}  # case -> its A's and B's pristine copies
        for spec, a, b, _ in inputs:
            b_at = pristine + 4 * _aligned(a.size)
            self.pristine[spec.name] = (pristine, b_at)
            guarded(cuda.memcpy_htod, pristine, a)
            guarded(cuda.memcpy_htod, b_at, b)
            pristine = b_at + 4 * _aligned(b.size)
        # case -> where its first output (C with its guard bands) and the reference's C land on the host
        self.landing = {spec.name: (cuda.pagelocked_empty(guarded_size(spec.m, spec.n), np.float32),
                                    cuda.pagelocked_empty((spec.m, spec.n), np.float32)) for spec in cases}

    def restore_inputs(self, case: str, a: np.ndarray, b: np.ndarray) -> None:
        """A and B as the case made them, from their pristine copies."""
        pristine_a, pristine_b = self.pristine[case]
        guarded(cuda.memcpy_dtod, self.a, pristine_a, a.nbytes)
        guarded(cuda.memcpy_dtod, self.b, pristine_b, b.nbytes)

    def poison_image(self, m: int, n: int) -> None:
        """C's image before a launch: guard bands around m×n poisoned elements (inputs.guarded_layout)."""
        for first, count, bits in guarded_layout(m, n):
            guarded(cuda.memset_d32, self.poisoned + 4 * first, bits, count)

    def poison_past_inputs(self, a: np.ndarray, b: np.ndarray) -> None:
        """Poison after the case's A and B, again before each launch (a launch may have stored there)."""
        guarded(cuda.memset_d32, self.a + a.nbytes, POISON_BITS, self.a_words - a.size)
        guarded(cuda.memset_d32, self.b + b.nbytes, POISON_BITS, self.b_words - b.size)


class TimingMemory:
    """What a measurement uses, made before its turn is asked for (CaseMemory says why)."""

    def __init__(self, spec: TimingSpec, device):
        m, n, k = spec.m, spec.n, spec.k
        l2_bytes = device.get_attribute(cuda.device_attribute.L2_CACHE_SIZE)
        self.flush_words = max(2 * l2_bytes, 1 << 20) // 4
        self.allocations = allocate_words(m * k, k * n, m * n, m * n, self.flush_words, 1)
        self.a, self.b, self.c, self.reference, self.flush, self.far = self.allocations
        self.far_host = cuda.pagelocked_zeros(1, np.uint32)
        # The host sleeps while it waits for the stop event (timing reads the events' GPU clock, not the host's)
        self.start, self.stop = (cuda.Event(cuda.event_flags.BLOCKING_SYNC) for _ in range(2))


def _aligned(words: int) -> int:
    """A buffer's words, rounded up so that the one after it starts on a 256-byte boundary, as an allocation does."""
    return -(-words // 64) * 64


def allocate_words(*counts: int) -> list:
    """Device buffers of these many 4-byte words each (at least one)."""
    return [guarded(cuda.mem_alloc, 4 * max(words, 1)) for words in counts]


# FP32 lanes per SM by compute capability (NVIDIA's tables); 128 from Ampere consumer parts on.
_FP32_LANES = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128}


def fp32_peak_gflops(device) -> float:
    attribute = cuda.device_attribute
    lanes = _FP32_LANES.get(device.compute_capability(), 128)
    clock_khz = device.get_attribute(attribute.CLOCK_RATE)
    return round(device.get_attribute(attribute.MULTIPROCESSOR_COUNT) * lanes * 2 * clock_khz / 1e6, 1)


def cpu_seconds() -> float:
    """CPU time of this child so far, nvcc's included: what a batch's compile stage costs."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(time.process_time() + children.ru_utime + children.ru_stime, 3)


HANDED_IN = "handed-in"  # in the child's folder: the student's headers


def in_background() -> None:
    """This thread, and the compilers it starts, at the background niceness (the main thread keeps its own)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except OSError:
        pass  # a priority is a courtesy to the batch, not a condition of grading


def synchronize() -> None:
    guarded(cuda.Context.synchronize)


def guarded(call, *args, **options):
    """Any CUDA error from here on is a fault of the submission's kernel (the reference is trusted)."""
    try:
        return call(*args, **options)
    except cuda.Error as err:
        raise KernelFault(str(err)) from None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
