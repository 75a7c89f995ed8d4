"""The grader's configuration (config.yaml), validated into dataclasses.

Relative paths in the file are resolved against the file's own folder, so the grader can be run
from anywhere.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from .contract import COLUMNS, KNOWN_ROLES, ROLES, ROWS, TILE_MACROS, WIDTH, KernelContract
from .errors import ConfigError
from .schema import build, load_yaml

MAX_KERNEL_ARGS = 16  # what the launchers (and the sanitizer's launch program) pass at most
PRESETS = Path(__file__).resolve().parent.parent / "presets"  # `grade --preset NAME`: presets/NAME.yaml
MAX_LAUNCHES_PER_CASE = 10
SEED_LIMIT = 2**32  # numpy's generators take seeds from 0 to 2**32 - 1
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config.yaml"


@dataclass
class LaunchConfig:
    # What the grid's x (threadIdx.x) runs over: C's columns (col = blockIdx.x * T + threadIdx.x, the
    # default), or its rows, where the lab's host launches row = blockIdx.x * T + threadIdx.x.
    x: str = COLUMNS

    def validate(self):
        if self.x not in (COLUMNS, ROWS):
            return "x", f"must be {COLUMNS} or {ROWS}, got {self.x!r}"
        return None


@dataclass
class KernelConfig:
    # The kernel's name, or several a lab accepts (ECE408: [matrixMultiplyShared, matrixMultiply]): the first
    # of them the file defines is graded.
    name: str | list[str] = "mysgemm"
    args: list[str] = field(default_factory=lambda: list(ROLES))
    tile_sizes: list[int] = field(default_factory=lambda: [8, 16, 32])
    tile_macros: list[str] = field(default_factory=lambda: list(TILE_MACROS))  # the tile size's names, in order
    # Blocks of block_size × block_size threads launch a kernel whose shared tiles give no size (an untiled
    # kernel, tiles sized by blockDim): it is graded on its values, and the static checks say what is missing.
    block_size: int = 16
    # Launches of the student's kernel per case on the GPU, on the same inputs: each must be right. A kernel
    # that races is right or wrong by its timing; one lucky launch must not decide its case.
    launches_per_case: int = 3
    launch: LaunchConfig = field(default_factory=LaunchConfig)

    def validate(self):
        # Roles, in the kernel's order: each matrix once; a size may come more than once under other names
        # (ECE408's numARows = m, numAColumns = k, numBRows = k, numBColumns = n, numCRows = m, numCColumns = n),
        # or a square lab's one size, width (m = n = k), in their place.
        unknown = [a for a in self.args if a not in KNOWN_ROLES]
        sizes = (all(role in self.args for role in "mnk") if WIDTH not in self.args
                 else not any(role in self.args for role in "mnk"))
        once = all(self.args.count(role) == 1 for role in "ABC") and sizes
        if unknown or not once or len(self.args) > MAX_KERNEL_ARGS:
            return "args", ("must list, in the kernel's order, each of A, B, C once and either each of m, n, k at "
                            f"least once (a size may repeat) or, for a square lab, {WIDTH} in their place; at most "
                            f"{MAX_KERNEL_ARGS} in all")
        if not self.tile_sizes or any(t < 1 or t > 32 for t in self.tile_sizes):
            return "tile_sizes", "must be a non-empty list of sizes from 1 to 32 (a block holds at most 1024 threads)"
        if self.block_size not in self.tile_sizes:
            return "block_size", f"must be one of tile_sizes ({', '.join(map(str, self.tile_sizes))})"
        if not self.tile_macros or not all(isinstance(m, str) and m.isidentifier() for m in self.tile_macros):
            return "tile_macros", "must be a non-empty list of macro names, e.g. [TILE_SIZE, TILE_WIDTH]"
        bad = [name for name in self.names if not name.isidentifier()]
        if bad or not self.names:
            return "name", (f"{bad[0]!r} is not a C identifier" if bad else "must name at least one kernel")
        if not 1 <= self.launches_per_case <= MAX_LAUNCHES_PER_CASE:
            return "launches_per_case", f"must be from 1 to {MAX_LAUNCHES_PER_CASE}"
        return None

    @property
    def names(self) -> tuple[str, ...]:
        """The kernel names the lab accepts, in order of preference."""
        return (self.name,) if isinstance(self.name, str) else tuple(self.name)

    @property
    def square(self) -> bool:
        return WIDTH in self.args

    def graded_name(self, kernels: list[str]) -> str:
        """The kernel a file is graded on: the first of the lab's names the file defines (else the first name,
        which the pipeline then reports as not found)."""
        return next((name for name in self.names if name in kernels), self.names[0])

    def contract(self) -> KernelContract:
        """The one description of the kernel every launcher and check reads (of several names, the first:
        Config.for_kernels decides a file's from its source, before anything compiles)."""
        return KernelContract(self.names[0], tuple(self.args), tuple(self.tile_sizes), tuple(self.tile_macros),
                              self.block_size, self.launch.x)


@dataclass
class StaticPoints:
    shared_tiles: float = 2.0
    load_barrier: float = 4.0
    use_barrier: float = 4.0


@dataclass
class PointsConfig:
    compile: float = 0.0
    static: StaticPoints = field(default_factory=StaticPoints)
    timing: float = 10.0
    # Whether the static checks' points count for code that does not compile (on every path: CLI, batch,
    # Gradescope, PrairieLearn). By default they do not: a barrier in code that does not build is no barrier.
    static_after_compile_error: bool = False

    def validate(self):
        values = {"compile": self.compile, "timing": self.timing, **vars(self.static)}
        for key, value in values.items():
            if value < 0:
                return (key if key in ("compile", "timing") else f"static.{key}"), "points cannot be negative"
        return None


@dataclass
class ToleranceConfig:
    # An element passes when |got - truth| <= k_factor * k * eps32 * (|A| @ |B|) + abs: the classic
    # bound for a length-k float32 dot product, so the tolerance grows with k as rounding error does.
    k_factor: float = 1.0
    abs: float = 1e-6

    def validate(self):
        if self.k_factor <= 0 or self.abs < 0:
            return "k_factor", "must be positive (and abs not negative)"
        return None


@dataclass
class SpeedModelConfig:
    """The GPU the speed model estimates times on where there is none (judge/speed_model.py), and how sure
    it must be. Defaults: an NVIDIA H200 (the H100 SXM's SMs and L2, HBM3e)."""

    gpu: str = "NVIDIA H200"
    arch: str = "sm_90"  # its compute capability, for occupancy
    sms: int = 132
    clock_ghz: float = 1.98
    fp32_tflops: float = 66.9
    shared_tbs: float = 33.4  # shared memory / L1: 128 bytes per clock per SM
    l2_tbs: float = 5.5
    dram_tbs: float = 4.8
    barrier_cycles: float = 60.0
    # An estimate decides only when it is clearly on one side: pass at or below max_ratio / margin, fail at or
    # above max_ratio × margin; between, the points are held for a GPU.
    margin: float = 1.6

    def validate(self):
        from .judge.occupancy import ARCHES

        if self.arch not in ARCHES:
            return "arch", f"unknown architecture {self.arch!r} (known: {', '.join(ARCHES)})"
        for key in ("sms", "clock_ghz", "fp32_tflops", "shared_tbs", "l2_tbs", "dram_tbs"):
            if getattr(self, key) <= 0:
                return key, "must be positive"
        if self.barrier_cycles < 0:
            return "barrier_cycles", "cannot be negative"
        if self.margin < 1:
            return "margin", "must be at least 1 (1: the estimate decides right at the limit)"
        return None


WITHOUT_GPU = ("model", "hold")


@dataclass
class TimingConfig:
    m: int = 2048
    n: int = 2048
    k: int = 2048
    seed: int = 2024
    warmup: int = 3
    repetitions: int = 15
    # Full timing points when student time / reference time <= max_ratio.
    max_ratio: float = 2.0
    # Faster than this fraction of the reference's time (or above the GPU's FP32 peak) is implausible for a
    # tiled kernel: the result is kept but flagged for the instructor to review.
    min_plausible_ratio: float = 0.25
    # Where there is no GPU: "model" decides timing by the speed model's estimate (held when too near the
    # limit), "hold" holds the points for a GPU.
    without_gpu: str = "model"
    model: SpeedModelConfig = field(default_factory=SpeedModelConfig)

    def validate(self):
        if self.without_gpu not in WITHOUT_GPU:
            return "without_gpu", f"must be one of {', '.join(WITHOUT_GPU)}, got {self.without_gpu!r}"
        if not 0 <= self.seed < SEED_LIMIT:
            return "seed", f"must be from 0 to {SEED_LIMIT - 1} (a numpy seed), got {self.seed}"
        for key in ("m", "n", "k", "repetitions"):
            if getattr(self, key) < 1:
                return key, "must be at least 1"
        if self.warmup < 0:
            return "warmup", "cannot be negative"
        if self.max_ratio <= 0:
            return "max_ratio", "must be positive"
        return None


@dataclass
class TimeoutsConfig:
    compile_s: float = 60.0
    run_s: float = 10.0
    # After a kernel fault the CUDA context is dead; a fresh child runs the remaining cases, this often.
    max_restarts: int = 2
    # Each compute-sanitizer tool, on its small shape (a deadlock never ends under it either).
    sanitizer_s: float = 15.0
    # Of which the launch itself: the GPU is held alone meanwhile, so this is what a hung kernel costs a
    # batch. Instrumented, a launch is slower (racecheck of a racy kernel: about 1.5 s on an H100).
    sanitizer_launch_s: float = 5.0
    # On the GPU, one case: its launches take milliseconds for a correct kernel, slow or not. The GPU is
    # held alone meanwhile, so this is what a hung kernel costs a batch, per case it hangs in.
    gpu_hang_s: float = 3.0

    def validate(self):
        for key in ("compile_s", "run_s", "sanitizer_s", "sanitizer_launch_s", "gpu_hang_s"):
            if getattr(self, key) <= 0:
                return key, "must be positive"
        if self.max_restarts < 0:
            return "max_restarts", "cannot be negative"
        return None


@dataclass
class CompileConfig:
    options: list[str] = field(default_factory=lambda: ["-lineinfo"])
    # Used only when no GPU tells us its architecture (--no-run compile checks, CI).
    arch_without_gpu: str = "sm_90"
    cache_dir: str = "~/.cache/sgemm-grader"
    # A header is allowed where it resolves: in the CUDA toolkit's or the C/C++ compiler's include folders
    # (include_policy.py). A list here narrows that to these names (e.g. [cuda_runtime.h, stdio.h]).
    allowed_headers: list[str] | None = None
    # Headers only a file's host code uses (libwb's wb.h, gputk.h): their #include lines are dropped, never
    # read, whatever folder the line names, and the host code goes with them.
    host_only_headers: list[str] = field(default_factory=list)
    # Files a student hands in beside kernel.cu that kernel.cu may #include "name" (none by default): every intake
    # reads them from beside the kernel (submission.read_headers), every compiler finds them beside it.
    handed_in_headers: list[str] = field(default_factory=list)

    def validate(self):
        plain = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
        for key in ("host_only_headers", "handed_in_headers", "allowed_headers"):
            if not all(isinstance(h, str) and plain.fullmatch(h) for h in getattr(self, key) or ()):
                return key, "must be plain header names such as wb.h (no folders)"
        return None


@dataclass
class FeedbackConfig:
    """How-to-make-it-faster advice (issue 26): worth no points."""

    # The lab's GPU for theoretical occupancy (sm_70 ... sm_100); "" means the GPU graded on, else
    # compile.arch_without_gpu.
    gpu: str = ""
    # On every grade (the emulator runs beside a GPU one too), the emulator's coalescing and bank-conflict figures
    # per line against the reference's
    # (one more launch of each, on one 64³ shape).
    emulator: bool = True

    def validate(self):
        from .judge.occupancy import ARCHES

        if self.gpu and self.gpu not in ARCHES:
            return "gpu", f"unknown architecture {self.gpu!r} (known: {', '.join(ARCHES)})"
        return None


@dataclass
class SamplingConfig:
    """How the CPU emulator runs a case too large to emulate whole (a case file's `cpu: sampled`, or a large one's
    default): every edge block, and this many interior blocks drawn by a seed only the grading secret decides."""

    interior_blocks: int = 16

    def validate(self):
        if self.interior_blocks < 0:
            return "interior_blocks", "cannot be negative"
        return None


@dataclass
class PrairieLearnConfig:
    # A submission that does not compile: false (default) makes it "gradable": false, so the attempt is not
    # counted; true makes it a graded 0.
    compile_error_graded: bool = False


@dataclass
class Config:
    kernel: KernelConfig = field(default_factory=KernelConfig)
    testcases: str = "testcases"
    reference: str = "reference/kernel.cu"
    points: PointsConfig = field(default_factory=PointsConfig)
    tolerance: ToleranceConfig = field(default_factory=ToleranceConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    prairielearn: PrairieLearnConfig = field(default_factory=PrairieLearnConfig)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    # Set by load_config: the file the values came from, for messages and relative paths (not a key of the file).
    source: str = field(default="", metadata={"derived": True})

    def validate(self):
        t = self.timing
        if self.kernel.square and not t.m == t.n == t.k:
            return "timing", (f"this lab's kernel takes one size ({WIDTH}: m = n = k), so its timing shape must be "
                              f"square; got m = {t.m}, n = {t.n}, k = {t.k}")
        return None

    def for_kernels(self, kernels: list[str]) -> Config:
        """This config for one file defining `kernels`: kernel.name is the one name it is graded on, decided
        here, once, from the source, so every check and launcher (through kernel.contract()) uses it."""
        chosen = self.kernel.graded_name(kernels)
        return self if self.kernel.name == chosen else replace(self, kernel=replace(self.kernel, name=chosen))

    def path(self, value: str) -> Path:
        return _resolved(self.source, "" if self.source else os.getcwd(), os.path.expanduser(value))

    @property
    def testcases_dir(self) -> Path:
        return self.path(self.testcases)

    @property
    def reference_path(self) -> Path:
        return self.path(self.reference)

    @property
    def cache_dir(self) -> Path:
        return self.path(self.compile.cache_dir)


@lru_cache(maxsize=256)
def _resolved(source: str, cwd: str, value: str) -> Path:
    """`value` resolved against the config file's folder (else `cwd`): remembered, as a grade asks for its cache
    folder hundreds of times, and each resolve is a system call per folder of the path (0.02 CPU-s a grade)."""
    base = Path(source).resolve().parent if source else Path(cwd)
    return (base / value).resolve()


def preset_names() -> list[str]:
    """The presets there are: presets/*.yaml, by name."""
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def preset_path(name: str) -> Path:
    """presets/NAME.yaml; ConfigError naming the presets there are when there is no such one."""
    path = PRESETS / f"{name}.yaml"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not path.is_file():
        raise ConfigError(f"--preset {name}", "", f"no such preset (there are: {', '.join(preset_names()) or 'none'})")
    return path


# The project's keys that are paths: in the project's config.yaml they are relative to the project's folder.
PATH_KEYS = ("testcases", "reference")


def load_config(path: Path | str | None = None) -> Config:
    """A config file, over the project's config.yaml: a key the file does not give is the project's (its
    paths the project's folders), wherever the file is; a key it gives, relative paths against its folder."""
    path = Path(path) if path else DEFAULT_CONFIG
    data = load_yaml(path)
    if data is None:
        # An empty file (a failed copy, a truncated upload) would silently grade with every default.
        raise ConfigError(str(path), "", "the file is empty; give the keys to change, or leave out --config")
    if isinstance(data, dict) and path.resolve() != DEFAULT_CONFIG and DEFAULT_CONFIG.is_file():
        data = merged_over(_project_defaults(), data)
    config = build(Config, data, str(path))
    config.source = str(path)
    _check_files(config)
    return config


def _project_defaults() -> dict:
    """The project's config.yaml, its paths made absolute (so they mean the same from any other file)."""
    defaults = load_yaml(DEFAULT_CONFIG) or {}
    for key in PATH_KEYS:
        if isinstance(defaults.get(key), str):
            defaults[key] = str(DEFAULT_CONFIG.parent / defaults[key])
    return defaults


def merged_over(base: dict, given: dict) -> dict:
    """`given` over `base`, mapping by mapping: a key given replaces the base's (a list whole), others stay."""
    merged = dict(base)
    for key, value in given.items():
        merged[key] = (merged_over(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict)
                       else value)
    return merged


def _check_files(config: Config) -> None:
    if not config.testcases_dir.is_dir():
        raise ConfigError(config.source, "testcases", f"folder not found: {config.testcases_dir}")
    if not config.reference_path.is_file():
        raise ConfigError(config.source, "reference", f"file not found: {config.reference_path}")
