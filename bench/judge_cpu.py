"""The parent's judging CPU per grade, this tree beside an earlier one (issue 50), on outputs shaped like kernels'.

Usage: python3 bench/judge_cpu.py [--before REF] [--repeat N] [--case NAME ...] [--detail]
  (default: --before main, --repeat 5, every case)

For each case and each output pattern, what one GPU grade's parent spends on it, in CPU seconds (numpy on one BLAS
thread, as in a batch worker): the case's truth read from the cache as a batch worker (a process per student) reads
it; the GPU's whole C judged against it, beside the reference kernel's C; then the emulator's C judged against the
same truth, or, of a large case, its sampled tiles alone against their truth (made or read per grade). The patterns:
a right kernel's float32 product; a missing barrier (scattered wrong elements); a wrong stride (most elements wrong,
some NaN read past B); no bounds checks (the partial edge tiles wrong); right sums stored at the wrong place. Each
side runs in a process of its own, with the grader package of its tree; every result's words and figures must be
equal on both sides, or the bench says which differ and exits 1.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POISON = 0x7FC0FFEE  # layout.POISON_BITS: what C holds where nothing was stored
TILE = 16  # the tile of most of a class's kernels (the reference's, the corpus's good ones)
PATTERNS = ("right", "missing_barrier", "wrong_stride", "no_bounds", "misplaced")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git ref of the tree to compare against")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--case", action="append", help="case name (default: every case)")
    parser.add_argument("--detail", action="store_true", help="a row per case as well")
    parser.add_argument("--side", help=argparse.SUPPRESS)  # a side's own process: the tree it measures
    args = parser.parse_args()
    if args.side:
        measure(Path(args.side), args.repeat, args.case)
        return
    with tempfile.TemporaryDirectory() as work:
        before = Path(work) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "grader"], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(before)
        sides = {label: _side(tree, args) for label, tree in (("before", before), ("after", ROOT))}
    report(sides, args.before, args.detail)


def _side(tree: Path, args) -> dict:
    # One BLAS thread, as a batch worker has (sandbox.ONE_BLAS_THREAD for its children; blas_threads for itself
    # sets up to 4, but a batch runs as many workers as cores).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--side", str(tree), "--repeat", str(args.repeat)]
    for name in args.case or []:
        command += ["--case", name]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.splitlines()[-1])


def report(sides: dict, ref: str, detail: bool) -> None:
    """Per case (--detail) or summed over the cases: each pattern's CPU by stage, and whether the words agree."""
    before, after = sides["before"], sides["after"]
    differ = sorted(key for key in before if before[key]["digest"] != after[key]["digest"])
    rows: dict[tuple, list[float]] = {}
    patterns = sorted({key.split("/")[1] for key in before} - {"-"})
    for key in before:
        case, pattern, stage = key.split("/")
        # A grade reads each case's truth once, whatever its C: in every pattern's total
        totals = [(each, "grade") for each in patterns] if pattern == "-" else [(pattern, "grade")]
        for row in [("every pattern", stage) if pattern == "-" else (pattern, stage), *totals,
                    *([(case, pattern, stage)] if detail else [])]:
            sums = rows.setdefault(row, [0.0, 0.0])
            sums[0] += before[key]["cpu"]
            sums[1] += after[key]["cpu"]
    print(f"parent CPU seconds of one grade reading every case's truth and judging it on the GPU and the emulator "
          f"(median of the repeats): {ref} -> this tree")
    print(f"{'':<40}{'before':>8}{'after':>8}")
    for row, (b, a) in sorted(rows.items(), key=lambda item: (len(item[0]), item[0])):
        print(f"{' / '.join(row):<40}{b:8.3f}{a:8.3f}  ({b / max(a, 1e-9):.1f}x)")
    print("every result's words and figures equal on both trees" if not differ else
          f"results differ between the trees: {', '.join(differ)}")
    if differ:
        sys.exit(1)


