#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
# The autograder zip holds this file and run_autograder at its root, next to the grader's source
# (pyproject.toml, README.md, grader/, config.yaml, testcases/, reference/, presets/), extracted to
# /autograder/source. Build it from the repository root with:
#   zip -r autograder.zip pyproject.toml README.md grader config.yaml testcases reference presets
#   zip -j autograder.zip gradescope/setup.sh gradescope/run_autograder
set -euo pipefail

SOURCE=/autograder/source
VENV=/autograder/venv

apt-get update -qq
# g++ builds the CPU emulator: Gradescope has no GPU, so the cases run on it (timing is left for a GPU).
apt-get install -y -qq python3 python3-venv python3-pip g++ >/dev/null

# A venv, so pip never fights the system Python; editable, so the grader finds config.yaml,
# testcases/ and reference/ beside its package in $SOURCE.
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
extra=""
if command -v nvidia-smi >/dev/null 2>&1; then
    extra="[gpu]"  # pycuda builds against the CUDA toolkit, which a GPU image must provide
fi
"$VENV/bin/pip" install -q -e "${SOURCE}${extra}"

# What every grade shares (the CPU emulator's harness and precompiled header, the reference's builds, the cases'
# truths), built now into the image's cache (root's, as run_autograder runs): each submission is graded in a fresh
# container from this image, and none then waits for them. Where it cannot make one (no sandbox while the image
# is built), the first grade in each container makes it: the image is still good.
cd "$SOURCE"
"$VENV/bin/grade" prepare || echo "grade prepare: not all prepared; each container's first grade makes the rest" >&2
