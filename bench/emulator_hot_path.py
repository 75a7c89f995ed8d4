"""CPU seconds of the CPU emulator's harness on a grade's cases, and whether another tree's emulator tells them alike.

Usage: python3 bench/emulator_hot_path.py [--before TREE] [--after TREE] [--rounds N] [--cachegrind M,N,K|CASE]
[--corpus] [--split] [--case-limit S] [SUBMISSION ...]   (default: three corpus kernels; --corpus: every kernel of
tests/submissions that builds, those that do not listed; --split: a kernel without state's cases cut into the
block parts a grade cuts them into, run one after another and told as one worker's run; --case-limit: each
case's seconds, what a hanging kernel costs). Each submission's emulation is built by this tree's grader (or
--after's) and, with --before, by the grader in TREE (an earlier checkout: `git worktree add TREE REV`, or
`git archive REV grader config.yaml testcases reference | tar -x -C TREE`). Each round runs every
case of the project's testcases as a grade does (small cases in both thread orders, sampled large ones by their
blocks), in one worker so the figure is the harness's work alone: the CPU seconds of the sandboxed server and its
workers (less disturbed by other load than a wall time, yet on a shared machine they still vary). The trees take
turns within a round. With --before, every event (times left out) and every output must be the same bit for bit
in both trees: the script fails otherwise. Prints the median and the best of the rounds per submission and tree.

--cachegrind M,N,K (or CASE, a testcase's name: a sampled one runs its blocks as a grade does): the harness runs
under valgrind's cachegrind instead, on one case of that shape, forward order:
the instructions it ran, its data accesses and the misses of a simulated 32 KiB L1 data cache (server cores have
32-48 KiB): counts that no other load changes (CPU seconds on a loaded 2-core machine varied by a third).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from benchlib import ROOT

from grader.cases import load_cases
from grader.config import load_config
from grader.execute.child_run import block_samples
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import case_files, harness_driver
from grader.execute.cpu.schedule import Schedule
from grader.execute.job import CaseSpec, Job, student_output

DEFAULT = ["good_basic", "good_tile32_macro_sync", "missing_use_barrier"]
# Run with the tree's own grader first on the path: the emulation built from that tree's harness and header
BUILD = """
import sys
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from grader.config import load_config
from grader.execute.confine.sandbox import detect
from grader.execute.cpu.build import build
from grader.execute.job import Job
source, cache, work = Path(sys.argv[1]).read_text(), Path(sys.argv[2]), Path(sys.argv[3])
contract = load_config().kernel.contract()
built = build(source, contract, Job("", "", contract, [], str(cache), str(work)).tile, cache, work, detect(), 300)
assert built.binary is not None, built.message
import grader
assert grader.__file__.startswith(sys.argv[4]), grader.__file__
print(built.binary, built.state == [])
"""


def built(tree: Path, submission: Path, work: Path, may_fail: bool = False) -> tuple[Path, bool] | None:
    """The emulation of `submission` as `tree`'s grader builds it, and whether the kernel has no state; None where
    it does not build and `may_fail` (a corpus kernel that is a compile error)."""
    reachable(work)
    # one cache per tree (beside the submissions' folders): its harness object and header are built once
    said = subprocess.run([sys.executable, "-c", BUILD, str(submission / "kernel.cu"), str(work.parent / "cache"),
                           str(work), str(tree)], cwd=ROOT, capture_output=True, text=True)
    if said.returncode != 0:
        if may_fail:
            return None
        sys.exit(f"{submission.name} did not build in {tree}: {said.stderr[-2000:]}")
    said = said.stdout.split()
    return Path(said[0]), said[1] == "True"


class UnderCachegrind:
    """The sandbox, starting the harness under cachegrind, which writes its counts into the harness's folder."""

    def __init__(self, sandbox):
        self.sandbox = sandbox

    def popen(self, argv, confinement, **kwargs):
        counting = [shutil.which("valgrind") or "valgrind", "--tool=cachegrind", "--cache-sim=yes",
                    "--D1=32768,8,64", "--I1=32768,8,64", "--LL=1048576,16,64",
                    f"--cachegrind-out-file={confinement.workdir}/cachegrind.%p"]
        # valgrind makes system calls the harness's own filter refuses
        return self.sandbox.popen([*counting, *argv], replace(confinement, seccomp=False), **kwargs)

    def __getattr__(self, name):
        return getattr(self.sandbox, name)


