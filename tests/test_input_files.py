"""Each case's seeded A and B stored once in the grader's cache and read by every grade's children (issue 50):
what a child reads is what make_inputs gives, a file that was changed, cut short or mislabelled is never used, and
a grade reads them (its `case` events say so) with the same verdicts as a grade that generates them."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.cases import load_cases
from grader.contract import KernelContract
from grader.execute.job import CaseSpec, Job
from grader.execute.runner import Limits, run_job
from grader.execute.spawn import ChildProgram, inputs_for_child, with_inputs
from grader.judge.input_files import child_inputs, stored_inputs
from grader.judge.input_records import data_path, for_child, opened_for_child, record_path, recorded
from grader.judge.inputs import make_inputs
from grader.result import TIMING

SHAPE = (67, 45, 31, 7, "normal")  # m, n, k, seed, distribution: ragged, so A and B differ in size


def child_view(cache: Path) -> tuple[np.ndarray, np.ndarray, bool]:
    """What a child reads of SHAPE's file: through a descriptor opened as the runner opens it."""
    record = recorded(*SHAPE, cache)
    descriptor = opened_for_child(record) if record else None
    return child_inputs(None if descriptor is None else for_child(record, descriptor), *SHAPE)


def assert_generated_ones(a: np.ndarray, b: np.ndarray) -> None:
    want_a, want_b = make_inputs(*SHAPE)
    assert a.dtype == np.float32 and np.array_equal(a, want_a) and np.array_equal(b, want_b)


def test_a_child_reads_the_stored_inputs_and_they_are_make_inputs(tmp_path):
    stored_inputs(*SHAPE, tmp_path)
    a, b, cached = child_view(tmp_path)
    assert cached
    assert_generated_ones(a, b)
    assert not a.flags.writeable and not b.flags.writeable  # mapped read-only: nothing to write back through
    assert stat.S_IMODE(data_path(tmp_path, *SHAPE).stat().st_mode) == 0o444  # nobody writes it in place


def test_the_parent_reads_a_stored_file_again_without_writing_it(tmp_path):
    stored_inputs(*SHAPE, tmp_path)
    data = data_path(tmp_path, *SHAPE)
    before = (data.stat().st_ino, data.stat().st_mtime_ns, record_path(data).stat().st_mtime_ns)
    assert_generated_ones(*stored_inputs(*SHAPE, tmp_path))
    assert (data.stat().st_ino, data.stat().st_mtime_ns, record_path(data).stat().st_mtime_ns) == before


def overwrite_in_place(path: Path, offset: int, data: bytes) -> None:
    path.chmod(0o644)
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


