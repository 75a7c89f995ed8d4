"""The grader's Python children start without `site` (`python -S`), handed the import path `site` gave the parent
(issue 50: `site` was 62 ms of each child's start on an H200 host). Where a .pth that runs code is on the path, they
do so once `grade prepare` (or a GPU grade) has recorded that no distribution they import owns one; a .pth's paths
are carried; a root grader's copied Python hands its own path."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hardware import needs_gpu

from grader.execute.confine import reachable, site_path
from grader.execute.confine.sandbox import NAMESPACES_AND_UID, UID_ONLY, Sandbox, scratch_folder
from grader.execute.spawn import ChildProgram, Placement, spawn
from grader.prepare import children_start

ROOT_USER = os.geteuid() == 0


@pytest.fixture
def recorded(tmp_path) -> Path:
    """A cache in which `grade prepare`'s record says this interpreter's children may start without site."""
    cache = tmp_path / "cache"
    assert children_start(cache) == (True, "the children start without Python's site, their import path handed to them")
    return cache


def started_and_ended(program: ChildProgram, cache: Path) -> tuple[list[str], int, str]:
    """The child started as a grade starts it (spawn.py), in a folder the sandbox's uid may enter, then told no job will
    come (its control pipe closed), which it reads once its imports are done: its command line, its exit status (0: it
    imported all it needs) and its log."""
    with scratch_folder("sgemm-site-") as folder:
        child = spawn(program, Placement().environment(), folder, [], str(cache))
        os.close(child.control_fd)
        status = child.proc.wait(timeout=120)
        os.close(child.events_fd)
        return list(child.proc.args), status, child.log_path.read_text(errors="replace")


def python_argv(command: list[str]) -> list[str]:
    """The child's own argv inside a sandbox's command line (prlimit, setpriv, bwrap before it)."""
    start = max(i for i, arg in enumerate(command) if os.path.basename(arg).startswith("python"))
    return command[start:]


def test_the_cpu_driver_starts_without_site_and_imports_all_it_needs(recorded):
    command, status, log = started_and_ended(ChildProgram.cpu_driver(), recorded)
    assert command[:4] == [sys.executable, "-S", "-m", "grader.execute.cpu"], command
    assert status == 0 and log == "", log  # numpy, yaml, the harness driver: imported from the handed path


def test_without_a_record_the_children_keep_site_where_a_pth_runs_code(tmp_path):
    """With no record, the children start without site only where no .pth file on the path runs code (this venv's
    editable install has its finder's): else as before."""
    code_files = site_path._listing(site_path.parent_path())[0]
    command, status, log = started_and_ended(ChildProgram.cpu_driver(), tmp_path / "empty-cache")
    assert ("-S" in command[:2]) == (not code_files) and status == 0, (command, log)


def test_the_handed_path_is_the_one_site_gave_in_its_order(recorded):
    """A child started with -S sees, after the grader's root and the parent's PYTHONPATH, what a child started with
    `site` saw: the standard library first, then site-packages and what their .pth files add."""
    code = "import json, sys; print(json.dumps([sys.flags.no_site, sys.path]))"
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    with_site = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                          check=True).stdout)
    handed = site_path.without_site(str(recorded))
    env["PYTHONPATH"] = os.pathsep.join(handed)
    without = json.loads(subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True,
                                        check=True).stdout)
    assert (with_site[0], without[0]) == (0, 1)
    kept = [entry for entry in with_site[1][1:] if os.path.exists(entry)]
    assert list(dict.fromkeys(e for e in without[1][1:] if os.path.exists(e))) == kept


def test_a_pth_files_paths_are_carried_and_its_code_is_told(tmp_path):
    """What `site` does with a .pth file: a path line adds its folder (carried to the child), a line that runs code
    cannot be carried (the record names the distribution that installed it, and the children keep site)."""
    site = tmp_path / "site"
    (site / "extra").mkdir(parents=True)
    (site / "paths.pth").write_text("# a comment\nextra\nmissing\n")
    (site / "hook.pth").write_text("import sys; sys.hooked = True\n")
    info = site / "hooked-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hooked\nVersion: 1.0\n")
    (info / "RECORD").write_text("hook.pth,,\nhooked-1.0.dist-info/RECORD,,\n")
    assert site_path.pth_paths(site) == [str(site / "extra")]
    hooked = list(importlib.metadata.distributions(path=[str(site)]))
    assert site_path.site_needed_by(hooked, [str(site / "hook.pth")]) == [f"{site / 'hook.pth'} (hooked's)"]
    assert site_path.site_needed_by(hooked, [str(site / "other.pth")]) == []


@pytest.mark.skipif(not ROOT_USER, reason="hardware: only a root grader drops to a uid that needs a copied Python")
@pytest.mark.parametrize("level", [NAMESPACES_AND_UID, UID_ONLY])
def test_a_sandboxed_python_child_in_roots_copied_python_starts_without_site(recorded, sandbox, monkeypatch, level):
    """Root's copy of the Python (a venv in the copies, with the distributions the children import) for the sandbox's
    uid: a child there started with -S is handed that view's path, not the parent's, and imports all it needs; at
    uid-only too, where it sees the whole file system (the parent's folders it cannot enter)."""
    view = reachable.copied_python_view()
    confined = Sandbox(level, sandbox.bwrap if level == NAMESPACES_AND_UID else "", drop_uid=True,
                       package_copy=reachable.copy_package())
    # The CPU driver's module in the sandbox, as the GPU child runs there: a Python child of the grader's own
    program = ChildProgram((sys.executable, "-m", "grader.execute.cpu"), confined, without_site=True)
    # The copies are real; only the decision that this Python is out of the uid's reach is taken for it (here it is,
    # under /root; a CI's may not be)
    monkeypatch.setattr(reachable, "python_view", lambda paths: view)
    command, status, log = started_and_ended(program, recorded)
    assert python_argv(command)[:4] == [view.executable, "-S", "-m", "grader.execute.cpu"], command
    assert status == 0 and log == "", log
    assert any(entry.startswith(str(Path(view.executable).parents[1])) for entry in view.site_path)


@needs_gpu
@pytest.mark.gpu
def test_the_gpu_child_starts_without_site_and_imports_pycuda(recorded, sandbox):
    """numpy, pycuda and theirs (pytools, platformdirs, mako...) from the handed path, in the grade's sandbox."""
    command, status, log = started_and_ended(ChildProgram.gpu_child(sandbox), recorded)
    assert python_argv(command)[1:4] == ["-S", "-m", "grader.execute.gpu.child"], command
    assert status == 0 and "Traceback" not in log, log
