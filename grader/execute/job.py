"""What the parent asks a child to run.

The job travels as a JSON file in the child's folder (deleted once read); the child answers with the
events of protocol.py on a pipe of its own (never stdout, which belongs to the student's printf). Big
arrays go to .npy files in the child's folder.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..contract import KernelContract, TileSource


@dataclass
class CaseSpec:
    name: str
    m: int
    n: int
    k: int
    seed: int
    distribution: str
    # A case run by sampled blocks on the CPU emulator (execute/cpu/sampling.py's BlockSample, as its wire form);
    # None: the whole grid. The GPU child runs every case whole.
    sample: dict | None = None
    # The case's A and B as the parent stored them (judge/input_records.py), in the child's job alone: the file's
    # recorded identity and the read-only descriptor the runner passed. None: the child generates them.
    inputs: dict | None = None


@dataclass
class TimingSpec:
    m: int
    n: int
    k: int
    seed: int
    warmup: int
    repetitions: int
    k_factor: float
    abs_tol: float


def student_output(index: int) -> str:
    """The name a case's output file goes by: the first distinct output of the student's launches is
    "student", a later one that differs from it "student.1", "student.2", ..."""
    return "student" if index == 0 else f"student.{index}"


@dataclass
class Job:
    student_source: str  # prepared: #line directive and tile size probe already in
    reference_source: str
    contract: KernelContract  # the student's kernel: name, parameters, tile size names and sizes, launch
    options: list[str]
    cache_dir: str
    workdir: str
    cases: list[CaseSpec] = field(default_factory=list)
    timing: TimingSpec | None = None
    original_source: str = ""  # the file as handed in: the CPU emulator extracts its own device side
    # When the whole file does not compile (host code needing libwb ...), the GPU child tries its device side alone.
    device_side_source: str = ""
    # The sandbox the CPU driver runs the compiler and the harness in (Sandbox's fields).
    sandbox: dict = field(default_factory=dict)
    # The constant sizing the first shared tile, tried after the contract's macro names (the CPU emulator's
    # own probe uses them: contract.TileSource).
    tile_constant: str = ""
    launches_per_case: int = 1  # the GPU child's launches of the student's kernel per case (config.py)
    # The CPU driver's cases (cpu/schedule.py): how many workers run at once (0: one per core it may use; a batch
    # may lower it), each case's limit in its worker's own time (0: the harness's CPU limit), and after how many
    # hung cases it stops; the runner sets the last two from its Limits, as they bound the GPU child.
    parallel_cases: int = 0
    case_s: float = 0.0
    max_restarts: int = 2
    # The headers handed in with the file (name -> text): written beside it for every compiler.
    headers: dict[str, str] = field(default_factory=dict)
    # [arch, nvcc version] the last GPU child on this GPU reported (cubin_cache.py), or []: the GPU child
    # compiles with it before CUDA is initialised, and keeps what it compiled only if its own toolchain matches.
    toolchain_hint: list[str] = field(default_factory=list)
    # The parent builds the cubins the cache lacks on that hint while the child starts (compile_ahead.py): the
    # child then waits for them instead of compiling ahead itself.
    parent_compiles: bool = False
    # The CPU driver's access profile of the student's kernel and the reference's (issue 26: feedback only),
    # and the reference's file as written, which the emulator builds.
    access_profile: bool = False
    reference_original: str = ""

    @property
    def tile(self) -> TileSource:
        return self.contract.tile_source(self.tile_constant)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path, forget: bool = False) -> Job:
        """`forget` deletes the file once read: it names every case, hidden ones included, and the child
        that reads it goes on to run student code."""
        data = json.loads(Path(path).read_text())
        if forget:
            Path(path).unlink()
        data["cases"] = [CaseSpec(**c) for c in data["cases"]]
        data["timing"] = TimingSpec(**data["timing"]) if data["timing"] else None
        data["contract"] = KernelContract.from_wire(data["contract"])
        return cls(**data)

    def output_path(self, case: str, who: str) -> Path:
        return Path(self.workdir) / f"{case}.{who}.npy"
