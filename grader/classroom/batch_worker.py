"""One student of a batch, graded in a process of its own: `python -m grader.classroom.batch_worker`.

The batch parent sends (submission folder, config, cases, plan) pickled on stdin and reads the result as
JSON on stdout; only the parent stores it. A worker that dies, however it dies, costs that one student a
"grader error" row and nothing else.
"""
from __future__ import annotations

import json
import os
import pickle
import sys

from ..execute.confine.proc import die_with_parent
from ..pipeline import grade


def main() -> int:
    die_with_parent()  # a kill -9 of the batch takes every worker with it
    path, config, cases, plan = pickle.loads(sys.stdin.buffer.read())
    if plan.sanitizer_channel is not None:
        os.set_inheritable(plan.sanitizer_channel, False)  # the parent's channel is this process's alone
    result = grade(path, config, cases, plan)
    sys.stdout.write(json.dumps(result.to_dict(with_log=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
