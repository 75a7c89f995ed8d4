"""`grade prepare` (issue 50): what every grade of a grader version shares (the CPU emulator's harness object and
precompiled header, the reference's emulation and profile, the cases' truths) is built into the cache once, so
that a student's grade builds their own unit alone; and a grade on a cold cache starts those builds in the parent."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.config import load_config
from grader.execute.confine import site_path
from grader.execute.cpu import build as emulator_build
from grader.prepare import prepare_soon

pytestmark = needs_cxx


def config_with_cache(config_file: Path, cache: Path) -> Path:
    """The quick test config with a cache of its own (empty until a command fills it)."""
    text = config_file.read_text()
    assert "cache_dir: ~/.cache/sgemm-grader" in text
    path = cache.parent / "config.yaml"
    path.write_text(text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {cache}"))
    return path


def grade(*arguments: str) -> subprocess.CompletedProcess:
    finished = subprocess.run([sys.executable, "-m", "grader", *arguments], capture_output=True, text=True,
                              cwd=ROOT, timeout=600)
    assert "Traceback" not in finished.stdout + finished.stderr, finished.stderr
    return finished


def files(cache: Path) -> dict[str, int]:
    """Every file of the cache by its path, with the time it was last written."""
    return {str(path.relative_to(cache)): path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}


def emulations(names) -> set[str]:
    """The built emulations among cache paths (cpu/<sha256>), without their .state files."""
    return {name for name in names if name.startswith("cpu/") and len(Path(name).name) == 64}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, needs_gpu])])
def test_after_grade_prepare_a_grade_builds_the_students_unit_alone(tmp_path, quick_config_file, backend):
    # On a GPU the emulator judges the cases beside the GPU child: its harness and header are as much shared.
    cache = tmp_path / "cache"
    config = config_with_cache(quick_config_file, cache)
    prepared = grade("prepare", "--config", str(config), "--backend", backend)
    assert prepared.returncode == 0, prepared.stderr
    assert "ready: the CPU emulator's harness object and precompiled header" in prepared.stdout
    # The grade's children then start without Python's site (tests/test_children_site.py)
    assert "ready: the children start without Python's site" in prepared.stdout
    assert site_path.without_site(str(cache)) is not None
    kept = files(cache)
    assert [name for name in kept if name.startswith("cpu/harness-") and name.endswith(".o")]
    assert [name for name in kept if name.startswith("cpu/cuda_emu-") and name.endswith(".gch")]
    assert len(emulations(kept)) == 1  # the reference's
    assert [name for name in kept if name.startswith("cpu-profile/")] and [n for n in kept if n.startswith("truths/")]

    graded = grade(str(SUBMISSIONS / "good_basic"), "--config", str(config), "--backend", backend, "-o",
                   str(tmp_path / "out"))
    assert graded.returncode == 0 and "Total:" in graded.stdout, graded.stderr
    after = files(cache)
    assert {name: after.get(name) for name in kept} == kept  # nothing prepared was built or written again
    assert len(emulations(set(after) - set(kept))) == 1  # the student's own emulation, and nothing else built


@pytest.mark.slow
def test_grade_prepare_again_finds_everything_kept(tmp_path, quick_config_file):
    cache = tmp_path / "cache"
    config = config_with_cache(quick_config_file, cache)
    assert grade("prepare", "--config", str(config), "--backend", "cpu").returncode == 0
    kept = files(cache)
    again = grade("prepare", "--config", str(config), "--backend", "cpu")
    assert again.returncode == 0 and files(cache) == kept


def test_a_grade_on_a_cold_cache_starts_the_harness_and_header_in_the_parent(tmp_path, quick_config_file):
    config = load_config(config_with_cache(quick_config_file, tmp_path / "cache"))
    assert not emulator_build.prepared(config.cache_dir)
    building = prepare_soon(config)
    assert building is not None
    building.join(timeout=300)
    assert emulator_build.prepared(config.cache_dir)
    assert prepare_soon(config) is None  # kept: a later grade starts nothing


def test_two_builders_at_once_compile_the_harness_and_header_once(tmp_path, monkeypatch):
    # A grade's parent and its child (or a batch's workers) reach a cold cache together: one builds, the others
    # wait for it and copy what it kept. Counted by a compiler that logs each call.
    calls = tmp_path / "calls"
    logging = tmp_path / "bin" / "g++"
    logging.parent.mkdir()
    logging.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which(emulator_build.compiler())} "$@"\n')
    logging.chmod(0o755)
    monkeypatch.setenv("CXX", str(logging))
    cache = tmp_path / "cache"
    builders = [threading.Thread(target=emulator_build.prepare, args=(cache, 300)) for _ in range(3)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join()
    assert emulator_build.prepared(cache)
    compiles = [line for line in calls.read_text().splitlines() if "-c" in line.split() or "c++-header" in line]
    assert len(compiles) == 3, compiles  # harness.cpp, emulator_runtime.cpp and the header, each once


def test_grade_prepare_writes_the_graders_bytecode_which_python_then_reads(tmp_path):
    """An editable install has no bytecode, and where PYTHONDONTWRITEBYTECODE is set no grade writes any: each grade
    compiled what it imported. `grade prepare` writes it, and such an interpreter then compiles none of it."""
    import json
    import os

    from grader.prepare import grader_bytecode

    package = tmp_path / "grader"
    shutil.copytree(ROOT / "grader", package, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    code = ("import importlib._bootstrap_external as loading, json, sys\n"
            "compiled, compile_source = [], loading.SourceLoader.source_to_code\n"
            "def noted(self, data, path, **options):\n"
            "    compiled.append(path)\n"
            "    return compile_source(self, data, path, **options)\n"
            "loading.SourceLoader.source_to_code = noted\n"
            "import grader.cli\n"
            f"print(json.dumps([path for path in compiled if path.startswith({str(package)!r})]))")

    def compiled_by_an_import() -> list[str]:
        finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                                  env=env, check=True)
        return json.loads(finished.stdout)

    assert str(package / "cli.py") in compiled_by_an_import()  # no bytecode: compiled, and none written
    assert grader_bytecode(package) == [(True, "the grader's bytecode")]
    assert compiled_by_an_import() == []
