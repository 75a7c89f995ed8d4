"""What a grade was graded with (result.Provenance), recorded in every result the pipeline makes: the grader's
version and code, the configuration's file and values, each case file and case, the reference, what was handed
in, the toolkit and the driver. A regrade report (report/regrade.py) and `grade reproduce` say from these why two
gradings differ; `grade batch --resume` tells a result of another grader from one of a changed submission."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .ahead import Ahead
from .cases import Case
from .config import Config
from .execute.confine.reachable import source_files
from .execute.gpu.detect import driver_version
from .execute.nvcc.compile import toolkit_release
from .intake.submission import locate, submitted_bytes
from .result import Provenance

# Config keys left out of Provenance.settings: paths differ from machine to machine without changing a verdict
# (the files they name are hashed instead); the seed may have a secret mixed into it.
NOT_SETTINGS = frozenset({"source", "testcases", "reference", "compile.cache_dir", "timing.seed"})


@functools.cache
def grader_digest() -> str:
    """The grader's own code, hashed: any change to it (an upgrade, a fix) makes --resume grade again,
    which a version string that nobody bumps would not."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent  # the whole grader package
    for parts in source_files(package, (".py", ".h", ".cpp", ".c"), links=True):
        with open(os.path.join(package, *parts), "rb") as source:
            digest.update("/".join(parts).encode() + b"\0" + source.read() + b"\0")
    return digest.hexdigest()


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def settings_of(config: Config) -> dict[str, Any]:
    """The configuration's values by dotted key, paths and the seed left out."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif prefix not in NOT_SETTINGS:
            flat[prefix] = value

    walk("", dataclasses.asdict(config))
    return flat


def case_digests(cases: Sequence[Case]) -> dict[str, str]:
    """Each case's definition (shape, points, distribution, visibility, ...) hashed, its seed left out."""
    return {case.name: sha256_of(json.dumps({k: v for k, v in vars(case).items() if k != "seed"},
                                            sort_keys=True).encode()) for case in cases}


def case_file_digests(folder: Path) -> dict[str, str]:
    return {path.name: _file_digest(path) for path in sorted(Path(folder).glob("*.y*ml"))
            if path.suffix in (".yaml", ".yml")}


def _file_digest(path: str | Path) -> str:
    try:
        return sha256_of(Path(path).read_bytes()) if path else ""
    except OSError:
        return ""


def known_soon() -> None:
    """The grader's digest and the toolkit's release (`nvcc --version`), the parts of every grade's provenance that
    no configuration changes, made on a thread as the command starts: 10-25 ms its result assembly waited for."""
    _KNOWN.start()


_KNOWN = Ahead("provenance", grader_digest, toolkit_release)


def class_provenance(config: Config, cases: Sequence[Case]) -> Provenance:
    """What every student of one run is graded with: all but what they handed in."""
    _KNOWN.wait()
    return Provenance(grader_version=__version__, grader_digest=grader_digest(),
                      config_sha256=_file_digest(config.source), settings=settings_of(config),
                      case_files=case_file_digests(config.testcases_dir), cases=case_digests(cases),
                      reference_sha256=_file_digest(config.reference_path), toolkit=toolkit_release(),
                      driver=driver_version())


def submission_digest(path: Path, handed_in: Sequence[str]) -> str:
    """What was handed in at `path` (a folder holding kernel.cu, or the .cu file), hashed; "" if unreadable."""
    try:
        return sha256_of(submitted_bytes(locate(path)[1], handed_in))
    except OSError:
        return ""


def graded_with(config: Config, cases: Sequence[Case], path: Path, run: Provenance | None = None) -> Provenance:
    """`run`: the run's class_provenance where it was made already (a batch's, once per host)."""
    return dataclasses.replace(run or class_provenance(config, cases),
                               submission_sha256=submission_digest(path, config.compile.handed_in_headers))
