"""Bytecode where the grader's processes import from (issue 50): where pip installed without it (`--no-compile`) and
PYTHONDONTWRITEBYTECODE is set (Docker images), every grade's processes compiled their imports from source.
`grade prepare` compiles what the grader and its children import; a root grader's sandbox copy of the package
carries its own."""
from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

from grader.execute.confine import bytecode, reachable
from grader.execute.confine.sandbox import (
    Confinement,
    ResourceLimits,
    Sandbox,
    child_environment,
    python_paths,
    scratch_folder,
)
from grader.prepare import installed_bytecode

ROOT_USER = os.geteuid() == 0
NOBODY = 65534
MODULES = {"tinydist/__init__.py": "from .part import VALUE\n", "tinydist/part.py": "VALUE = 42\n"}

# Run in a fresh interpreter: the modules it compiled from source (none where their bytecode was read), and
# where the bytecode it used lies. argv: the folders to watch, then the modules to import.
WATCH = """
import importlib, importlib._bootstrap_external as loading, json, os, sys
compiled, compile_source = [], loading.SourceLoader.source_to_code
def noted(self, data, path, **options):
    compiled.append(path)
    return compile_source(self, data, path, **options)
loading.SourceLoader.source_to_code = noted
folders, names = sys.argv[1].split(os.pathsep), sys.argv[2:]
for name in names:
    importlib.import_module(name)
cached = {name: sys.modules[name].__cached__ for name in names}
last = sys.modules[names[-1]]
code_file = next((f.__code__.co_filename for f in vars(last).values()
                  if getattr(f, "__module__", "") == last.__name__ and hasattr(f, "__code__")), None)
print(json.dumps({"compiled": [p for p in compiled if p.startswith(tuple(folders))], "cached": cached,
                  "cached_exists": all(os.path.isfile(p) for p in cached.values()), "code_file": code_file,
                  "no_site": sys.flags.no_site}))
"""


def watched_import(python: list[str], folders: list[Path], names: list[str], env: dict[str, str],
                   popen=subprocess.Popen, **options) -> dict:
    """What a fresh interpreter compiled from `folders` importing `names`, and where its bytecode was."""
    process = popen([*python, "-c", WATCH, os.pathsep.join(map(str, folders)), *names], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, **options)
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode == 0, output
    return json.loads(output.splitlines()[-1])


@pytest.fixture
def private():
    """A fresh folder right under the temp folder (pytest's tmp_path is below one of root's that another user could
    not enter)."""
    folder = Path(tempfile.mkdtemp(prefix="sgemm-bytecode-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of two modules, made here (no index needed)."""
    wheel = folder / "tinydist-1.0-py3-none-any.whl"
    info = "tinydist-1.0.dist-info"
    files = {**MODULES, f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydist\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{name},sha256={digest(text)},{len(text.encode())}" for name, text in files.items()]
    files["tinydist-1.0.dist-info/RECORD"] = "\n".join([*record, "tinydist-1.0.dist-info/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def installed_without_bytecode(folder: Path) -> list[importlib.metadata.Distribution]:
    """tinydist installed into `folder` (a --target folder) as an image's `pip install --no-compile` does."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(folder / "site"), str(tiny_wheel(folder))],
                   check=True, capture_output=True)
    assert not list((folder / "site").rglob("*.pyc"))
    return list(importlib.metadata.distributions(path=[str(folder / "site")]))


def test_prepare_compiles_what_pip_installed_without_bytecode_and_imports_then_read_it(tmp_path):
    site = tmp_path / "site"
    distributions = installed_without_bytecode(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}
    before = watched_import([sys.executable], [site], ["tinydist", "tinydist.part"], env)
    assert sorted(before["compiled"]) == sorted(str(site / name) for name in MODULES)

    cache = tmp_path / "cache"
    assert installed_bytecode(cache, distributions) == (True, "the bytecode of the 1 installed distributions the "
                                                              "grader and its children import (2 modules compiled)")
    # marked done in the cache: the first GPU grade after the prepare does not look over the files again
    assert all(bytecode._marker(dist, cache).is_file() for dist in distributions)
    after = watched_import([sys.executable], [site], ["tinydist", "tinydist.part"], env)
    assert after["compiled"] == [] and after["cached_exists"]
    assert after["cached"]["tinydist.part"].startswith(str(site / "tinydist" / "__pycache__" / "part."))
    assert installed_bytecode(cache, distributions)[1].endswith("(all 2 modules had theirs)")


@pytest.mark.skipif(not ROOT_USER, reason="hardware: a user who cannot write a folder needs root to make one here")
def test_prepare_says_which_folder_it_could_not_write_and_does_not_fail(private):
    """An installation this user cannot write (root's, prepared by another user) is said and left as it was."""
    installed_without_bytecode(private)
    private.chmod(0o755)
    # A Python nobody can run (the copy made for the sandbox's uid where this one is under /root)
    view = reachable.python_view(tuple(str(p) for p in python_paths()))
    python, library_path = (view.executable, view.library_path) if view else (sys.executable, "")
    code = ("import importlib.metadata, json, sys; from pathlib import Path; from grader.prepare import "
            "installed_bytecode; "
            "print(json.dumps(installed_bytecode(Path(sys.argv[2]), "
            "list(importlib.metadata.distributions(path=[sys.argv[1]])))))")
    # The grader where nobody reaches it (root's copy where needed), then whatever path gives this Python its
    # dependencies (a GPU machine's wheels live in a folder of their own on PYTHONPATH)
    python_path = [reachable.package_copy() or str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": library_path, "PYTHONPATH": os.pathsep.join(python_path)}
    finished = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                               python, "-c", code, str(private / "site"), str(private / "cache")],
                              capture_output=True, text=True, cwd="/",
                              env=env)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout) == [True, (
        "the bytecode of the 1 installed distributions the grader and its children import "
        f"(2 modules in {private / 'site'} left without: this user cannot write there)")]
    assert not list((private / "site").rglob("*.pyc"))


@pytest.mark.skipif(not ROOT_USER, reason="hardware: the copies are made for a root grader's unprivileged uid")
def test_a_sandboxed_child_reads_the_bytecode_of_roots_copy_of_the_package(sandbox):
    """Root's copy of the package for the sandbox's uid holds its bytecode: a child there, which can write none (and
    runs with PYTHONDONTWRITEBYTECODE), compiles none of the grader's modules it imports, and its code is named by
    the copy's path (as a traceback shows it), not the temporary folder the copy was filled in."""
    package = Path(reachable.copy_package())
    assert (package / "grader" / "execute" / "gpu" / "__pycache__").is_dir()
    confined = Sandbox(sandbox.level, sandbox.bwrap, drop_uid=True, package_copy=str(package))
    names = ["grader.execute.cpu.harness_driver", "grader.execute.gpu.child", "grader.execute.confine.sandbox"]
    with scratch_folder("sgemm-bytecode-") as folder:
        workdir = folder / "child"
        popen = functools.partial(confined.popen, confinement=Confinement(
            workdir, ResourceLimits(cpu_s=20, processes=64), python=True))
        seen = watched_import([sys.executable], [package], names, child_environment(str(workdir), {}), popen)
    assert seen["compiled"] == [], seen["compiled"]
    assert seen["cached_exists"] and all(path.startswith(f"{package}/grader/") for path in seen["cached"].values())
    assert seen["code_file"] == str(package / "grader" / "execute" / "confine" / "sandbox.py")
