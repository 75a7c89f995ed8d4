"""JSON report: the model's own dict, serialised; nothing is recomputed here."""
from __future__ import annotations

import json
from pathlib import Path

from grader.result import SubmissionResult


def to_json(result: SubmissionResult) -> str:
    # to_dict already fixes the key order (submission, score, max_score, status, checks, ...);
    # sort_keys would break that, so it stays off.
    return json.dumps(result.to_dict(), indent=2, ensure_ascii=False)


def write_json(result: SubmissionResult, path: str | Path) -> None:
    Path(path).write_text(to_json(result) + "\n", encoding="utf-8")
