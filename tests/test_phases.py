"""Where one grade's time goes (issue 27): `grade --phases` prints each phase, the result stores them, and
they add up to the grading process's wall time."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx, needs_gpu
from test_runner import LIMITS, events_of

from grader.execute.nvcc.compile import nvcc_path
from grader.phases import DESCRIBED, Phases

# What a CPU-emulated grade goes through, each told on its own line; and what a GPU grade adds.
CPU_PHASES = ("start", "config", "sandbox", "child_spawn", "static", "child_start", "compile", "cases", "judge")
GPU_PHASES = (*CPU_PHASES, "timing")


def grade_with_phases(tmp_path, backend: str) -> tuple[float, dict, str]:
    """`grade --phases` as a user runs it (its own process, so the interpreter's start counts): the wall
    time seen from outside, the stored result and what it printed on stderr."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / "good_basic"), "-o", str(tmp_path),
                           "--backend", backend, "--phases"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return wall, json.loads((tmp_path / "good_basic.json").read_text()), done.stderr


def assert_adds_up(phases: dict, wall: float, printed: str, expected: tuple[str, ...]) -> None:
    for name in expected:
        assert phases.get(name, -1) >= 0, f"{name} not stored: {phases}"
        assert DESCRIBED[name] in printed, f"{name} not printed:\n{printed}"
    assert "report: files written" in printed and "in all (wall" in printed
    stored = sum(phases.values())
    # Not stored: the report (written after the result was) and the interpreter's exit; the process start
    # is known to 10 ms.
    assert wall - 1.0 <= stored <= wall + 0.05, (stored, wall, phases)
    assert stored >= 0.75 * wall, (stored, wall, phases)


@needs_cxx
def test_grade_phases_prints_each_phase_and_they_add_up_to_the_wall_time(tmp_path):
    wall, result, printed = grade_with_phases(tmp_path, "cpu")
    emulated = [c for c in result["checks"] if c["kind"] == "case" and c["status"] != "skipped"]
    assert result["outcome"] == "graded" and emulated and all(c["status"] == "passed" for c in emulated)
    assert_adds_up(result["phases"], wall, printed, (*CPU_PHASES, *(("nvcc_check",) if nvcc_path() else ())))


@pytest.mark.gpu
@needs_gpu
def test_gpu_grade_phases_add_up_and_the_child_says_what_its_start_took(tmp_path):
    wall, result, printed = grade_with_phases(tmp_path, "gpu")
    assert result["score"] == result["max_score"]
    assert_adds_up(result["phases"], wall, printed, GPU_PHASES)
    metrics = next(c for c in result["checks"] if c["kind"] == "compile")["metrics"]
    assert metrics["context_s"] > 0 and metrics["student_compile_s"] >= 0 and metrics["reference_compile_s"] >= 0
    # The context is made while the kernels compile: the compile phase is not their sum.
    phases = result["phases"]
    assert phases["compile"] < metrics["context_s"] + metrics["student_compile_s"] + 0.5


READ_LATENESS_S = 0.02


def test_a_childs_phases_follow_its_events_on_the_parents_clock(tmp_path):
    """A child that spends 0.4 s starting, 0.3 s in its case and asks to be timed: its phases say so,
    with the parent's verdict before timing and the child's exit apart."""
    body = """
    time.sleep(0.4)
    send("phase", phase="compile")
    send("compiled", device="fake", arch="cpu", tile_size=16)
    send("phase", phase="case", case="one")
    time.sleep(0.3)
    send_case("one")
    send("await_timing")
    os.fdopen(control).readline()
    send("done")
    time.sleep(0.2)
    """
    started = time.monotonic()
    events = events_of(tmp_path, body, want_timing=lambda: time.sleep(0.25) or 0, cases=("one",))
    wall = time.monotonic() - started
    phases = next(e for e in events if e["event"] == "output")["phases"]
    # A phase runs from the parent reading one event to reading the next: a parent busy when the first
    # arrived reads it late and the phase looks shorter by that much (0.297 s for 0.3, under load as an
    # unprivileged user).
    late = READ_LATENESS_S
    assert 0.4 - late <= phases["child_start"] < 0.4 + LIMITS.run_s
    assert 0.3 - late <= phases["cases"] < 0.3 + LIMITS.run_s
    assert 0.25 - late <= phases["judge"] < 0.25 + LIMITS.run_s
    assert phases["child_end"] >= 0.2
    # Back to back, they cover the child's life and never more than the wall (on a loaded machine, setting the job
    # up before the child starts can take more than a tenth of a second of the wall).
    assert 0.4 + 0.3 + 0.25 + 0.2 <= sum(phases.values()) <= wall + 0.01


def test_consecutive_marks_add_up_and_a_split_keeps_the_rest():
    phases = Phases()
    time.sleep(0.05)
    phases.mark("a")
    time.sleep(0.05)
    phases.mark_split({"inner": 0.02}, "rest")
    assert phases.seconds["a"] >= 0.05 and phases.seconds["inner"] == 0.02 and phases.seconds["rest"] >= 0.03


def test_a_stored_truth_that_does_not_match_its_digest_is_computed_again(tmp_path):
    """The float64 truths cached on disk are keyed by the case's shape, seed and distribution and checked by
    a digest: a changed case misses, and a file whose numbers were altered (still a valid .npz) is not
    trusted but rebuilt."""
    import numpy as np

    from grader.cases import Case
    from grader.config import Config
    from grader.judge import truths

    config = Config()
    config.compile.cache_dir = str(tmp_path)
    case = Case("c", 33, 20, 17, seed=5, points=1)
    _, _, first = truths.case_truth(case, config)
    (stored,) = (tmp_path / "truths").glob("*.npz")
    with np.load(stored) as kept:
        altered = {name: kept[name] for name in kept.files}
    altered["value"] = altered["value"] + 1.0  # a wrong truth would fail every correct kernel
    np.savez(stored, **altered)
    truths._case_truth.cache_clear()
    _, _, again = truths.case_truth(case, config)
    assert np.array_equal(again.value, first.value)
    with np.load(stored) as rebuilt:  # and the file is right again
        assert np.array_equal(rebuilt["value"], first.value)
    truths._case_truth.cache_clear()
    _, _, other = truths.case_truth(Case("c", 33, 20, 17, seed=6, points=1), config)
    assert len(list((tmp_path / "truths").glob("*.npz"))) == 2 and not np.array_equal(other.value, first.value)


def test_truths_warmed_in_the_background_are_the_ones_judging_reads(tmp_path):
    """While the child starts, a thread computes the truths; the judge asking at the same time gets the
    same arrays, each computed once."""
    from grader.cases import Case
    from grader.config import Config
    from grader.judge import truths
    from grader.judge.warming import Warming

    config = Config()
    config.compile.cache_dir = str(tmp_path)
    cases = [Case(f"c{i}", 200 + i, 150, 170, seed=i, points=1) for i in range(4)]
    truths._case_truth.cache_clear()
    warming = Warming(cases, config)
    judged = [truths.case_truth(case, config)[2] for case in reversed(cases)]
    warming.stop()
    assert truths._case_truth.cache_info().misses == len(cases)
    assert all(truths.case_truth(case, config)[2] is truth for case, truth in zip(reversed(cases), judged))
    assert len(list((tmp_path / "truths").glob("*.npz"))) == len(cases)


def test_the_python_copys_stamps_change_with_any_file_and_skip_dangling_links(tmp_path):
    """A root grader's copy of its Python is named by every file's size and modification time (read once per
    grade, so read cheaply): a file written again or grown gives another name; a link counts as itself."""
    from grader.execute.confine import reachable

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "gone.py").symlink_to(tmp_path / "nowhere.py")
    (tmp_path / "config-3.11").mkdir()  # the build's own folder, never copied
    (tmp_path / "config-3.11" / "Makefile").write_text("all:\n")
    first = reachable._tree(str(tmp_path), set())
    assert [path for path, _, _ in first] == [str(tmp_path / name) for name in ("b.py", "gone.py", "link.py",
                                                                                 "pkg/a.py")]
    assert reachable._stamp(str(tmp_path / "gone.py")) is None and reachable._stamp(str(tmp_path / "b.py"))
    os.utime(tmp_path / "pkg" / "a.py", ns=(1, 1))
    assert reachable._tree(str(tmp_path), set()) != first
    again = reachable._tree(str(tmp_path), set())
    (tmp_path / "b.py").write_text("y = 22\n")
    assert reachable._tree(str(tmp_path), set()) != again


