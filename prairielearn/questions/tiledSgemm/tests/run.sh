#!/usr/bin/env bash
# PrairieLearn's entrypoint (info.json): the student's kernel.cu is in /grade/student, and PrairieLearn
# reads /grade/results/results.json, which it does not create. `grade prairielearn` always writes it; a
# submission that does not compile is "gradable": false unless config.yaml says
# `prairielearn: {compile_error_graded: true}`.
set -euo pipefail

RESULTS=/grade/results/results.json
mkdir -p "$(dirname "$RESULTS")"
cd /grader

if ! python3 -m grader prairielearn /grade/student /grade/results/results.json; then
    # The grader itself broke before writing results: the attempt is not counted against the student.
    if [ ! -s "$RESULTS" ]; then
        printf '%s\n' '{"gradable": false, "format_errors": ["The autograder failed before it could grade this submission. Please tell your instructor."]}' >"$RESULTS"
    fi
fi
