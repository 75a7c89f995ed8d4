"""`grade gradescope|prairielearn … --remote URL`: the submission graded by a `grade serve` service, so
the student's code never runs in the LMS's container and gets the GPU's checks.

Only the student's kernel.cu travels (zipped). The service answers the native result; the LMS file is
rendered here from it, as for a local grade. When the service cannot be reached or does not answer in
time, the instructor chooses: grade here on the CPU with a note saying so, or fail with the reason (a
"grader error": the LMS shows an error, never a low score).
"""
from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from .result import SubmissionResult

POLL_S = 1.0
REQUEST_S = 30.0


class RemoteUnavailable(Exception):
    """The service could not grade this submission: unreachable, refused, or too slow."""


def grade_remotely(kernel: Path, student: str, url: str, token: str, timeout_s: float) -> SubmissionResult:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.write(kernel, "kernel.cu")
    base = url.rstrip("/")
    queued = _call("POST", f"{base}/v1/jobs?{urllib.parse.urlencode({'student': student})}", token,
                   archive.getvalue())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = _call("GET", f"{base}/v1/jobs/{urllib.parse.quote(str(queued['id']))}", token)
        if answer.get("status") == "done" and isinstance(answer.get("result"), dict):
            return SubmissionResult.from_dict(answer["result"])
        time.sleep(POLL_S)
    raise RemoteUnavailable(f"no result from {base} in {timeout_s:g} s")


def _call(method: str, url: str, token: str, body: bytes | None = None) -> dict:
    request = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"Bearer {token}"})
    if body is not None:
        request.add_header("Content-Type", "application/zip")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_S) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        detail = _detail(error)
        raise RemoteUnavailable(f"the grading service answered {error.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise RemoteUnavailable(f"the grading service at {url.split('/v1/')[0]} could not be reached ({reason})") \
            from None


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("detail", ""))[:300]
    except (ValueError, AttributeError, OSError):
        return error.reason or ""


def student_of(submission: Path, given: str) -> str:
    """The student's LMS id: given, or Gradescope's submission metadata beside the submission folder."""
    if given:
        return given
    try:
        metadata = json.loads((Path(submission).parent / "submission_metadata.json").read_text(encoding="utf-8"))
        return str(metadata["users"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return ""
