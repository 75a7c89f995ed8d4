"""One child run of a submission's cases: the job built from the config and the kernel contract, the child
started in its sandbox on its engine (the GPU child or the CPU emulator's driver), its events read into a
RunEvents; only the parent writes what they say into the result."""
from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from ..cases import Case, sample_seed, whole_truths
from ..config import Config
from ..contract import KernelContract
from ..intake.submission import Submission
from ..judge.input_records import CACHED
from ..judge.printed import kernel_output
from ..judge.warming import Warming
from ..leftovers import GRADE, owned_folder, owned_scratch, removed_soon
from ..plan import CPU, GPU, RunPlan, placement_of, sandbox_of
from ..result import SubmissionResult
from ..source.before_compile import with_headers_after
from ..source.device_side import device_side
from ..source.signature import role_names
from ..source.tile_size import tile_constant
from .confine.sandbox import Sandbox
from .cpu.build_ahead import BuildAhead
from .cpu.compiler import compiler
from .cpu.evidence import Program
from .cpu.instrument import sites_of
from .cpu.sampling import BlockSample, Tile
from .hang_notices import GpuHangs
from .job import CaseSpec, Job, TimingSpec
from .nvcc.compile import prepare_source, reference_module_source
from .runner import ChildProgram, Limits, run_job

if TYPE_CHECKING:
    from ..run_events import RunEvents


def run_child(submission: Submission, config: Config, cases: list[Case], backend: str, plan: RunPlan,
              on_compiled: Callable[[str], None] | None = None,
              extra_tiles: dict[str, tuple[Tile, ...]] | None = None,
              built_ahead: BuildAhead | None = None, gpu_hangs: GpuHangs | None = None) -> RunEvents:
    """Runs the cases in a child process of the backend's kind; the parent only reads its events. `on_compiled`
    hears the GPU's architecture once the child compiled for it (the reference's figures are made meanwhile);
    `extra_tiles`: tiles a CPU run of a sampled case runs beside its sample (where the GPU found wrong elements);
    `built_ahead`: the emulator's build, started already (emulation_built_soon); else it starts with the child.
    `gpu_hangs` (hang_notices.py): a GPU run tells there each case it hung in; the emulator's run beside it hears
    them, and tells there what it found in each case (a GPU run leaves out after a hang what it stopped for a
    divergent barrier)."""
    samples = block_samples(cases, config, extra_tiles or {}) if backend == CPU else {}
    workdir = str(owned_folder(GRADE))  # named for this process: a later start clears it if we die unclean
    os.chmod(workdir, 0o711)  # the sandbox uid must reach its own folder inside; nobody may list it
    sandbox = sandbox_of(plan)
    # The judge ready when the first outputs are, and every case's inputs stored for the next grades
    warming = Warming(whole_truths(cases, backend == GPU), config, inputs=cases)
    device = device_side(submission.source, submission.headers)  # what the emulator builds, its sites numbered
    try:
        job = job_of(submission, device, config, cases, workdir, sandbox, timed=backend == GPU,
                     emulator_workers=plan.emulator_workers, samples=samples)
        limits = Limits(startup_s=config.timeouts.compile_s, compile_s=config.timeouts.compile_s,
                        run_s=config.timeouts.run_s, max_restarts=config.timeouts.max_restarts,
                        case_s=config.timeouts.gpu_hang_s if backend == GPU else None)
        program = ChildProgram.cpu_driver() if backend == CPU else ChildProgram.gpu_child(sandbox)
        placement = placement_of(plan, config)
        started = plan.early.take(program, placement) if plan.early is not None else None  # waiting for this job
        left_out = gpu_hangs.left_out_after_hang if backend == GPU and gpu_hangs is not None else None
        events = run_job(job, limits, lambda: run.timing_turn(), program, placement, built_ahead, started,
                         gpu_hangs if backend == CPU else None, left_out)
        _imported_meanwhile(backend == GPU)
        first = next(events)  # the child has started meanwhile, and the judge's import with it (warming.py)
        run = _run_events(config, cases, Path(workdir), timed=job.timing is not None, backend=backend,
                          submission=submission, device=device, samples=samples)
        for event in itertools.chain([first], events):
            if event["event"] == "compiled" and on_compiled is not None:
                on_compiled(event["arch"])
            if event["event"] == "timeout" and event["phase"] == "case" and backend == GPU and gpu_hangs is not None:
                gpu_hangs.hung(event["case"], event["limit_s"])
            if backend == CPU and gpu_hangs is not None:
                _tell_verdict(gpu_hangs, event)
            run.handle(event)
        return run
    finally:
        warming.stop()
        removed_soon(workdir)


def _tell_verdict(board: GpuHangs, event: dict) -> None:
    """An emulated case's verdict, for the GPU run beside it: what stopped it, or "" where it ran to the end."""
    if event["event"] == "case":
        board.emulated(event["case"], "")
    elif event["event"] == "case_error":
        board.emulated(event["case"], event["problem"]["event"])
    elif event["event"] in ("timeout", "crash") and event.get("phase") == "case" and event.get("case"):
        board.emulated(event["case"], event["event"])


# What the parent imports once its child has spoken: the judge (run_events.py), and on a GPU run NVML's module,
# which the timing's clock watch opens as the child says it compiled (runner.py, _open_clocks_early)
JUDGE_MODULE = f"{__package__.rpartition('.')[0]}.run_events"
NVML_MODULE = "pynvml"


