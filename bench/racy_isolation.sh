#!/usr/bin/env bash
# Does a racy kernel's verdict in a batch equal its verdict alone, and does compute-sanitizer running beside
# it matter? (H100, 2026-11-24: square_16 of missing_load_barrier failed in every batch, 9 of 9 with this
# script and tests/test_batch_gpu.py, sanitizer off or on, and passed alone in 8 of 9: the race decides,
# not the neighbours.)
# Grades a small class in a batch with the sanitizer off, then on, and the racy kernel alone each way;
# prints the racy kernel's case verdicts side by side. Usage (GPU machine): bash bench/racy_isolation.sh
set -u
class=$(mktemp -d)
for name in good_basic good_tile8_renamed slow_uncoalesced b_wrong_stride missing_load_barrier no_bounds_checks hang; do
    mkdir -p "$class/$name" && cp "tests/submissions/$name/kernel.cu" "$class/$name/"
done
for mode in --no-sanitize --sanitize; do
    out=$(mktemp -d)
    python3 -m grader batch "$class" -o "$out/batch" --backend gpu "$mode" >/dev/null 2>&1
    python3 -m grader "$class/missing_load_barrier" --backend gpu "$mode" -o "$out/alone" >/dev/null 2>&1
    python3 - "$out" "$mode" <<'PY'
import json, sys
from pathlib import Path
out, mode = Path(sys.argv[1]), sys.argv[2]
batch = json.loads((out / "batch" / "students" / "missing_load_barrier.json").read_text())
alone = json.loads((out / "alone" / "missing_load_barrier.json").read_text())
verdicts = lambda r: {c["name"]: c["status"] for c in r["checks"] if c["kind"] == "case"}
b, a = verdicts(batch), verdicts(alone)
differ = {name: (b[name], a.get(name)) for name in b if b[name] != a.get(name)}
print(f"{mode}: batch score {batch['score']} alone {alone['score']}; cases that differ (batch, alone): {differ}")
PY
done
