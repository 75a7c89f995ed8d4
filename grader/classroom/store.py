"""The one store of results, the batch's and the service's: each result written whole, signed, and found again
only as the grader wrote it.

A result is its JSON (the mark that it is whole: written last), its JUnit XML and its log, each replaced
atomically, and an HMAC of the JSON with a key only the grader's user can read, written before the JSON: a
result changed after the grader wrote it, or cut short, is not found (`--resume` grades it again). Only the
grader's own process writes here; no sandboxed process can reach the folder.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..cache_file import write_whole
from ..report.json_report import to_json
from ..report.junit_report import to_junit_xml
from ..result import SubmissionResult

KEY_FILE = ".results-key"


class ResultStore:
    def __init__(self, folder: Path, key_file: Path | None = None):
        """`folder` holds the results; the signing key is `key_file` (default: beside them)."""
        self.folder = Path(folder)
        self.key_file = key_file or self.folder / KEY_FILE

    def put(self, key: str, result: SubmissionResult) -> None:
        """The result's files, each replaced atomically; the JSON last, as the mark that the result is whole
        (its signature goes first: a batch killed between the two left a JSON that --resume could not trust,
        and graded again, though the batch had counted it done)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if result.log.strip():
            write_whole(self.folder / f"{key}.log", result.log)
        write_whole(self.folder / f"{key}.junit.xml", to_junit_xml([result]))
        text = to_json(result)
        write_whole(self.folder / f"{key}.json.sig", self._signature(text.encode()))
        write_whole(self.folder / f"{key}.json", text)

    def get(self, key: str) -> SubmissionResult | None:
        """The result stored under `key` as the grader wrote it (its signature holds), else None."""
        path = self.folder / f"{key}.json"
        try:
            data = path.read_bytes()
            signature = (self.folder / f"{key}.json.sig").read_text(encoding="ascii").strip()
            if not hmac.compare_digest(signature, self._signature(data)):
                return None  # changed after the grader wrote it
            return SubmissionResult.from_dict(json.loads(data.decode("utf-8")))
        except (OSError, ValueError, TypeError):
            return None  # missing, or not ours

    def _signature(self, data: bytes) -> str:
        return hmac.new(self._key(), data, hashlib.sha256).hexdigest()

    def _key(self) -> bytes:
        """The signing key: made once, readable by the grader's user alone, never inside a sandbox."""
        self.key_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self.key_file.read_bytes()
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32))
        return self.key_file.read_bytes()


@dataclass
class StoredResults:
    results: list[SubmissionResult] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)  # results whose signature does not hold: left out


def read_results(folder: Path) -> StoredResults:
    """Every result of a results folder: a batch's (OUTDIR: its students/ signed with its .results-key), only
    those whose signature holds; or a folder of `grade PATH -o` results, as they are. FileNotFoundError where
    the folder holds neither."""
    folder = Path(folder)
    signed = folder / "students"
    if signed.is_dir() and (folder / KEY_FILE).is_file():
        store, found = ResultStore(signed, folder / KEY_FILE), StoredResults()
        for path in sorted(signed.glob("*.json")):
            result = store.get(path.stem)
            if result is None:
                found.untrusted.append(path.stem)
            else:
                found.results.append(result)
        return found
    plain = sorted(folder.glob("*.json"))
    if not plain:
        raise FileNotFoundError(f"{folder}: not a results folder (no students/ of a `grade batch`, no result JSON)")
    found = StoredResults()
    for path in plain:
        try:
            found.results.append(SubmissionResult.from_dict(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            found.untrusted.append(path.stem)
    return found
