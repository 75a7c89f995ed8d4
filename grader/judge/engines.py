"""One verdict per case from two engines: the GPU decides the values, the CPU emulator decides safety and
explains. Pure: both engines' checks of a case in, the case's check out.

The rule, on every path: a case passes only when its values are right and the kernel did nothing unsafe
computing them (judge/findings.py's UNSAFE_KINDS). A GPU run sees values; the emulator sees every access,
barrier and warp collective. So where the emulator saw something unsafe, its check is the case's, word for
word as a CPU grade gives it. Otherwise the GPU's values decide: where both engines find C right, or both
find it wrong, the emulator's words explain (the same words as a CPU grade: it saw which thread stored what);
where one finds it right and the other wrong, the GPU's check stands and says so. A read of a shared entry no
thread stored is unsafe only where the emulator saw its value reach C: where the GPU's C was right there, by
luck (its stale shared memory), the case fails and says so; elsewhere the emulator's hint goes with the check.
"""
from __future__ import annotations

from dataclasses import replace

from ..result import ERROR, FAILED, PASSED, SKIPPED, CheckResult
from .findings import UNWRITTEN_READ

HUNG = "timed_out_s"  # a case's metric where it hung: the limit it had (run_events.py)
# A case's metric where it hung on both engines: the emulator's limit there. compute-sanitizer would only hang too
# (diagnose/checks.py), so the tools are not run over such a kernel.
EMULATOR_HUNG = "emulator_" + HUNG
# The emulator's check of a case it stopped for a cause of the kernel's own that it names (a fault, a divergent
# barrier): which (run_events.py). Where the GPU faulted or hung in that case too, the merged check keeps it as
# EMULATOR_STOPPED: the tools could only find again what the case tells already (diagnose/checks.py). A crash of
# the emulated process names no cause, and a hang is told as HUNG: neither is marked.
STOPPED = "stopped_by"
EMULATOR_STOPPED = "emulator_" + STOPPED
# A GPU run's case it left out after hanging in another, where the emulator stopped it for a divergent barrier
# (execute/hang_notices.py): the case it hung in. Not a fault or hang of its own: the emulator's check is the case's.
LEFT_OUT = "left_out_after_hang_in"
DISAGREE = "the CPU emulator's result in this case differs ({}); the GPU's values count"
# The emulator ran a large case by sampled blocks and saw nothing wrong in them: what went wrong lies elsewhere.
SAMPLED_RIGHT = ("the CPU emulator ran {} of this case and saw nothing wrong in them: what the GPU found lies in "
                 "blocks it did not run")


def merged_case(on_gpu: CheckResult, emulated: CheckResult | None) -> CheckResult:
    """The case's check: `on_gpu` judged from the GPU's outputs, `emulated` from the emulator's run of the same
    case, whole or by sampled blocks (None: the emulator did not run it, e.g. a case its file keeps for GPUs)."""
    if emulated is None or SKIPPED in (emulated.status, on_gpu.status):  # the GPU gave no values: nothing to merge
        return on_gpu
    metrics = {**on_gpu.metrics, "emulator": emulated.status, **_stopped_beside(on_gpu, emulated)}
    if "notes" in emulated.metrics:  # for the instructor: what the emulator's evidence suggests of the config
        metrics["notes"] = emulated.metrics["notes"]
    if emulated.unsafe:
        return replace(emulated, metrics=metrics, message=emulated.message + _right_by_luck(on_gpu, emulated))
    on_gpu = replace(on_gpu, hints=emulated.hints)  # the emulator's, whatever the GPU's values: it saw the reads
    if on_gpu.status == ERROR:  # a fault, hang or crash on the GPU is what happened there
        if HUNG in on_gpu.metrics and HUNG in emulated.metrics:
            # Hung on both: the GPU's words, its own limit. The emulator beside it stops a case the GPU hung in at
            # the GPU's limit once told, or at its own where it got there first (hang_notices.py): its words would
            # depend on which came first; neither names a line.
            return replace(on_gpu, metrics={**metrics, EMULATOR_HUNG: emulated.metrics[HUNG]})
        if emulated.status == ERROR:  # on both: the emulator's words name the line
            return replace(emulated, metrics=metrics)
        return _with_disagreement(on_gpu, emulated) if emulated.status == PASSED else on_gpu
    if on_gpu.status == PASSED and emulated.status == PASSED:
        return replace(on_gpu, metrics=metrics)
    if on_gpu.status == emulated.status == FAILED:
        # Both found C wrong: the emulator saw how (which thread stored what, where), the GPU's run cannot
        # tell. Which elements are wrong may differ where the result depends on the threads' order.
        return replace(emulated, metrics=metrics)
    return _with_disagreement(replace(on_gpu, metrics=metrics), emulated)


def hung_on_both(case: CheckResult) -> bool:
    """A case's check (merged_case's) says the kernel hung in it on the GPU and on the CPU emulator alike."""
    return case.status == ERROR and HUNG in case.metrics and EMULATOR_HUNG in case.metrics


def stopped_on_both(case: CheckResult) -> bool:
    """A case's check (merged_case's) says the kernel faulted or hung in it on the GPU, and the CPU emulator stopped
    its run of the case for a cause it names: the case's words are the emulator's, at the student's line."""
    return case.status == ERROR and EMULATOR_STOPPED in case.metrics


def _stopped_beside(on_gpu: CheckResult, emulated: CheckResult) -> dict:
    """EMULATOR_STOPPED for the merged check, where the GPU faulted or hung and the emulator stopped for a cause."""
    if on_gpu.status == ERROR and emulated.status == ERROR and STOPPED in emulated.metrics:
        return {EMULATOR_STOPPED: emulated.metrics[STOPPED]}
    return {}


def _with_disagreement(on_gpu: CheckResult, emulated: CheckResult) -> CheckResult:
    checked = emulated.metrics.get("checked", "")  # a large case, run by sampled blocks: which
    if emulated.status == PASSED and checked and "where the GPU found" not in checked:
        return replace(on_gpu, message=f"{on_gpu.message}\n{SAMPLED_RIGHT.format(checked)}")
    found = "it passed" if emulated.status == PASSED else emulated.message.split("\n", 1)[0]
    return replace(on_gpu, message=f"{on_gpu.message}\n{DISAGREE.format(found)}")


def _right_by_luck(on_gpu: CheckResult, emulated: CheckResult) -> str:
    """Where the GPU's C was right though the emulator saw a value no thread stored reach it: said, so the
    student knows the GPU's values were luck."""
    if on_gpu.status != PASSED or UNWRITTEN_READ not in emulated.unsafe:
        return ""
    return ("\non the GPU C came out right in this case, by luck: the shared entries no thread stored held values "
            "that happened not to change it")
