"""The parent's builds of a GPU child's cubins while the child starts (execute/nvcc/compile_ahead.py).

Real nvcc in the real sandbox, no GPU: what is built for the child's toolchain lands in the cache under the
key the parent computes, and is offered to the child as a cached cubin; a build for another toolchain, a
compile error and a build past the compile limit leave nothing behind for the child to take.
"""
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_nvcc
from test_runner import CHILD_PRELUDE

from grader.contract import KernelContract
from grader.execute.confine.sandbox import detect
from grader.execute.job import Job
from grader.execute.nvcc import cubin_cache
from grader.execute.nvcc.compile import cubin_key, nvcc_path, prepare_source, reference_module_source
from grader.execute.nvcc.compile_ahead import CompilesAhead
from grader.execute.nvcc.cubin_cache import OFFERED, Exchange
from grader.execute.nvcc.kernel_params import find_kernel
from grader.execute.runner import ChildProgram, Limits, run_job

pytestmark = needs_nvcc
ARCH = "sm_90"
COMPILE_LIMIT_S = 60


@pytest.fixture(scope="module")
def nvcc_version():
    return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def grade_folder():
    """A grade's own folder, made as run_child makes it: the sandbox's uid must reach the builds inside."""
    folder = Path(tempfile.mkdtemp(prefix="sgemm-grade-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def job_of(tmp_path, grade_folder, student: str, headers: dict[str, str] | None = None) -> Job:
    reference = (ROOT / "reference" / "kernel.cu").read_text()
    return Job(student_source=prepare_source(student), reference_source=reference_module_source(reference),
               contract=KernelContract(tile_sizes=(8, 16, 32)), options=["-lineinfo"],
               cache_dir=str(tmp_path / "cache"), workdir=str(grade_folder), headers=headers or {})


def started(job: Job, nvcc_version: str, limit_s: float = COMPILE_LIMIT_S):
    child_folder = Path(job.workdir, "child")
    child_folder.mkdir()
    exchange = Exchange(job, child_folder)
    ahead = CompilesAhead.start(exchange, [ARCH, nvcc_version], detect(), limit_s, Path(job.workdir))
    assert ahead is not None and len(ahead.builds) == 2  # the student's file and the reference
    return exchange, ahead


def key_of(job: Job, role: str, nvcc_version: str) -> str:
    source = job.student_source if role == "student" else job.reference_source
    return cubin_key(source, job.options, ARCH, nvcc_version, job.headers if role == "student" else {})


def no_builds_left(ahead: CompilesAhead) -> bool:
    return all(b.process.poll() is not None and not b.folder.exists() for b in ahead.builds.values())


def test_what_the_parent_builds_for_the_childs_toolchain_is_cached_and_offered(tmp_path, grade_folder, nvcc_version):
    job = job_of(tmp_path, grade_folder, (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
    exchange, ahead = started(job, nvcc_version)
    assert ahead.finish(exchange, ARCH, nvcc_version) is False
    student, reference = key_of(job, "student", nvcc_version), key_of(job, "reference", nvcc_version)
    assert ahead.kept == {student, reference}
    assert find_kernel(exchange.cached(student).read_bytes(), job.contract).symbol  # the student's kernel is in it
    assert no_builds_left(ahead)
    exchange.offer(ARCH, nvcc_version)  # as the parent answers the child's toolchain report
    offered = exchange.workdir / OFFERED
    assert sorted(p.name for p in offered.iterdir()) == sorted([f"{student}.cubin", f"{reference}.cubin"])
    assert (offered / f"{student}.cubin").read_bytes() == exchange.cached(student).read_bytes()
    assert exchange.missing(ARCH, nvcc_version) == {}  # the next grade of this file builds nothing


def test_a_handed_in_header_is_found_as_pycuda_finds_it(tmp_path, grade_folder, nvcc_version):
    """The child's pycuda puts the handed-in headers' folder on the include path: <name> finds them too."""
    header = "#define TILE_WIDTH 16\n"
    kernel = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text().replace("#define TILE_SIZE 16",
                                                                               "#include <tiling.cuh>\n"
                                                                               "#define TILE_SIZE TILE_WIDTH")
    job = job_of(tmp_path, grade_folder, kernel, {"tiling.cuh": header})
    exchange, ahead = started(job, nvcc_version)
    assert ahead.finish(exchange, ARCH, nvcc_version) is False
    assert key_of(job, "student", nvcc_version) in ahead.kept


def test_builds_for_another_toolchain_are_dropped(tmp_path, grade_folder, nvcc_version):
    job = job_of(tmp_path, grade_folder, (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
    exchange, ahead = started(job, nvcc_version)
    assert ahead.finish(exchange, "sm_80", nvcc_version) is False  # the child's GPU is not the hint's
    assert ahead.kept == set() and not list(tmp_path.joinpath("cache").glob("*.cubin"))
    assert no_builds_left(ahead)


def test_a_compile_error_is_left_for_the_child_to_report(tmp_path, grade_folder, nvcc_version):
    broken = "__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C) { not CUDA }\n"
    job = job_of(tmp_path, grade_folder, broken)
    exchange, ahead = started(job, nvcc_version)
    assert ahead.finish(exchange, ARCH, nvcc_version) is False
    assert ahead.kept == {key_of(job, "reference", nvcc_version)}  # the child compiles the student's file itself
    assert no_builds_left(ahead)


def test_a_student_build_past_the_compile_limit_is_the_compiles_time_out(tmp_path, grade_folder, nvcc_version):
    job = job_of(tmp_path, grade_folder, (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
    exchange, ahead = started(job, nvcc_version, limit_s=0.01)
    assert ahead.finish(exchange, ARCH, nvcc_version) is True
    assert ahead.kept == set() and no_builds_left(ahead)


# A stand-in GPU child in the real sandbox: it reports the hinted toolchain, waits for the parent's answer and
# notes what it was offered. Everything before the child's CUDA (the parent's part) is the grader's own.
CHILD_ON_THE_HINT = """
send("toolchain", arch=job["toolchain_hint"][0], nvcc=job["toolchain_hint"][1])
os.fdopen(control).readline()
seen = {"parent_compiles": job["parent_compiles"],
        "offered": sorted(os.listdir(os.path.join(job["workdir"], "cubins")))}
open(os.path.join(job["workdir"], "seen.json"), "w").write(json.dumps(seen))
send("done")
"""


def sandboxed_child() -> ChildProgram:
    """Its code on the command line: the sandbox shows the child its own folder only."""
    return ChildProgram((sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(CHILD_ON_THE_HINT)), detect(), gpu=True)


def hinted_run(job: Job, nvcc_version: str, compile_s: float, monkeypatch) -> list[dict]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cubin_cache.write_hint(job.cache_dir, "0", ARCH, nvcc_version)
    limits = Limits(startup_s=60, compile_s=compile_s, run_s=5, max_restarts=0)
    return list(run_job(job, limits, lambda: 0, sandboxed_child()))


def test_a_child_on_the_hinted_toolchain_is_offered_what_the_parent_built_meanwhile(tmp_path, grade_folder,
                                                                                    nvcc_version, monkeypatch):
    job = job_of(tmp_path, grade_folder, (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
    events = hinted_run(job, nvcc_version, COMPILE_LIMIT_S, monkeypatch)
    assert [e["event"] for e in events][-2:] == ["done", "output"], events
    seen = json.loads(next(grade_folder.glob("child-*/seen.json")).read_text())
    built = sorted(f"{key_of(job, role, nvcc_version)}.cubin" for role in ("student", "reference"))
    assert seen == {"parent_compiles": True, "offered": built}  # nothing left for the child to compile
    assert not list(grade_folder.glob("ahead-*"))  # the builds' folders are gone


def test_a_student_build_past_the_limit_is_the_grades_compile_time_out(tmp_path, grade_folder, nvcc_version,
                                                                       monkeypatch):
    job = job_of(tmp_path, grade_folder, (SUBMISSIONS / "good_basic" / "kernel.cu").read_text())
    events = hinted_run(job, nvcc_version, 0.01, monkeypatch)
    timeouts = [e for e in events if e["event"] == "timeout"]
    assert [(e["phase"], e["limit_s"]) for e in timeouts] == [("compile", 0.01)], events
    assert not list(grade_folder.glob("child-*/seen.json"))  # the child was stopped before it went on