@pytest.mark.parametrize("damage", ["values", "truncated", "replaced"])
def test_a_changed_file_is_never_used(tmp_path, damage):
    stored_inputs(*SHAPE, tmp_path)
    data = data_path(tmp_path, *SHAPE)
    record = recorded(*SHAPE, tmp_path)
    descriptor = opened_for_child(record)  # a child started before the damage: its descriptor is checked again
    if damage == "values":
        overwrite_in_place(data, 200, np.full(16, 1e30, np.float32).tobytes())
    elif damage == "truncated":
        os.truncate(data, data.stat().st_size // 2)
    else:  # another file put in its place, of the right size
        zeros = data.with_name("zeros.npy")
        np.save(zeros, np.zeros(67 * 31 + 31 * 45, np.float32))
        os.replace(zeros, data)
    assert recorded(*SHAPE, tmp_path) is None  # the next child is not given it
    a, b, cached = child_inputs(for_child(record, descriptor), *SHAPE)
    assert not cached
    assert_generated_ones(a, b)
    assert_generated_ones(*stored_inputs(*SHAPE, tmp_path))  # the parent's truths: made again, not read
    assert recorded(*SHAPE, tmp_path) is not None and child_view(tmp_path)[2]  # and stored anew


def test_a_file_whose_header_does_not_fit_the_case_is_not_used_though_recorded(tmp_path):
    # Recorded as it is (so only the header check stands), but holding another shape: never read as this case's.
    stored_inputs(67, 45, 30, 7, "normal", tmp_path)
    other = data_path(tmp_path, 67, 45, 30, 7, "normal")
    data = data_path(tmp_path, *SHAPE)
    os.replace(other, data)
    os.replace(record_path(other), record_path(data))
    info = data.stat()
    record_path(data).write_text(json.dumps({"size": info.st_size, "inode": info.st_ino, "device": info.st_dev,
                                             "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns}))
    a, b, cached = child_view(tmp_path)
    assert not cached
    assert_generated_ones(a, b)


def test_a_changed_generator_never_reads_an_older_file(tmp_path, monkeypatch):
    from grader.judge import input_records

    old = data_path(tmp_path, *SHAPE)
    monkeypatch.setattr(input_records, "VERSION", input_records.VERSION + "-next")
    assert data_path(tmp_path, *SHAPE) != old


def test_a_childs_job_names_a_descriptor_of_the_stored_file_never_its_path(tmp_path):
    stored_inputs(*SHAPE, tmp_path)
    specs = [CaseSpec("stored", *SHAPE), CaseSpec("not_stored", 5, 6, 7, 1, "uniform")]
    opened, descriptors = inputs_for_child(specs, str(tmp_path))
    named = with_inputs(specs, opened)
    try:
        assert named[1].inputs is None and len(descriptors) == 1  # the other case's child generates it
        assert "path" not in named[0].inputs and str(tmp_path) not in json.dumps(named[0].inputs)
        assert os.fstat(named[0].inputs["fd"]).st_ino == data_path(tmp_path, *SHAPE).stat().st_ino
        assert not os.get_inheritable(descriptors[0])  # no other process the parent starts inherits it
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


# A stand-in for the GPU child in the real sandbox, confined as the GPU child is (its code on the command line: the
# sandbox shows it its own folder alone): it tries to write through the descriptor it was given, and reads it.
SANDBOXED_CHILD = """
import hashlib, json, os, sys
from grader.execute.job import Job
from grader.execute.protocol import await_job
from grader.judge.input_files import child_inputs
await_job(int(sys.argv[3]))
job, events = Job.load(sys.argv[1], forget=True), int(sys.argv[2])
spec = job.cases[0]
tried = {}
for how, attempt in (("write", lambda: os.write(spec.inputs["fd"], b"x")),
                     ("reopen", lambda: os.open(f"/proc/self/fd/{spec.inputs['fd']}", os.O_RDWR)),
                     ("by_path", lambda: os.open(CACHE_FILE, os.O_RDONLY))):
    try:
        attempt()
        tried[how] = "done"
    except OSError:
        tried[how] = "refused"
a, b, cached = child_inputs(spec.inputs, spec.m, spec.n, spec.k, spec.seed, spec.distribution)
seen = {"cached": cached, "digest": hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest(), "tried": tried}
open(os.path.join(job.workdir, "seen.json"), "w").write(json.dumps(seen))
os.write(events, b'{"event": "done"}\\n')
"""


def test_a_sandboxed_child_maps_its_descriptor_and_cannot_write_through_it(tmp_path, sandbox):
    stored_inputs(*SHAPE, tmp_path / "cache")
    data = data_path(tmp_path / "cache", *SHAPE)
    before = recorded(*SHAPE, tmp_path / "cache")
    folder = Path(tempfile.mkdtemp(prefix="sgemm-grade-"))  # as run_child makes a grade's folder: the uid enters
    folder.chmod(0o711)
    try:
        job = Job(student_source="", reference_source="", contract=KernelContract(tile_sizes=(16,)), options=[],
                  cache_dir=str(tmp_path / "cache"), workdir=str(folder), cases=[CaseSpec("one", *SHAPE)])
        code = SANDBOXED_CHILD.replace("CACHE_FILE", repr(str(data)))  # told the path: only the sandbox stops it
        events = list(run_job(job, Limits(startup_s=60, compile_s=60, run_s=60, max_restarts=0), lambda: 0,
                              ChildProgram((sys.executable, "-c", code), sandbox)))
        assert [e["event"] for e in events][-2:] == ["done", "output"], events
        seen = json.loads(next(folder.glob("child-*/seen.json")).read_text())
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    want_a, want_b = make_inputs(*SHAPE)
    assert seen["cached"] and seen["digest"] == hashlib.sha256(want_a.tobytes() + want_b.tobytes()).hexdigest()
    assert seen["tried"] == {"write": "refused", "reopen": "refused", "by_path": "refused"}
    assert recorded(*SHAPE, tmp_path / "cache") == before  # the file is as the parent recorded it


# -- grades ------------------------------------------------------------------------------------------------------


def grade(config: Path, out: Path, backend: str) -> dict:
    finished = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "good_basic"), "--config", str(config),
                               "--backend", backend, "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                              timeout=600)
    assert finished.returncode == 0 and "Traceback" not in finished.stdout + finished.stderr, finished.stderr
    return json.loads((out / "good_basic.json").read_text())


def verdicts(result: dict) -> list[tuple]:
    """Each check's verdict and words; of the GPU's timing, its verdict alone (its milliseconds differ run to run)."""
    return [(c["name"], c["status"], c["score"], "" if c["kind"] == TIMING else c["message"])
            for c in result["checks"]]


def cached_inputs(result: dict) -> int:
    return next(c for c in result["checks"] if c["kind"] == "compile")["metrics"]["cached_inputs"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("cpu", marks=needs_cxx),
                                     pytest.param("gpu", marks=[pytest.mark.gpu, needs_gpu])])
def test_a_grade_reads_the_prepared_inputs_and_judges_as_one_that_generates_them(tmp_path, quick_config_file,
                                                                                  backend):
    text = quick_config_file.read_text()
    assert "cache_dir: ~/.cache/sgemm-grader" in text
    configs = {}
    for name in ("with", "without"):
        (tmp_path / name).mkdir()
        configs[name] = tmp_path / name / "config.yaml"
        configs[name].write_text(text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {tmp_path / name}"))
    (tmp_path / "without" / "inputs").write_text("not a folder: no inputs can be stored")
    prepared = subprocess.run([sys.executable, "-m", "grader", "prepare", "--config", str(configs["with"]),
                               "--backend", backend], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert prepared.returncode == 0 and "ready: the seeded inputs of" in prepared.stdout, prepared.stderr
    every = load_cases(quick_config_file.parent / "testcases")  # the GPU-only one too: a GPU grade runs it
    assert all(recorded(c.m, c.n, c.k, c.seed, c.distribution, tmp_path / "with") for c in every)

    cached = grade(configs["with"], tmp_path / "out-with", backend)
    generated = grade(configs["without"], tmp_path / "out-without", backend)
    ran = [c for c in cached["checks"] if c["kind"] == "case" and "GPU only" not in c["message"]]
    assert ran and cached_inputs(cached) == len(ran)  # every case its child ran, on the stored inputs
    assert cached_inputs(generated) == 0
    assert verdicts(cached) == verdicts(generated)