def _imported_meanwhile(gpu: bool) -> None:
    """Those imports, on a thread while this one waits for the child's first event: made after it, they fell on
    the way from the child's "compiled" to the answer to its request for the cases' turn, a wait a patched GPU
    child measured at 0.1-0.2 s of a warm grade on an H200."""
    def load() -> None:
        for name in (JUDGE_MODULE, *([NVML_MODULE] if gpu else [])):
            try:
                import_module(name)
            except ImportError:
                pass  # no NVML here: the clock watch says so when it opens
    threading.Thread(target=load, daemon=True, name="judge-import").start()


@contextmanager
def emulation_built_soon(submission: Submission, config: Config, plan: RunPlan) -> Iterator[BuildAhead | None]:
    """The emulator's build of the submission started now, as its driver's own (build_ahead.py), for the CPU run
    that follows (run_child's `built_ahead`): a CPU grade's nvcc check runs meanwhile. Stopped at the end, where
    nobody took it; None where there is no C++ compiler."""
    if compiler() is None:
        yield None
        return
    with owned_scratch(GRADE) as folder:
        os.chmod(folder, 0o711)  # the sandbox's uid must reach the build's folder inside
        try:
            job = job_of(submission, submission.source, config, [], str(folder), sandbox_of(plan), timed=False)
            ahead = BuildAhead.start(job, config.timeouts.compile_s, folder)
        except Exception:  # noqa: BLE001 - never the grade's failure: the driver builds it, and says what is wrong
            ahead = None
        try:
            yield ahead
        finally:
            if ahead is not None:
                ahead.stop()


def take_run(result: SubmissionResult, run: RunEvents) -> None:
    """What the child's run says of the submission as a whole: device, tile, log, what the kernel printed and
    the outcome."""
    result.device, result.tile_size, result.log = run.device, run.tile_size, run.log
    result.printed = kernel_output(run.log)
    result.outcome = run.outcome
    run.compile_check.metrics["turn_wait_s"] = round(run.waited_s, 3)  # the instructor's figure: not its time
    run.compile_check.metrics["turn_held_s"] = {kind: round(s, 3) for kind, s in run.held_s.items()}
    # How many cases the child ran on A and B read from the cache rather than generated (judge/input_files.py)
    run.compile_check.metrics["cached_inputs"] = sum(origin == CACHED for origin in run.inputs_from.values())
    if run.grader_error:
        result.message = run.grader_error


def _run_events(config: Config, cases: list[Case], workdir: Path, timed: bool, backend: str,
                submission: Submission, device: str, samples: dict[str, BlockSample]) -> RunEvents:
    from ..run_events import RunEvents  # the judge, numpy among it: imported once the child has started

    program = _emulated_program(submission, device, config.kernel.contract()) if backend == CPU else None
    return RunEvents(config, cases, workdir, timed=timed,
                     child="the CPU emulation process" if backend == CPU else "the GPU process", program=program,
                     samples=samples)


def _emulated_program(submission: Submission, device: str, contract: KernelContract) -> Program:
    """What the CPU emulator's reports refer to: the sites instrument.py numbers in the device side it builds
    (`device`), the kernel's names for the lab's matrices and sizes, and what the launch's x runs over."""
    return Program(sites_of(device), names=tuple(role_names(submission.source, contract)), x=contract.x)


def block_samples(cases: list[Case], config: Config,
                  extra_tiles: dict[str, tuple[Tile, ...]]) -> dict[str, BlockSample]:
    """How the CPU emulator samples each case it runs by blocks (the large ones): every edge block,
    `sampling.interior_blocks` interior ones drawn by a seed from the case's (secret-mixed) seed, and the extra
    tiles asked for."""
    return {case.name: BlockSample(sample_seed(case), config.sampling.interior_blocks,
                                   extra_tiles.get(case.name, ())) for case in cases if case.sampled}


def job_of(submission: Submission, device: str, config: Config, cases: list[Case], workdir: str, sandbox: Sandbox,
           timed: bool, emulator_workers: int = 0, samples: dict[str, BlockSample] | None = None) -> Job:
    """The child's job; `device`: the submission's device side (device_side.py); `samples`: the cases a CPU run
    runs by sampled blocks (the GPU child runs every case whole)."""
    samples = samples or {}
    reference = config.reference_path.read_text(encoding="utf-8")
    t = config.timing
    contract = config.kernel.contract()
    tile = contract.tile_source(tile_constant(with_headers_after(submission), contract.name))
    return Job(
        student_source=prepare_source(submission.source, tile=tile),
        reference_source=reference_module_source(reference),
        contract=contract, options=config.compile.options, cache_dir=str(config.cache_dir), workdir=workdir,
        cases=[CaseSpec(c.name, c.m, c.n, c.k, c.seed, c.distribution,
                        samples[c.name].to_wire() if c.name in samples else None) for c in cases],
        timing=TimingSpec(t.m, t.n, t.k, t.seed, t.warmup, t.repetitions,
                          config.tolerance.k_factor, config.tolerance.abs) if timed else None,
        original_source=submission.source,
        device_side_source=(prepare_source(device, tile=tile)
                            if device != submission.source else ""),
        tile_constant=tile.constant, launches_per_case=config.kernel.launches_per_case, headers=submission.headers,
        sandbox=asdict(sandbox), access_profile=profiled(config) and not timed, reference_original=reference,
        parallel_cases=emulator_workers,
    )


def profiled(config: Config) -> bool:
    """Whether a run on the emulator profiles the kernel and the reference: for advice, or for the speed model."""
    return config.feedback.emulator or config.timing.without_gpu == "model"