def measure(tree: Path, repeat: int, names: list[str] | None) -> None:
    """In a side's process: every case × pattern × stage, its median CPU and its result's digest, as one JSON line."""
    sys.path.insert(0, str(tree))
    import numpy as np

    from grader.cases import load_cases, sample_seed
    from grader.execute.cpu.sampling import BlockSample, sampled_tiles
    from grader.judge import truths
    from grader.judge.compare import CaseRun, judge_case
    from grader.judge.inputs import guarded_c, make_inputs, split_guarded

    assert Path(truths.__file__).is_relative_to(tree), truths.__file__
    with tempfile.TemporaryDirectory() as work:
        config = _config(Path(work))
        cases = [c for c in load_cases(config.testcases_dir) if not names or c.name in names]
        tolerance, tile = config.tolerance, TILE
        results = {}
        for case in cases:
            a, b = make_inputs(case.m, case.n, case.k, case.seed, case.distribution)
            truths.case_truth(case, config)  # as `grade prepare` leaves the cache

            def whole(case=case):  # what a batch worker (a process per student) reads of the case's truth
                _forget(truths, keep_inputs=False)
                return truths.case_truth(case, config)[2]
            results[f"{case.name}/-/read truth"] = _timed(whole, repeat, lambda truth: truth.value.tobytes())
            sampled_truth = _sampled(case, config, tile, truths, sample_seed, BlockSample, sampled_tiles)
            reference = _output("right", a, b, tile, np)
            for pattern in PATTERNS:
                c = _output(pattern, a, b, tile, np)

                def judged(c, truth, reference=None, case=case, a=a, b=b):
                    run = _run(c, case, guarded_c, split_guarded, CaseRun, reference)
                    return judge_case(case.name, case.points, a, b, run, tile, tolerance.k_factor, tolerance.abs,
                                      case.visibility, truth)

                def grade(c=c, sampled_truth=sampled_truth, whole=whole, reference=reference):
                    """One grade's two judgements of the case, each timed: the GPU's C beside the reference kernel's,
                    then the emulator's (of a sampled case only its tiles ran: the others still hold the poison)
                    against the same truth, or its tiles' truth made or read now."""
                    truth = whole()
                    started = time.process_time()
                    on_gpu = judged(c, truth, reference)
                    middle = time.process_time()
                    if sampled_truth is None:
                        emulated = judged(c, truth)
                    else:
                        tiles = sampled_truth()
                        emulated = judged(np.where(tiles.checked, c, np.array(POISON, np.uint32).view(np.float32)),
                                          tiles)
                    return {"gpu": (middle - started, on_gpu), "emulator": (time.process_time() - middle, emulated)}

                runs = [grade() for _ in range(repeat)]
                for stage in ("gpu", "emulator"):
                    results[f"{case.name}/{pattern}/{stage}"] = _median([run[stage] for run in runs], _words)
    print(json.dumps(results))


def _sampled(case, config, tile, truths, sample_seed, BlockSample, sampled_tiles):
    """What makes a sampled case's truth of its tiles per grade (None: the case is run whole on the CPU too)."""
    if not case.sampled:
        return None
    tiles = sampled_tiles(case.m, case.n, tile, BlockSample(sample_seed(case), config.sampling.interior_blocks))
    scope = tiles.describe()
    truths.sampled_case_truth(case, config, tiles.all, tile, scope)  # as `grade prepare` leaves the cache

    def made():
        _forget(truths)
        return truths.sampled_case_truth(case, config, tiles.all, tile, scope)[2]
    return made


def _config(work: Path):
    from grader.config import load_config
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    text = text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {work / 'cache'}")
    (work / "config.yaml").write_text(text)
    return load_config(work / "config.yaml")


def _forget(truths, keep_inputs: bool = True) -> None:
    """A batch worker grades one student: nothing is remembered from an earlier grade in this process (but the
    inputs, `keep_inputs`, which the case's truth made earlier in this grade)."""
    for name, value in vars(truths).items():
        if hasattr(value, "cache_clear") and not (keep_inputs and name == "_inputs"):
            value.cache_clear()


def _run(c, case, guarded_c, split_guarded, CaseRun, reference=None):
    buffer = guarded_c(case.m, case.n)
    split_guarded(buffer, case.m, case.n)[1][:] = c
    return CaseRun(buffer=buffer, reference=reference)


def _output(pattern: str, a, b, tile: int, np):
    """C as a kernel with this bug leaves it (m×n float32); seeded, so both sides judge the same bytes."""
    rng = np.random.default_rng(50)
    right = (a @ b).astype(np.float32)  # the GPU's float32 product: right within the tolerance
    m, n = right.shape
    k = a.shape[1]
    if pattern == "right":
        return right
    if pattern == "missing_barrier":  # a tile entry read before its thread stored it: scattered elements off
        c = right.copy()
        wrong = rng.random((m, n)) < 0.2
        c[wrong] += rng.standard_normal(int(wrong.sum())).astype(np.float32)
        return c
    if pattern == "wrong_stride":  # B[row * k + col] for B[row * n + col]: past B's end it reads the poison
        flat = np.concatenate([b.ravel(), np.full(k * k, np.nan, np.float32)])
        strided = flat[(np.arange(k)[:, None] * k + np.arange(n)[None, :])]
        return (a.astype(np.float64) @ strided.astype(np.float64)).astype(np.float32)
    if pattern == "no_bounds":  # the last phase's tiles read past the rows and columns: the ragged edge off
        c = right.copy()
        edge_rows, edge_cols = (m // tile) * tile, (n // tile) * tile
        c[edge_rows:, :] += 1.0
        c[:, edge_cols:] += 1.0
        return c
    if pattern == "misplaced":  # each row's sums stored one column over (a wrong index of C)
        return np.roll(right, 1, axis=1)
    raise ValueError(pattern)


def _timed(made, repeat: int, words) -> dict:
    runs = []
    for _ in range(repeat):
        started = time.process_time()
        result = made()
        runs.append((time.process_time() - started, result))
    return _median(runs, words)


def _median(runs: list[tuple[float, object]], words) -> dict:
    """The median CPU of the runs, and a digest of what the last one made (`words`: its bytes)."""
    cpu = sorted(seconds for seconds, _ in runs)[len(runs) // 2]
    return {"cpu": cpu, "digest": hashlib.sha256(words(runs[-1][1])).hexdigest()[:12]}


def _words(result) -> bytes:
    return json.dumps(asdict(result), sort_keys=True, default=str).encode()


if __name__ == "__main__":
    main()
