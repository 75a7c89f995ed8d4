"""A class of 300 generated submissions through `grade batch` on one GPU host, sanitizer on as batch
defaults (target: <= 3 min on the H100, 16 cores), then a sample graded alone: any verdict that differs
fails the run.

Usage: python3 bench/batch_300.py [COUNT] [SAMPLE] [CAP_S] [--no-sanitize] [--jobs=N] [--timeline] [--prepared]
CAP_S (default 600) stops a batch that runs that long and reports what it graded by then. --no-sanitize
(batch and sample alike) is for finding where the time goes; the target is met with the sanitizer on.
The batch's cache starts empty, so by default its wall includes building what every grade shares (the batch's
own `prepare`: truths, inputs, the reference's builds, the emulator's harness). --prepared runs `grade prepare`
into that cache first, as the README's install does, and prints its time apart: the batch an instructor runs
after installing.
Variants of the corpus's correct and buggy kernels, each made unique (a student comment, renamed
accumulator) so that no compile is a cache hit. Prints the wall time and where it went: compile CPU,
GPU busy fraction (NVML, sampled), sanitizer, timing, and the time students' runs waited for a turn.
--timeline adds, per 10 s, GPU and CPU busy and how many GPU children, tool runs, compilers and workers
started and ran: where the batch idles or queues.
"""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchlib import ROOT, config_with_cache, generate, grade_alone

from grader.config import load_config
from grader.diagnose.run import TOOLS
from grader.judge.verdicts import differences
from grader.on_gpu import NOT_JUDGED_LOG
from grader.result import SubmissionResult

TARGET_S, TARGET_COUNT = 180.0, 300  # the target: 300 submissions in 180 s; a smaller class meets its share
class GpuBusy:
    """The GPUs' utilisation, sampled by NVML every 100 ms while the batch runs."""

    def __init__(self):
        self.samples: list[float] = []
        self.timed: list[tuple[float, float]] = []  # (perf_counter, busy %) for the timeline
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            return
        while not self.stop.wait(0.1):
            busy = sum(pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles) / len(handles)
            self.samples.append(busy)
            self.timed.append((time.perf_counter(), busy))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def fraction(self) -> float | None:
        return sum(self.samples) / len(self.samples) / 100 if self.samples else None


def _label(proc: str, name: str) -> str:
    """A process's program name; for Python, with the module or script it runs (the batch's parent, a
    worker, a GPU child, the CPU driver), so Python's CPU splits by role."""
    if not name.startswith("python") and name != "compute-sanitiz":
        return name
    try:
        argv = Path(proc, "cmdline").read_bytes().split(b"\0")
    except OSError:
        return name
    if b"--tool" in argv[:-1]:
        return argv[argv.index(b"--tool") + 1].decode(errors="replace")
    words = [a.decode(errors="replace") for a in argv[1:] if a and not a.startswith(b"-")]
    module = argv[argv.index(b"-m") + 1].decode(errors="replace") if b"-m" in argv[:-1] else ""
    what = module or (Path(words[0]).name if words else "")
    return f"{name} {what}".strip()


