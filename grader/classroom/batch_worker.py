"""One student of a batch, graded in a process of its own: `python -m grader.classroom.batch_worker`, or a
worker forked from the batch's template (zygote.py), which runs grade_the_task_on_stdin after the same imports.

The batch parent sends (submission folder, config, cases, plan) pickled on stdin and reads the result as
JSON on stdout; only the parent stores it. A worker that dies, however it dies, costs that one student a
"grader error" row and nothing else.
"""
from __future__ import annotations

import json
import os
import pickle
import sys
from dataclasses import replace

from ..execute.confine.proc import die_with_parent
from ..pipeline import grade


def grade_the_task_on_stdin(channel: int | None = None) -> None:
    """`channel`: the sanitizer channel's fd in this process where it differs from the plan's (a forked
    worker receives it over a socket, under another number)."""
    path, config, cases, plan = pickle.loads(sys.stdin.buffer.read())
    if channel is not None:
        plan = replace(plan, sanitizer_channel=channel)
    if plan.sanitizer_channel is not None:
        os.set_inheritable(plan.sanitizer_channel, False)  # the parent's channel is this process's alone
    result = grade(path, config, cases, plan)
    sys.stdout.write(json.dumps(result.to_dict(with_log=True)))


def main() -> int:
    die_with_parent()  # a kill -9 of the batch takes every worker with it
    grade_the_task_on_stdin()
    return 0


if __name__ == "__main__":
    sys.exit(main())
