"""What every grade of this grader version and configuration shares, made once into the cache before any student
waits for it (issue 50): the CPU emulator's harness object and precompiled header, the reference kernel's
emulation and its access profile per tile size, and the cases' seeded inputs and float64 truths.

`grade prepare` makes them all (the README's first command, the LMS images' set-up and `grade batch` before its
first student run it); a grade starts `prepare_soon` at its very start, in the parent, so that on a cold cache the
harness, the header and the reference's emulation are built while the children start rather than when the
emulator's child gets there.
The harness and the header are the grader's own code (compiled unconfined, build.py); the reference is built and
run in the sandbox, as the children build and run it.
"""
from __future__ import annotations

import os
import threading
import traceback
from dataclasses import asdict
from pathlib import Path

from .cases import Case
from .config import Config
from .contract import REFERENCE
from .diagnose.resources import reference_launched
from .execute.child_run import block_samples
from .execute.confine.sandbox import Sandbox, scratch_folder
from .execute.cpu import build as emulator_build
from .execute.cpu.access_profile import profile_size
from .execute.cpu.sampling import sampled_tiles
from .execute.job import Job
from .execute.nvcc import cubin_cache
from .execute.nvcc.compile import nvcc_path
from .execute.runner import Placement
from .leftovers import PREPARE

COMPILE_TIMEOUT_S = 120  # as the CPU child's builds
PACKAGE = Path(__file__).resolve().parent  # grader/


def prepare(config: Config, cases: list[Case], sandbox: Sandbox | None, on_gpu: bool = False,
            inputs: list[Case] | None = None) -> list[tuple[bool, str]]:
    """Every per-version build made into the cache (kept ones are read, not made again): (made, what) for each,
    for the command to print; made is False where it could not be made (the grades then make it, or say why).
    `cases`: those whose truths the grades need; `inputs`: those whose seeded A and B the children read (by default
    the same). Without a sandbox (an image being built may have none) nothing of the reference's is built: the
    compilers run in the sandbox alone."""
    from .judge import input_files, truths  # numpy: imported only where the truths and inputs are made

    inputs = cases if inputs is None else inputs
    input_files.warm(inputs, config.cache_dir)
    truths.warm(cases, config)
    sampled = warm_sampled_truths(inputs, config, truths)  # every case the emulator runs by sampled blocks
    said = [*grader_bytecode(), installed_bytecode(config.cache_dir), children_start(config.cache_dir),
            (True, f"the seeded inputs of {len(inputs)} cases"),
            (True, f"the float64 truths of {len(cases)} cases"
                   + (f" and of {sampled} sampled cases' checked tiles, per tile size" if sampled else ""))]
    if sandbox is None:
        said.append((False, "the reference's builds: no sandbox here (each grade's first makes them)"))
    elif nvcc_path() is not None:
        said.append(_reference_resources(config, sandbox, on_gpu))
    try:
        if not emulator_build.prepare(config.cache_dir, COMPILE_TIMEOUT_S):
            return [*said, (False, "the CPU emulator's builds: no C++ compiler (g++) on PATH")]
    except OSError as error:  # the grader's own code did not compile: every grade on the emulator would fail
        return [*said, (False, f"the CPU emulator's harness: {error}")]
    said.append((True, "the CPU emulator's harness object and precompiled header"))
    return said if sandbox is None else [*said, _reference(config, sandbox)]


def grader_bytecode(package: Path = PACKAGE) -> list[tuple[bool, str]]:
    """The grader's own modules compiled, where they have no bytecode or a stale one: an editable install (the
    README's) has none, and where PYTHONDONTWRITEBYTECODE is set no process writes any, so every grade compiled
    each module it imports (0.1-0.2 s of the parent's start, more of the CPU driver's). Nothing is said where the
    package's folder is not this user's to write (a pip install, which wrote its bytecode itself)."""
    import compileall  # `grade prepare`'s alone: every grade imports this module

    if not os.access(package, os.W_OK):
        return []
    return [(bool(compileall.compile_dir(str(package), quiet=2)), "the grader's bytecode")]


def installed_bytecode(cache_dir: Path, distributions: list | None = None) -> tuple[bool, str]:
    """The bytecode of the installed distributions the grader and its children import (its requirements, the `gpu`
    extra's, and theirs), compiled where it is missing, as pip's install-time compile would have: an image that
    installed them `--no-compile` (and sets PYTHONDONTWRITEBYTECODE) had every grade's processes compile rich, yaml,
    numpy... from source. A folder this user cannot write is said, not failed: its modules compile at each import.
    Each distribution is then marked done in the cache (as bytecode.ensure marks it), so that the first GPU grade after
    this does not look over their files again on a thread beside its own work."""
    from .execute.confine import bytecode
    from .execute.confine.reachable import child_distributions

    distributions = child_distributions() if distributions is None else distributions
    found = bytecode.compile_missing(distributions)
    bytecode.mark_compiled(distributions, cache_dir)
    said = [f"{found.compiled} modules compiled"] if found.compiled else []
    everything = not (found.compiled or found.unwritable or found.failed)
    said += [f"{'all ' if everything else ''}{found.present} modules had theirs"] if found.present else []
    said += [f"{count} modules in {folder} left without: this user cannot write there"
             for folder, count in sorted(found.unwritable.items())]
    said += [f"{found.failed} sources this Python cannot compile"] if found.failed else []
    return True, (f"the bytecode of the {len(distributions)} installed distributions the grader and its children "
                  f"import ({'; '.join(said) or 'none holds a module'})")