class CpuUse:
    """Where the host's CPU went while the batch ran: busy fraction of all cores (/proc/stat), and CPU seconds
    by program name, from every process seen (/proc/PID/stat, sampled every 100 ms; a process that lives
    less than that is missed, so the names' sum is a lower bound)."""

    def __init__(self):
        self.last: dict[tuple[int, str], tuple[str, float]] = {}  # (pid, start) -> (name, CPU s when last seen)
        self.seen: dict[tuple[int, str], tuple[str, float, float]] = {}  # -> (name, first seen, last seen)
        self.stat: list[tuple[float, int, int]] = []  # (perf_counter, busy, idle ticks) for the timeline
        self.turns: list[tuple[float, str]] = []  # (perf_counter, how the GPU's turn file is held: WRITE/READ/"")
        self.turn_file: Path | None = None  # set by the caller: the first GPU's turn file in the batch's cache
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _busy_idle() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields[:8]) - idle, idle

    def _sample(self) -> None:
        while not self.stop.wait(0.1):
            self.stat.append((time.perf_counter(), *self._busy_idle()))
            self.turns.append((time.perf_counter(), self._turn_mode()))
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                key = int(entry.name), fields[19]
                label = self.last[key][0] if key in self.last else _label(entry.path, name)
                self.last[key] = (label, (int(fields[11]) + int(fields[12])) / self.tick)
                now = time.perf_counter()
                self.seen[key] = (label, self.seen[key][1] if key in self.seen else now, now)

    def _turn_mode(self) -> str:
        """WRITE while a case or timing measurement has the GPU alone, READ while sanitizer launches share
        it, "" while nobody holds it (from /proc/locks, by the turn file's inode)."""
        try:
            inode = self.turn_file.stat().st_ino if self.turn_file else None
        except OSError:
            return ""
        for line in Path("/proc/locks").read_text().splitlines():
            words = line.split()
            if len(words) > 5 and words[1] == "FLOCK" and words[5].endswith(f":{inode}"):
                return words[3]
        return ""

    def __enter__(self):
        self.start = self._busy_idle()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        busy, idle = (now - then for now, then in zip(self._busy_idle(), self.start))
        self.busy_fraction = busy / max(busy + idle, 1)

    def by_name(self) -> Counter:
        seconds = Counter()
        for name, cpu in self.last.values():
            seconds[name] += cpu
        return seconds


SANITIZE = "--no-sanitize" not in sys.argv
TIMELINE = "--timeline" in sys.argv
PREPARED = "--prepared" in sys.argv
JOBS = [arg.replace("--jobs=", "--jobs ").split()[i] for arg in sys.argv if arg.startswith("--jobs=") for i in (0, 1)]


def main() -> int:
    numbers = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(numbers[0]) if numbers else 300
    sample_size = int(numbers[1]) if len(numbers) > 1 else 30
    cap = float(numbers[2]) if len(numbers) > 2 else 600.0
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        students = generate(work / "class", count)
        config = config_with_cache(work / "cache", work)
        if PREPARED:
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "grader", "prepare", "--config", str(config), "--backend", "gpu"],
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            print(f"grade prepare into the batch's cache first, as the README's install: "
                  f"{time.perf_counter() - began:.1f} s (not in the wall below)")
        started = time.perf_counter()
        with GpuBusy() as busy, CpuUse() as cpu:
            cpu.turn_file = work / "cache" / "turns" / socket.gethostname() / "gpu0.turn"
            try:
                subprocess.run([sys.executable, "-m", "grader", "batch", str(work / "class"), "-o",
                                str(work / "out"), "--config", str(config), "--backend", "gpu",
                                *([] if SANITIZE else ["--no-sanitize"]), *JOBS], check=True,
                               cwd=ROOT, stdout=subprocess.DEVNULL, timeout=cap)
            except subprocess.TimeoutExpired:
                print(f"STOPPED: the batch ran past {cap:g} s")
        wall = time.perf_counter() - started
        results = {p.stem: SubmissionResult.from_dict(json.loads(p.read_text()))
                   for p in (work / "out" / "students").glob("*.json")}
        if len(results) < count:
            report(list(results.values()), wall, cores, busy.fraction())
            print(f"FAILED: {len(results)} of {count} graded")
            return 1
        report(list(results.values()), wall, cores, busy.fraction())
        if TIMELINE:
            timeline(started, wall, busy, cpu)
        top = ", ".join(f"{name} {seconds:.0f}" for name, seconds in cpu.by_name().most_common(10))
        print(f"  CPU busy: {cpu.busy_fraction:.0%} of {cores} cores over the wall; "
              f"CPU s by program (lower bound): {top}")
        max_ratio = load_config(config).timing.max_ratio
        sample = random.Random(11).sample(students, min(sample_size, len(students)))
        differing = 0
        for student in sample:
            alone = grade_alone(student, config, work / "alone", "gpu", SANITIZE)
            found = differences(results[student.name], alone, max_ratio)
            if found:
                differing += 1
                print(f"DIFFERS {student.name}: " + "; ".join(found))
        print(f"{len(sample)} graded alone: {len(sample) - differing} with the batch's verdicts, {differing} differ")
    if differing or len(results) != count:
        print("FAILED: the batch did not grade every student as grading them alone does")
        return 1
    return 0 if meets(wall, count) else 2


