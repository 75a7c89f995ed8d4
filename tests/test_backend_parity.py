"""On a GPU machine: the CPU emulator and the GPU give every corpus submission the same verdicts and words.

For each case both ran, passed-or-not must agree (after three hung cases the GPU gives up and skips the rest;
those are not compared; after a hang in a case the emulator stopped for a divergent barrier, the GPU leaves out the
cases it stopped for one too and runs the others, so a kernel like conditional_barrier skips none), and so must
the words (a hang's but its limit, each engine's own): a GPU grade runs the
emulator beside the GPU child, whose words explain every case where the two engines' values agree
(grader/emulation.py). Racy kernels too: the emulator's fibers run in an order that always shows the race, and a
race is unsafe whatever the values.
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu

from grader.result import NEEDS_GPU_GRADE

pytestmark = [
    pytest.mark.gpu,
    needs_gpu,
    needs_cxx,
]
CORPUS = sorted(p.name for p in SUBMISSIONS.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def both(graders):
    graders("cpu").prefetch([SUBMISSIONS / name for name in CORPUS])  # the GPU ones run one at a time
    return lambda name: (graders("gpu")(SUBMISSIONS / name), graders("cpu")(SUBMISSIONS / name))


def outcomes(result) -> dict:
    """passed or not, for each check that ran (skipped ones, GPU-only or given up on, are left out; so are
    the cases of a kernel the emulator could not build, held for the GPU's grade)."""
    kinds = ("compile",) if result.outcome == NEEDS_GPU_GRADE else ("case", "compile")
    return {c.name: c.passed for c in result.checks if c.kind in kinds and c.status != "skipped"}


@pytest.mark.parametrize("name", CORPUS)
def test_cpu_and_gpu_verdicts_agree(both, name):
    gpu, cpu = both(name)
    on_cpu, on_gpu = outcomes(cpu), outcomes(gpu)
    both_ran = on_cpu.keys() & on_gpu.keys()
    assert len(both_ran) >= min(len(on_cpu), len(on_gpu), 3)
    on_cpu, on_gpu = ({case: o[case] for case in both_ran} for o in (on_cpu, on_gpu))
    messages = {c.name: c.message[:200] for c in cpu.checks}
    missed = sampled_elsewhere(gpu)
    assert {case: (on_gpu[case], on_cpu[case], messages[case]) for case in on_cpu
            if on_gpu[case] != on_cpu[case] and case not in missed} == {}


def sampled_elsewhere(gpu) -> set[str]:
    """The large cases the CPU runs by sampled blocks where the GPU found something in a block the emulator's
    sample left out (the GPU's case says so, or the emulator ran the GPU's wrong tiles again): a CPU grade's sample
    cannot see those, and the verdicts may differ there."""
    return {c.name for c in gpu.checks if c.kind == "case" and ("what the GPU found lies in blocks it did not run"
                                                                in c.message or "where the GPU found" in c.message)}


@pytest.mark.parametrize("name", CORPUS)
def test_cpu_and_gpu_tell_each_case_in_the_same_words(both, name):
    """Where the engines' values agree, the GPU grade's case reads as the CPU grade's, word for word."""
    gpu, cpu = both(name)
    # A large case's words differ where it passed: the GPU checked every element, the CPU its sampled tiles.
    on_cpu = {c.name: c for c in cpu.checks if c.kind == "case" and c.status != "skipped"
              and not (c.status == "passed" and "checked" in c.metrics)}
    agreed = [c for c in gpu.checks if c.name in on_cpu and "emulator" in c.metrics and "differs" not in c.message]
    assert {c.name: c.message for c in agreed} == {c.name: as_on_the_gpu(on_cpu[c.name], c) for c in agreed}


def as_on_the_gpu(on_cpu, on_gpu) -> str:
    """The CPU grade's words, with a hang's limit the GPU's: each engine times a case out at its own limit
    (timeouts.run_s, timeouts.gpu_hang_s), and a case hung on both is told in the GPU's words (judge/engines.py)."""
    if "timed_out_s" not in on_cpu.metrics or "timed_out_s" not in on_gpu.metrics:
        return on_cpu.message
    limit, gpu_limit = on_cpu.metrics["timed_out_s"], on_gpu.metrics["timed_out_s"]
    return on_cpu.message.replace(f"timed out after {limit:g} s", f"timed out after {gpu_limit:g} s", 1)