def children_start(cache_dir: Path) -> tuple[bool, str]:
    """Whether the children may start without Python's `site` (site_path.py: no .pth file that runs code belongs to a
    distribution they import), recorded in the cache for the grades. A cache that cannot be written is the prepare's
    failure, as for every build it holds."""
    from .execute.confine import site_path
    from .execute.confine.reachable import child_distributions

    try:
        return site_path.record(cache_dir, child_distributions())
    except OSError as error:
        return False, f"the record of how the children start: {error.strerror or error}"


def warm_sampled_truths(cases: list[Case], config: Config, truths) -> int:
    """The truth of the tiles the emulator checks of each case it runs by sampled blocks, for every tile size a
    kernel may have (the tiles depend on it): what each grade's judge would otherwise make. How many cases."""
    sampled = [case for case in cases if case.sampled]
    for tile in config.kernel.tile_sizes:
        for case in sampled:
            tiles = sampled_tiles(case.m, case.n, tile, block_samples([case], config, {})[case.name])
            truths.sampled_case_truth(case, config, tiles.all, tile, tiles.describe())[2].precomputed()
    return len(sampled)


def prepare_soon(config: Config, sandbox: Sandbox | None = None) -> threading.Thread | None:
    """The emulator's harness and header built on a thread where the cache lacks them (None where it holds them or
    there is no compiler), and then, given the grade's sandbox, the reference's emulation and profile: a child that
    needs the harness or header meanwhile waits for this build (build.py's lock)."""
    try:
        if emulator_build.compiler() is None or emulator_build.prepared(config.cache_dir):
            return None
    except OSError:  # a compiler that cannot be run: the child finds it so and says why (a grader error)
        return None
    # Not a daemon: a grade that ends first (a refused file) leaves no half-made build, the process waits for it.
    thread = threading.Thread(target=_quietly, args=(config, sandbox), name="prepare-emulator")
    thread.start()
    return thread


def _quietly(config: Config, sandbox: Sandbox | None) -> None:
    try:
        emulator_build.prepare(config.cache_dir, COMPILE_TIMEOUT_S)
        if sandbox is not None:
            _reference(config, sandbox)
    except Exception:  # the child builds them itself, and says what went wrong there
        traceback.print_exc()


def _reference_resources(config: Config, sandbox: Sandbox, on_gpu: bool) -> tuple[bool, str]:
    """The reference's registers and shared memory from nvcc (the occupancy advice's and the speed model's figures),
    for this host's GPU where a grade has told its architecture, else for compile.arch_without_gpu."""
    hint = cubin_cache.hint(str(config.cache_dir), Placement().gpu_name()) if on_gpu else []
    arch = hint[0] if hint else config.compile.arch_without_gpu
    launched = reference_launched(config.reference_path.read_text(encoding="utf-8"), arch, config.compile.options,
                                  config.timeouts.compile_s, sandbox, config.cache_dir)
    return launched is not None, f"the reference's resources from nvcc ({arch})"


def _reference(config: Config, sandbox: Sandbox) -> tuple[bool, str]:
    """The reference's emulation, and its access profile on each configured tile size's profile shape when a grade
    profiles (config.feedback.emulator, or timing estimated by the speed model), as the CPU child makes them."""
    from .execute.child_run import profiled
    from .execute.cpu.harness_driver import reference_profile

    reference = config.reference_path.read_text(encoding="utf-8")
    contract = config.kernel.contract()
    with scratch_folder(PREPARE) as work:
        built = emulator_build.build(reference, REFERENCE, REFERENCE.tile_source(), config.cache_dir, work, sandbox,
                                     COMPILE_TIMEOUT_S)
        if built.binary is None:
            return False, f"the reference's emulation: {built.message}"
        if not profiled(config):
            return True, "the reference's emulation"
        job = Job("", "", contract, [], str(config.cache_dir), str(work), sandbox=asdict(sandbox),
                  reference_original=reference)
        sizes = sorted({profile_size(tile) for tile in contract.tile_sizes})
        made = [reference_profile(job, sandbox, size)[1] is not None for size in sizes]
    return all(made), f"the reference's emulation and its access profile on {', '.join(f'{s}³' for s in sizes)}"