def meets(wall: float, count: int) -> bool:
    return count / wall >= TARGET_COUNT / TARGET_S


# What the timeline counts, by the sampled processes' labels: the CUDA programs a student starts (the GPU
# child and each tool's), the compilers, and the workers.
KINDS = {"child": ("gpu.child",), "racecheck": ("racecheck",), "memcheck": ("memcheck",),
         "synccheck": ("synccheck",), "nvcc": ("cicc", "ptxas", "nvcc", "cudafe++"), "worker": ("batch_worker",)}


def timeline(started: float, wall: float, busy: GpuBusy, cpu: CpuUse, window: float = 10.0) -> None:
    """Per window of the batch: GPU and CPU busy, the share of it the first GPU's turn was held alone (cases,
    timing) and shared (sanitizer launches), and per kind of process how many started in it and how many
    were alive on average (a CUDA program's start and end are what a batch queues on)."""
    print(f"  timeline per {window:g} s: GPU%, CPU%, then per kind started/alive on average")
    print("    " + " ".join(f"{h:>7}" for h in ("t", "GPU%", "CPU%", "alone%", "shared%", *KINDS)))
    for t0 in [started + i * window for i in range(int(wall // window) + 1)]:
        t1 = t0 + window
        gpu = [b for t, b in busy.timed if t0 <= t < t1]
        stat = [(b, i) for t, b, i in cpu.stat if t0 <= t < t1]
        cpu_busy = ((stat[-1][0] - stat[0][0]) / max(1, (stat[-1][0] - stat[0][0]) + (stat[-1][1] - stat[0][1]))
                    if len(stat) > 1 else 0.0)
        modes = [mode for t, mode in cpu.turns if t0 <= t < t1]
        held = [100 * sum(m == mode for m in modes) / max(1, len(modes)) for mode in ("WRITE", "READ")]
        cells = [f"{t0 - started:7.0f}", f"{sum(gpu) / max(1, len(gpu)):7.0f}", f"{cpu_busy * 100:7.0f}",
                 *(f"{h:7.0f}" for h in held)]
        for words in KINDS.values():
            spans = [(first, last) for label, first, last in cpu.seen.values() if any(w in label for w in words)]
            began = sum(1 for first, _ in spans if t0 <= first < t1)
            alive = sum(max(0.0, min(last, t1) - max(first, t0)) for first, last in spans) / window
            cells.append(f"{began:3d}/{alive:<4.1f}")
        print("    " + " ".join(cells))


def report(results: list[SubmissionResult], wall: float, cores: int, busy: float | None) -> None:
    checks = [c for r in results for c in r.checks]
    compile_cpu = sum(c.metrics.get("child_cpu_s") or 0 for c in checks if c.kind == "compile")
    waits = sum(c.metrics.get("turn_wait_s") or 0 for c in checks)
    held = Counter()
    for c in checks:
        if c.kind == "compile":
            held.update(c.metrics.get("turn_held_s") or {})
        elif c.kind == "sanitizer":
            held["sanitizer"] += (c.metrics.get("turn_held_s") or 0) * _share(c, *TOOLS)
    timing = sum(c.metrics.get("phase_s") or 0 for c in checks if c.kind == "timing")
    sanitizer = sum((c.metrics.get(f"{tool}_s") or 0) * _share(c, tool) for c in checks if c.kind == "sanitizer"
                    for tool in TOOLS)
    groups = Counter(c.metrics["sanitizer_group"] for c in checks if c.kind == "sanitizer" and
                     c.metrics.get("sanitizer_group"))
    vouched = Counter(tool for c in checks if c.kind == "sanitizer" for tool in c.metrics.get("sanitizer_grouped", ()))
    retimed = sum(1 for c in checks if c.kind == "timing" and c.metrics.get("measurements", 1) > 1)
    outcomes = Counter(r.outcome for r in results)
    print(f"{len(results)} submissions on {cores} cores, sanitizer {'on' if SANITIZE else 'OFF'}: wall {wall:.1f} s "
          f"({'meets' if meets(wall, len(results)) else 'MISSES'} the target of {TARGET_COUNT} in {TARGET_S:g} s: "
          f"{len(results) / wall:.2f}/s of {TARGET_COUNT / TARGET_S:.2f}/s); {dict(outcomes)}")
    print(f"  GPU children's CPU until their kernels loaded (start-up; nvcc only where a child compiled, not the "
          f"parent's builds ahead): {compile_cpu:.1f} s, {compile_cpu / cores:.1f} s per core")
    print(f"  sanitizer tools: {sanitizer:.1f} s of tool runs; timing measurements: {timing:.1f} s "
          f"({retimed} timed again near the limit)")
    print(f"  sanitizer checked in groups: {sum(groups.values())} students (group size: students "
          f"{dict(sorted(groups.items()))}); tools vouched for by a group, students: {dict(vouched)}; the rest alone")
    print(f"  GPU busy: {'n/a' if busy is None else f'{busy:.0%} of the wall'}; "
          f"runs waited {waits:.1f} s in all for a turn on the GPU (not counted against anyone)")
    print("  GPU held (s) by " + ", ".join(f"{kind} turns {seconds:.1f}" for kind, seconds in sorted(held.items())))
    print("  a student's mean seconds: " + ", ".join(f"{what} {value:.2f}" for what, value in phases(results)))
    print("  the slowest grades (a batch's tail): " + "; ".join(slowest(results)))
    for line in not_judged_by_the_emulator(results):
        print(line)


def not_judged_by_the_emulator(results: list[SubmissionResult]) -> list[str]:
    """Each student whose cases the emulator beside the GPU did not judge (compute-sanitizer judged them instead,
    on the grade's time), with why: a batch's outputs are gone when it ends, and for a kernel the emulator can
    build, that is the grader's failure to explain."""
    lines = []
    for result in results:
        compiled = next((c for c in result.checks if c.kind == "compile"), None)
        if compiled is None or "safety_tools_s" not in compiled.metrics:
            continue
        logged = result.log.split(NOT_JUDGED_LOG, 1)[1].strip().splitlines()[:3] if NOT_JUDGED_LOG in result.log else []
        why = " | ".join(filter(None, [compiled.metrics.get("emulator_why_not", ""), *logged]))
        lines.append(f"  NOT JUDGED BY THE EMULATOR: {result.submission} (the tools took "
                     f"{compiled.metrics['safety_tools_s']} s): {why[:500]}")
    return lines


def slowest(results: list[SubmissionResult], count: int = 8) -> list[str]:
    """The longest grades, each with its three longest phases: what a batch's last minutes wait on."""
    def words(result: SubmissionResult) -> str:
        top = sorted(result.phases.items(), key=lambda item: -item[1])[:3]
        return f"{result.submission} {result.duration_s:.1f} s (" + ", ".join(f"{n} {s:.1f}" for n, s in top) + ")"

    return [words(r) for r in sorted(results, key=lambda r: -(r.duration_s or 0))[:count]]


def _share(check, *tools: str) -> float:
    """A student's share of a sanitizer check's times for these tools: where a group vouched for them all, its
    times are the whole group's; where the student was checked alone for any of them, its own (for the GPU
    time held, summed over the tools, an over-count where a group vouched for some only)."""
    grouped = set(check.metrics.get("sanitizer_grouped", ()))
    return 1 / (check.metrics.get("sanitizer_group") or 1) if grouped >= set(tools) else 1.0


def phases(results: list[SubmissionResult]) -> list[tuple[str, float]]:
    """Where a graded student's time went, on average: the whole grade, the GPU child until its modules were
    built and until its timing was done, its waits for turns, and each sanitizer tool's run and waits."""
    def mean(kind: str, metric: str) -> float:
        values = [c.metrics[metric] for r in results for c in r.checks
                  if c.kind == kind and isinstance(c.metrics.get(metric), (int, float))]
        return sum(values) / max(1, len(values))

    graded = [r.duration_s for r in results if r.graded and r.duration_s]
    return [("grade", sum(graded) / max(1, len(graded))), ("child built", mean("compile", "ready_after_s")),
            ("child timed", mean("timing", "done_after_s")), ("child waited", mean("compile", "turn_wait_s")),
            *((tool, mean("sanitizer", f"{tool}_s")) for tool in ("racecheck", "memcheck", "synccheck")),
            ("tools waited", mean("sanitizer", "turn_wait_s"))]


if __name__ == "__main__":
    sys.exit(main())