def _installed(site, name: str, with_pyc: bool = False):
    """A distribution installed in `site` as pip --no-compile leaves one (no .pyc), or with them listed."""
    import importlib.metadata

    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("VALUE = 1\n")
    (site / name / "mod.py").write_text("def f():\n    return 2\n")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    listed = [f"{name}/__init__.py", f"{name}/mod.py", f"{info.name}/METADATA", f"{info.name}/RECORD"]
    listed += [f"{name}/__pycache__/mod.cpython-311.pyc"] if with_pyc else []
    (info / "RECORD").write_text("".join(f"{entry},,\n" for entry in listed))
    return importlib.metadata.PathDistribution(info)


def test_the_parent_compiles_once_what_a_child_would_compile_at_every_start(tmp_path):
    """A package installed without bytecode (pip --no-compile) gets its .pyc from the parent, once per
    installation: a reinstall (a new RECORD) is compiled again; a package pip compiled is left alone."""
    import importlib.util

    from grader.execute.confine import bytecode

    site, cache = tmp_path / "site", tmp_path / "cache"
    bare, compiled = _installed(site, "barepkg"), _installed(site, "donepkg", with_pyc=True)
    pyc = Path(importlib.util.cache_from_source(str(site / "barepkg" / "mod.py")))
    bytecode.ensure([bare, compiled], cache)
    assert pyc.is_file() and not (site / "donepkg" / "__pycache__").exists()
    pyc.unlink()
    bytecode.ensure([bare], cache)
    assert not pyc.exists()  # done once for this installation: the next grades only look at a marker
    record = site / "barepkg-1.0.dist-info" / "RECORD"
    record.write_text(record.read_text())  # reinstalled, the same version: a RECORD written again
    os.utime(record, ns=(1, 1))
    bytecode.ensure([bare], cache)
    assert pyc.is_file()


