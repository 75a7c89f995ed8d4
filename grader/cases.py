"""Test cases from testcases/*.yaml (or .yml): each file holds `cases:`, a list of shapes with seed and points."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config import SEED_LIMIT
from .errors import ConfigError
from .judge.layout import DISTRIBUTIONS
from .result import HIDDEN, PUBLIC
from .schema import build, load_yaml

CASE_SUFFIXES = (".yaml", ".yml")  # both YAML spellings: a .yml file is read, never skipped unsaid
MAX_DIM = 8192  # keeps one case's buffers and its float64 truth within a few hundred MB
AUTO, WHOLE, SAMPLED, SKIP = "auto", "whole", "sampled", "skip"
CPU_CHOICES = (AUTO, WHOLE, SAMPLED, SKIP)
# A case of more multiply-adds than this runs by sampled blocks on the CPU unless it says `cpu: whole`: square_256
# (16.8 million) emulates whole in about a second, square_512 (134 million) would take most of a grade's budget.
WHOLE_UP_TO = 1 << 25


@dataclass
class Case:
    name: str
    m: int
    n: int
    k: int
    seed: int
    points: float
    distribution: str = "uniform"
    visibility: str = PUBLIC
    description: str = ""
    # How the CPU emulator runs it: whole (every block), sampled (every edge block and a seeded sample of the
    # interior ones: execute/cpu/sampling.py), skip (only a GPU runs it), or auto: whole up to WHOLE_UP_TO
    # multiply-adds, sampled above.
    cpu: str = AUTO
    # The old spelling of `cpu: skip`, kept so that case files written for it keep their meaning.
    gpu_only: bool = False

    @property
    def on_cpu(self) -> str:
        """WHOLE, SAMPLED or SKIP: how a CPU emulator runs this case."""
        if self.gpu_only:
            return SKIP
        if self.cpu == AUTO:
            return WHOLE if self.m * self.n * self.k <= WHOLE_UP_TO else SAMPLED
        return self.cpu

    @property
    def emulated(self) -> bool:
        """Whether the CPU emulator runs it at all (whole or by sampled blocks)."""
        return self.on_cpu != SKIP

    @property
    def sampled(self) -> bool:
        return self.on_cpu == SAMPLED

    def validate(self):
        for dim in ("m", "n", "k"):
            value = getattr(self, dim)
            if not 1 <= value <= MAX_DIM:
                return dim, f"must be between 1 and {MAX_DIM}, got {value}"
        if self.distribution not in DISTRIBUTIONS:
            return "distribution", f"unknown {self.distribution!r} (known: {', '.join(DISTRIBUTIONS)})"
        if self.visibility not in (PUBLIC, HIDDEN):
            return "visibility", f"must be {PUBLIC} or {HIDDEN}, got {self.visibility!r}"
        if not 0 <= self.seed < SEED_LIMIT:
            return "seed", f"must be from 0 to {SEED_LIMIT - 1} (a numpy seed), got {self.seed}"
        if self.points < 0:
            return "points", "cannot be negative"
        if self.cpu not in CPU_CHOICES:
            return "cpu", f"must be one of {', '.join(CPU_CHOICES)}, got {self.cpu!r}"
        if self.gpu_only and self.cpu not in (AUTO, SKIP):
            return "gpu_only", f"gpu_only: true means cpu: skip; it cannot go with cpu: {self.cpu}"
        if not self.name or any(ch.isspace() for ch in self.name):
            return "name", f"must be a non-empty word without spaces, got {self.name!r}"
        return None


@dataclass
class CaseFile:
    cases: list[Case] = field(default_factory=list)


def emulated_first(cases: list[Case]) -> list[Case]:
    """Both engines' order: the cases the emulator runs whole first, in the config's order, then the large ones
    (those it runs by sampled blocks, then those it does not run). Both engines then launch the kernel in the same
    sequence, so a kernel that counts its launches in a device global behaves the same on both (execute/cpu:
    launches per case), and one that counts its blocks (a grid's last block) sees the same counts in every case
    run whole: a sampled case runs some of its blocks only."""
    return [case for kind in (WHOLE, SAMPLED, SKIP) for case in cases if case.on_cpu == kind]


def emulator_cases(cases: list[Case]) -> list[Case]:
    """The cases the CPU emulator runs (whole or by sampled blocks), in both engines' order."""
    return [case for case in emulated_first(cases) if case.emulated]


def whole_truths(cases: list[Case], on_gpu: bool) -> list[Case]:
    """The cases whose whole float64 truth a grade needs: every case on a GPU; on the CPU those run whole (a
    sampled case's truth is of its checked tiles only, made when it is judged)."""
    return [case for case in cases if on_gpu or case.on_cpu == WHOLE]


def load_cases(folder: Path, square: bool = False) -> list[Case]:
    """Every case of the folder's *.yaml and *.yml files, in name order; for a square lab (a kernel taking one
    size, width) each must be square, m = n = k, and a file with one that is not is refused, naming it."""
    files = sorted(path for path in Path(folder).iterdir() if path.suffix in CASE_SUFFIXES) \
        if Path(folder).is_dir() else []
    if not files:
        raise ConfigError(str(folder), "", "no *.yaml case files found (nor *.yml)")
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in files:
        data = load_yaml(path)
        if not data:
            raise ConfigError(str(path), "cases", "the file holds no cases; remove it or add some")
        if isinstance(data, list):
            raise ConfigError(str(path), "", "the file is a bare list; put the cases under `cases:` (a line "
                                             "`cases:` first, each case below it indented)")
        loaded = build(CaseFile, data, str(path))
        for index, case in enumerate(loaded.cases):
            if case.name in seen:
                raise ConfigError(str(path), f"cases[{index}].name",
                                  f"duplicate case name {case.name!r} (also in {seen[case.name]})")
            seen[case.name] = str(path)
            if square and not case.m == case.n == case.k:
                raise ConfigError(str(path), f"cases[{index}]",
                                  f"case {case.name!r} is m = {case.m}, n = {case.n}, k = {case.k}; this lab's kernel "
                                  "takes one size (width), so every case must be square: m = n = k")
            cases.append(case)
    return cases


def mix_seed(seed: int, secret: str) -> int:
    """A seed nobody can predict without the secret, derived from a public one (same secret, same seed)."""
    digest = hashlib.sha256(f"{secret}\0{seed}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def sample_seed(case: Case) -> int:
    """The seed of a sampled case's interior blocks: from the case's seed, which the grading secret is mixed
    into (with_secret), so nobody without the secret can tell which blocks are checked."""
    return mix_seed(case.seed, "sampled blocks")


def with_secret(cases: list[Case], secret: str) -> list[Case]:
    """Graded runs use the published shapes with inputs no student has seen."""
    return [replace(case, seed=mix_seed(case.seed, secret)) for case in cases]
