"""How a kernel's warps touch memory, against the reference's: advice at the student's lines (issue 26).

Pure: reads two access profiles (the CPU emulator's, execute/cpu/access_profile.py; one record per line,
kind and array) and says where the student's kernel makes a warp touch more 32-byte sectors of global
memory, or take more turns on shared memory's banks, than the same bytes need AND than the reference
kernel does on the same shape. A pattern the reference shares is no finding; every hint is read from what
the profile saw (the stride between neighbouring threads, the shared array's shape), never guessed.
"""
from __future__ import annotations

from dataclasses import replace

from ..result import BANK_CONFLICT, UNCOALESCED_LOAD, UNCOALESCED_STORE, Feedback

MARGIN = 0.5  # per request: a figure less than this above the ideal or the reference's is no finding
WHAT = {"global_load": UNCOALESCED_LOAD, "global_store": UNCOALESCED_STORE, "shared_load": BANK_CONFLICT,
        "shared_store": BANK_CONFLICT}
# What a warp's threads should touch, per matrix: consecutive threadIdx.x on consecutive elements of a row.
GLOBAL_ADVICE = {
    "A": "let threadIdx.x pick the column of A within the tile (A[row * k + p * TILE + threadIdx.x]) and "
         "threadIdx.y the row",
    "B": "let threadIdx.x pick the column of B (B[(p * TILE + threadIdx.y) * n + col], col from threadIdx.x)",
    "C": "let threadIdx.x pick the column of C (C[row * n + col], col from threadIdx.x, row from threadIdx.y)",
}


def access_feedback(student: list[dict], reference: list[dict], size: int,
                    names: dict[str, str] | None = None) -> list[Feedback]:
    """Feedback for each of the student's access sites worse than ideal and than the reference's, the
    worst (most times its ideal) first. `names`: what the student's kernel calls A, B and C (M, N, P)."""
    found = []
    reference = accesses(reference)
    for record in accesses(student):
        mean, ideal = _mean(record, "total"), _mean(record, "ideal")
        theirs = _reference_figure(record, reference)
        if mean < ideal + MARGIN or (theirs is not None and mean < theirs + MARGIN):
            continue
        found.append((mean / ideal, _feedback(record, mean, ideal, theirs, size, names or {})))
    found.sort(key=lambda pair: (-pair[0], pair[1].line))
    return [feedback for _, feedback in found]


def accesses(records: list[dict]) -> list[dict]:
    """A profile's access records, without its barrier counts."""
    return [record for record in records if record["event"] == "access"]


def _mean(record: dict, key: str) -> float:
    return record[key] / record["requests"]


def _reference_figure(record: dict, reference: list[dict]) -> float | None:
    """The reference's worst figure for the same kind of access (of the same matrix, for global memory);
    None when it makes none."""
    shared = record["kind"].startswith("shared")
    same = [r for r in reference if r["kind"] == record["kind"] and (shared or r["array"] == record["array"])]
    return max((_mean(r, "total") for r in same), default=None)


def _feedback(record: dict, mean: float, ideal: float, theirs: float | None, size: int,
              names: dict[str, str]) -> Feedback:
    shared = record["kind"].startswith("shared")
    message, advice = (_bank_conflict(record, mean, ideal) if shared
                       else _uncoalesced(record, mean, ideal, size, names.get(record["array"], record["array"])))
    if theirs is not None:
        message += f" (reference kernel: {_figure(theirs)})"
    return Feedback(WHAT[record["kind"]], message, advice, line=record["line"], value=round(mean, 2),
                    reference_value=None if theirs is None else round(theirs, 2),
                    unit="way" if shared else "sectors per request", source="emulator")


def _uncoalesced(record: dict, mean: float, ideal: float, size: int, array: str) -> tuple[str, str]:
    load = record["kind"] == "global_load"
    verb = "read" if load else "store"
    message = (f"line {record['line']}: each warp's {'load' if load else 'store'} of {array} touches "
               f"{_figure(mean)} sectors (32-byte pieces of memory) where {_figure(ideal)} would do")
    stride, element = record.get("stride"), record["bytes"]
    if stride is not None and abs(stride) == size * element:
        advice = (f"threadIdx.x and threadIdx.x + 1 {verb} elements a whole row of {array} apart: consecutive "
                  f"threadIdx.x should {verb} consecutive columns of {array}")
        if array == record["array"]:  # the lab's own names: its index expressions are the student's
            advice += f"; {GLOBAL_ADVICE[array]}"
    elif stride is not None and stride != element and stride % element == 0 and stride:
        advice = (f"threadIdx.x and threadIdx.x + 1 {verb} elements of {array} {abs(stride) // element} apart: "
                  f"consecutive threadIdx.x should {verb} consecutive elements")
    else:
        advice = f"the 32 threads of a warp should {verb} 32 consecutive elements of {array}"
    return message, advice


def _bank_conflict(record: dict, mean: float, ideal: float) -> tuple[str, str]:
    array, load = record["array"], record["kind"] == "shared_load"
    verb = "reads" if load else "stores"
    ways = _figure(mean)
    message = (f"line {record['line']}: {ways}-way bank conflict on {array}: each warp's "
               f"{'read' if load else 'store'} of {array} takes {ways} turns where {_figure(ideal)} would do")
    rows, columns, stride = record["rows"], record["columns"], record.get("stride")
    if columns and stride is not None and abs(stride) == columns * record["bytes"]:
        advice = (f"a warp {verb} down a column of {array}[{rows}][{columns}] (threadIdx.x and threadIdx.x + 1 "
                  f"in consecutive rows, whose starts share banks): swap the indices so that threadIdx.x picks "
                  f"the column, or pad each row by one element: {array}[{rows}][{columns + 1}]")
    else:
        advice = (f"consecutive threadIdx.x should {'read' if load else 'store'} consecutive 4-byte words of "
                  f"{array} (or the same word: that is a broadcast)")
    return message, advice


def _figure(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def measured_on_the_gpu(feedback: list[Feedback], lines: dict) -> list[Feedback]:
    """Each of the emulator's findings with what Nsight Compute measured at its line on the GPU (`lines`:
    ncu_csv.LineCounters by line), said after it: the same line, seen two ways. A finding whose line ncu
    measured nothing of that kind for is left as it was."""
    told = []
    for item in feedback:
        counters = lines.get(item.line) if item.source == "emulator" else None
        said = _measured(item.what, counters) if counters is not None else ""
        told.append(replace(item, message=f"{item.message}; {said}") if said else item)
    return told


def _measured(what: str, counters) -> str:
    if what == BANK_CONFLICT and counters.shared_ways() is not None:
        return (f"Nsight Compute measured this line's shared-memory accesses on the GPU at "
                f"{counters.shared_ways():.3g} wavefronts for each one they need")
    if what in (UNCOALESCED_LOAD, UNCOALESCED_STORE) and counters.excess_sectors() is not None:
        return (f"Nsight Compute measured this line's global accesses on the GPU at {counters.excess_sectors():.3g}× "
                "the sectors their bytes need")
    return ""