def test_a_known_gpu_gets_its_cached_cubins_before_its_child_starts_and_the_hint_is_kept_checked(tmp_path,
                                                                                                monkeypatch):
    """The architecture and nvcc version the last GPU child reported (the toolchain hint) let the next one
    compile while CUDA starts: the parent puts the cached cubins under the hint's keys in its folder before
    it starts. A child's report is kept as the next hint only when it is an architecture name."""
    from dataclasses import replace

    from test_runner import CHILD_PRELUDE, make_job

    from grader.execute.nvcc import cubin_cache
    from grader.execute.nvcc.compile import cubin_key
    from grader.execute.runner import ChildProgram, run_job

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cache = tmp_path / "cache"
    job = replace(make_job(tmp_path, cases=()), student_source="student text", reference_source="reference text")
    cubin_cache.write_hint(str(cache), "0", "sm_90", "nvcc 13.0")
    key = cubin_key("student text", [], "sm_90", "nvcc 13.0", {})
    cache.joinpath(f"{key}.cubin").write_bytes(b"cached cubin")
    script = tmp_path / "child.py"
    script.write_text(CHILD_PRELUDE + f"""
seen = {{"hint": job["toolchain_hint"],
        "offered": os.listdir(os.path.join(job["workdir"], "cubins"))}}
open({str(tmp_path / "seen.json")!r}, "w").write(json.dumps(seen))
send("toolchain", arch="sm_90; rm -rf /", nvcc="nvcc 13.0")
os.fdopen(control).readline()
send("done")
""")
    events = list(run_job(job, LIMITS, lambda: 0, ChildProgram((sys.executable, str(script)), gpu=True)))
    assert [e["event"] for e in events][-2:] == ["done", "output"]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {"hint": ["sm_90", "nvcc 13.0"], "offered": [f"{key}.cubin"]}
    assert cubin_cache.read_hint(str(cache), "0") == ["sm_90", "nvcc 13.0"]  # the odd report was not kept
    cubin_cache.write_hint(str(cache), "0", "sm_100", "nvcc 13.1")
    assert cubin_cache.read_hint(str(cache), "0") == ["sm_100", "nvcc 13.1"]
    (cache / "toolchain" / next(os.walk(cache / "toolchain"))[2][0]).write_text("not json")
    assert cubin_cache.read_hint(str(cache), "0") == []