def cachegrind_counts(folder: Path) -> dict[str, int]:
    """The instructions (Ir), data reads and writes (Dr, Dw) and L1 data misses (D1mr, D1mw) of every process."""
    total: dict[str, int] = {}
    for path in folder.glob("cachegrind.*"):
        lines = path.read_text().splitlines()
        events = next(line for line in lines if line.startswith("events:")).split()[1:]
        summary = next(line for line in lines if line.startswith("summary:")).split()[1:]
        for event, count in zip(events, summary):
            total[event] = total.get(event, 0) + int(count)
    return total


def reachable(folder: Path) -> None:
    """`folder` made, each folder on the way passable by the sandbox's uid (scratch_folder's is)."""
    for step in reversed([folder, *folder.parents]):
        if not step.exists():
            step.mkdir(mode=0o711)
            step.chmod(0o711)


def specs() -> list[CaseSpec]:
    config = load_config()
    samples = block_samples(load_cases(config.testcases_dir), config, {})
    return [CaseSpec(c.name, c.m, c.n, c.k, c.seed, c.distribution,
                     samples[c.name].to_wire() if c.name in samples else None)
            for c in load_cases(config.testcases_dir)]


def harness_cpu_s(sandbox_pid: int) -> float:
    """The CPU seconds of the harness's server below `sandbox_pid` and of the workers it reaped: read before the
    server ends (killed, it is reaped by no one who would count it)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        stats[int(entry.name)] = (name, int(fields[1]), fields)
    below = {sandbox_pid}
    while more := {pid for pid, (_, parent, _) in stats.items() if parent in below} - below:
        below |= more
    # The server is the harness whose parent is not one (its workers are forked from it)
    server = next(pid for pid in below if stats[pid][0] == "harness"
                  and stats.get(stats[pid][1], ("",))[0] != "harness")
    found = stats[server][2]
    utime, stime, cutime, cstime = (int(found[i]) for i in (11, 12, 13, 14))  # stat's fields 14-17
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def run_cases(binary: Path, stateless: bool, cases_: list[CaseSpec], work: Path, split: bool = False,
              limit_s: float = 600.0) -> tuple[float, list]:
    """Every case run as the CPU driver runs them, by one worker at a time: the CPU seconds and what was told.
    `split`: a kernel without state's cases cut into block parts as a grade cuts them (run one after another here),
    told as one worker's run."""
    contract = load_config().kernel.contract()
    reachable(work)
    job = Job("", "", contract, [], str(work / "cache"), str(work), cases=cases_)
    cases = case_files.Cases(job, work / "run")
    copy = harness_driver.readable_copy(binary, work / "bin")
    server = harness_driver.Server(copy, cases.folder, detect(), 1, len(cases_))
    try:
        tile = server.start(60)
        cases.write_inputs()
        limits = [limit_s] * len(cases_)
        schedule = Schedule(server, len(cases_), not stateless, 1, limit_s, 1,
                            lambda task: cases.start(server, task, tile, 1), limits, cases.sampled(),
                            cases.splits(tile) if split and stateless else None)
        events = list(harness_driver.case_events(schedule, cases, 1, limits, lambda index: None))
        seconds = harness_cpu_s(server.pid)
    finally:
        server.close()
    told = [json.dumps(without_times(event), sort_keys=True) for event in events]
    outputs = [job.output_path(spec.name, student_output(0)).read_bytes()
               for spec in cases_ if job.output_path(spec.name, student_output(0)).exists()]
    return seconds, [told, outputs]


def without_times(value):
    """The event as told, less the seconds it took (the driver's `seconds`, the harness's `cpu_s`)."""
    if isinstance(value, dict):
        return {key: without_times(item) for key, item in value.items() if key not in ("seconds", "cpu_s")}
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value


def counted_spec(case: str) -> CaseSpec:
    """The case `case` names: a shape `m,n,k` (every block), or a testcase's name (a sampled one: its blocks)."""
    if case[0].isdigit():
        return CaseSpec("counted", *[int(side) for side in case.split(",")], 7, "uniform")
    return next(spec for spec in specs() if spec.name == case)


def counted(binary: Path, spec: CaseSpec, work: Path) -> tuple[dict[str, int], list]:
    """One case run forward under cachegrind (a sampled one by its blocks, as a grade runs it): its counts and what
    was told."""
    contract = load_config().kernel.contract()
    reachable(work)
    job = Job("", "", contract, [], str(work / "cache"), str(work), cases=[spec])
    cases = case_files.Cases(job, work / "run")
    copy = harness_driver.readable_copy(binary, work / "bin")
    server = harness_driver.Server(copy, cases.folder, UnderCachegrind(detect()), 1)
    try:
        tile = server.start(600)
        cases.write_inputs()
        folder = cases.case_folder(0)
        blocks = case_files.blocks_file(folder, case_files.sampled_blocks(spec, tile, contract), 0) \
            if spec.sample else None
        code = server.run_alone("forward", "end", case_files.case_line(folder, spec, tile, contract, 0, blocks), 3000)
    finally:
        server.close()
    report = [without_times(json.loads(line)) for line in (folder / "report-0.jsonl").read_text().splitlines()]
    return cachegrind_counts(cases.folder), [code, report]


def compare_counts(paths: list[Path], trees: dict[str, Path], spec: CaseSpec, work: Path) -> None:
    for p in paths:
        told, counts = {}, {}
        for tree, root in trees.items():
            binary, _ = built(root, p, work / "build" / tree / p.name)
            counts[tree], told[tree] = counted(binary, spec, work / "counted" / tree / p.name)
        if len(told) == 2 and told["before"] != told["after"]:
            sys.exit(f"{p.name}: the trees' emulators told the case differently")
        print(f"{p.name:28s} " + "  ".join(
            f"{tree} Ir {c['Ir'] / 1e6:8.1f} M, D1 misses {(c['D1mr'] + c['D1mw']) / 1e6:6.2f} M, "
            f"data accesses {(c['Dr'] + c['Dw']) / 1e6:8.1f} M" for tree, c in counts.items()))


def corpus() -> list[Path]:
    """Every kernel of the known-bad corpus (and the good ones beside them)."""
    return sorted(path.parent for path in (ROOT / "tests" / "submissions").glob("*/kernel.cu"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, default=None, help="an earlier tree to build and run beside")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree to measure (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cachegrind", default="",
                        help="m,n,k or a testcase's name (a sampled one by its blocks): one case under cachegrind "
                             "instead")
    parser.add_argument("--corpus", action="store_true",
                        help="every kernel of tests/submissions that builds (those that do not are listed)")
    parser.add_argument("--split", action="store_true",
                        help="a kernel without state's cases cut into block parts, as a grade cuts them")
    parser.add_argument("--case-limit", type=float, default=600.0, help="seconds of each case (a hang's wait)")
    parser.add_argument("submissions", nargs="*")
    options = parser.parse_args()
    named = [Path(p).resolve() for p in options.submissions]
    paths = corpus() if options.corpus else named or [ROOT / "tests" / "submissions" / n for n in DEFAULT]
    after = options.after.resolve()
    trees = {"before": options.before.resolve(), "after": after} if options.before else {"after": after}
    if options.cachegrind:
        with scratch_folder("emulator-hot-path-") as work:
            compare_counts(paths, trees, counted_spec(options.cachegrind), work)
        return
    cases_ = specs()
    seconds: dict[tuple[str, str], list[float]] = {}
    with scratch_folder("emulator-hot-path-") as work:  # where the sandbox's uid can reach
        binaries = {(tree, p.name): built(root, p, work / "build" / tree / p.name, options.corpus)
                    for tree, root in trees.items() for p in paths}
        unbuilt = [p.name for p in paths if any(binaries[(tree, p.name)] is None for tree in trees)]
        if any(binaries[(tree, name)] is not None for tree in trees for name in unbuilt):
            sys.exit(f"built in one tree alone: {[n for n in unbuilt if any(binaries[(t, n)] for t in trees)]}")
        paths = [p for p in paths if p.name not in unbuilt]
        for number in range(options.rounds):
            for p in paths:
                told = {}
                for tree in trees:
                    binary, stateless = binaries[(tree, p.name)]
                    spent, told[tree] = run_cases(binary, stateless, cases_, work / f"run{number}" / tree / p.name,
                                                  options.split, options.case_limit)
                    seconds.setdefault((tree, p.name), []).append(spent)
                if len(told) == 2 and told["before"] != told["after"]:
                    sys.exit(f"{p.name}: the trees' emulators told the cases differently")
    print(f"harness CPU seconds over {len(cases_)} cases{' in parts' if options.split else ''}, {options.rounds} "
          "rounds: median (best)" + ("; events and outputs the same in both trees" if len(trees) == 2 else ""))
    for p in paths:
        print(f"{p.name:32s} " + "  ".join(
            f"{tree} {statistics.median(seconds[(tree, p.name)]):6.2f} s ({min(seconds[(tree, p.name)]):.2f})"
            for tree in trees))
    if len(paths) > 1:
        print(f"{'all ' + str(len(paths)):32s} " + "  ".join(
            f"{tree} {sum(statistics.median(seconds[(tree, p.name)]) for p in paths):6.2f} s" for tree in trees))
    if unbuilt:
        print(f"not built (in either tree): {', '.join(unbuilt)}")


if __name__ == "__main__":
    main()