def test_the_parents_toolchain_guess_waits_a_bounded_time_and_a_stored_hint_comes_first(tmp_path, monkeypatch):
    """A first grade on a GPU guesses its toolchain (NVML, nvcc --version) while it reads the submission. A
    guess that does not come in time costs the head start only: the child is started without a hint. A hint a
    child reported is taken over any guess."""
    import threading

    from grader.execute.nvcc import cubin_cache

    release = threading.Event()
    monkeypatch.setattr(cubin_cache, "_arch_from_nvml", lambda gpu: "sm_90" if release.wait(30) else "")
    monkeypatch.setattr(cubin_cache, "GUESS_WAIT_S", 0.3)
    monkeypatch.setattr(cubin_cache, "_guesses", {})
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    nvcc = tmp_path / "nvcc"  # the toolchain's version, as `nvcc --version` prints it
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n")
    nvcc.chmod(0o755)
    cache = str(tmp_path / "cache")
    cubin_cache.guess_soon(cache, "3")
    started = time.monotonic()
    assert cubin_cache.hint(cache, "3") == []  # NVML hangs: no hint, after the bounded wait
    assert time.monotonic() - started < 2
    release.set()
    cubin_cache._guesses["3"].result(timeout=10)
    assert cubin_cache.hint(cache, "3") == ["sm_90", "Cuda compilation tools, release 13.0\n"]
    cubin_cache.write_hint(cache, "3", "sm_100", "nvcc 13.1")
    assert cubin_cache.hint(cache, "3") == ["sm_100", "nvcc 13.1"]
    cubin_cache.guess_soon(cache, "4")
    assert "4" in cubin_cache._guesses  # no hint stored for that GPU: guessed
    cubin_cache.write_hint(cache, "5", "sm_90", "nvcc 13.0")
    cubin_cache.guess_soon(cache, "5")
    assert "5" not in cubin_cache._guesses  # a stored hint: nothing to guess


@pytest.mark.gpu
@needs_gpu
def test_a_next_students_grade_compiles_on_the_hint_and_a_wrong_hint_changes_nothing(tmp_path):
    """On a GPU: after one grade, the next student's kernel compiles while CUDA starts (the hint is the
    GPU's real architecture), and grades as it does without; a stale hint (another GPU's) is ignored."""
    from grader.execute.nvcc import cubin_cache

    cache = tmp_path / "cache"
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {cache}"))

    def graded(name: str) -> dict:
        out = tmp_path / f"out-{name}-{time.monotonic_ns()}"
        done = subprocess.run([sys.executable, "-m", "grader", str(SUBMISSIONS / name), "-o", str(out), "--config",
                               str(config), "--backend", "gpu"], capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return json.loads((out / f"{name}.json").read_text())

    first = graded("good_basic")
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    arch, _ = cubin_cache.read_hint(str(cache), gpu)
    assert first["score"] == first["max_score"] and arch.startswith("sm_")
    compiled = next(c for c in first["checks"] if c["kind"] == "compile")
    assert f"compiled for {arch}" in compiled["message"]
    # No hint was stored: on its own guess (NVML, nvcc --version) the parent built both cubins as the child started.
    assert compiled["metrics"]["compiled_ahead"] == "parent"
    hinted = graded("missing_use_barrier")  # its own cubin is not cached: compiled on the hint
    assert next(c for c in hinted["checks"] if c["kind"] == "compile")["metrics"]["compiled_ahead"] == "parent"
    cubin_cache.write_hint(str(cache), gpu, "sm_50", "another nvcc")
    for cubin in cache.glob("*.cubin"):
        cubin.unlink()  # compiled again, on a hint that is wrong for this GPU
    stale = graded("missing_use_barrier")
    # Built ahead for sm_50 by the parent, then dropped: the child compiled for its own GPU.
    assert next(c for c in stale["checks"] if c["kind"] == "compile")["metrics"]["compiled_ahead"] == "no"
    for result in (hinted, stale):
        assert [(c["name"], c["status"]) for c in result["checks"]] == [(c["name"], c["status"])
                                                                        for c in hinted["checks"]]
    assert hinted["score"] < hinted["max_score"]  # its race is caught either way
    assert cubin_cache.read_hint(str(cache), gpu)[0] == arch  # the stale hint was replaced by the truth


def test_the_grade_command_imports_no_numpy_before_its_child_starts():
    """numpy and the judge (0.13 s to import on an H100 host) load on the truths' thread while a grade's child
    starts (judge/warming.py): the command's own imports hold none of it."""
    judge = ("numpy", "grader.run_events", "grader.judge.compare", "grader.judge.truths")
    program = f"import sys, grader.cli; print(sorted(set(sys.modules) & {set(judge)}))"
    loaded = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout
