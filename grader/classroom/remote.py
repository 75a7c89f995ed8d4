"""`grade gradescope|prairielearn … --remote URL`: the submission graded by a `grade serve` service, so
the student's code never runs in the LMS's container and gets the GPU's checks.

Only the student's kernel.cu travels (zipped), with the time the LMS took the submission (Gradescope's
`submission_metadata.json`, PrairieLearn's job data), so the service keeps each student's newest by the LMS's
clock, whatever order containers post in. The service answers the native result; the LMS file is rendered
here from it, as for a local grade. Within --remote-timeout the client waits as the service asks
(`Retry-After` on a 429 or 503) and rides out a service that restarts (unreachable, 5xx: tried again with
a growing pause). When it finally gets no grade (a refused token, an archive over the cap, the hourly limit
past the timeout, the service down), the instructor chooses: grade here on the CPU with a note saying so,
or write a "grader error" whose message tells the student, in words, that this is not their grade, and
whose `regrade_reason` tells the instructor what happened, so those rows can be found and graded again.
"""
from __future__ import annotations

import email.utils
import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from ..result import GRADER_ERROR, SubmissionResult

POLL_S = 1.0
REQUEST_S = 30.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # pauses before asking an unreachable or failing service again
WAIT_CODES = (429, 503)  # answers whose Retry-After says when to ask again
NOT_A_GRADE = ("This is not a grade, and nothing is wrong with your code on this account: your instructor can "
               "see which submissions were not graded and will grade this one again.")


class RemoteUnavailable(Exception):
    """The service could not grade this submission. `str()` is for the instructor; `student` says it in words
    for the student."""

    def __init__(self, instructor: str, student: str = "", superseded: bool = False):
        super().__init__(instructor)
        self.student = student or "The grading service could not grade your submission."
        self.superseded = superseded  # the student's newer upload is graded instead: nothing is left to do


def grade_remotely(kernel: Path, student: str, url: str, token: str, timeout_s: float,
                   sleep=time.sleep, headers: dict[str, bytes] | None = None,
                   submitted_at: str = "") -> SubmissionResult:
    """`headers`: the files handed in beside kernel.cu (config compile.handed_in_headers), sent beside it.
    `submitted_at`: when the LMS took the submission (ISO 8601), "" where it does not say."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.write(kernel, "kernel.cu")
        for name, data in (headers or {}).items():
            zipped.writestr(name, data)
    base = url.rstrip("/")
    deadline = time.monotonic() + timeout_s
    query = urllib.parse.urlencode({"student": student, **({"submitted_at": submitted_at} if submitted_at else {})})
    queued = _patiently(lambda: _call("POST", f"{base}/v1/jobs?{query}", token, archive.getvalue()), deadline,
                        sleep, timeout_s)
    job = f"{base}/v1/jobs/{urllib.parse.quote(str(queued.get('id', '')))}"
    while True:
        answer = _patiently(lambda: _call("GET", job, token), deadline, sleep, timeout_s)
        if answer.get("status") == "done" and isinstance(answer.get("result"), dict):
            return SubmissionResult.from_dict(answer["result"])
        if answer.get("status") == "superseded":
            raise RemoteUnavailable(
                f"job {queued.get('id')} was superseded by the student's newer upload (job "
                f"{answer.get('superseded_by')}), which is graded instead",
                "You submitted again before this submission was graded, so your newest submission is graded "
                "instead of this one. This is not a grade: your newest submission's result is.", superseded=True)
        if time.monotonic() + POLL_S > deadline:
            raise RemoteUnavailable(f"{base} had not finished grading job {queued.get('id')} after {timeout_s:g} s "
                                    f"(--remote-timeout; status {answer.get('status')!r}, position "
                                    f"{answer.get('position')})",
                                    f"The grading service did not finish grading your submission within "
                                    f"{timeout_s:g} s; it is busy. {NOT_A_GRADE}")
        sleep(POLL_S)


class _Again(Exception):
    """An answer worth asking again after a pause: `wait` seconds (the service's Retry-After), or None."""

    def __init__(self, failure: RemoteUnavailable, wait: float | None):
        super().__init__(str(failure))
        self.failure, self.wait = failure, wait


def _patiently(call, deadline: float, sleep, timeout_s: float) -> dict:
    """call(), asked again as the service says (Retry-After) or after a growing pause, until the deadline."""
    for attempt in range(1_000_000):
        try:
            return call()
        except _Again as again:
            pause = again.wait if again.wait is not None else BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            left = deadline - time.monotonic()
            if pause > left:
                waited = (f"; it asked to wait {pause:g} s, more than the {max(left, 0):.0f} s left of "
                          f"--remote-timeout {timeout_s:g}" if again.wait is not None
                          else f"; still so after --remote-timeout {timeout_s:g} s")
                raise RemoteUnavailable(str(again.failure) + waited, again.failure.student) from None
            sleep(pause)
    raise AssertionError("unreachable")


def _call(method: str, url: str, token: str, body: bytes | None = None) -> dict:
    request = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"Bearer {token}"})
    if body is not None:
        request.add_header("Content-Type", "application/zip")
    where = url.split("/v1/")[0]
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_S) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:
        failure = RemoteUnavailable(f"{where} answered {error.code} to {method} {url[len(where):].split('?')[0]}: "
                                    f"{_detail(error)}{_instructor_fix(error.code)}", _student_words(error.code))
        if error.code in WAIT_CODES or error.code >= 500:
            raise _Again(failure, _retry_after(error.headers.get("Retry-After")) if error.code in WAIT_CODES
                         else None) from None
        raise failure from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise _Again(RemoteUnavailable(f"the grading service at {where} could not be reached ({reason})",
                                       f"The grading service could not be reached. {NOT_A_GRADE}"), None) from None


def _instructor_fix(code: int) -> str:
    """What the instructor changes for a refusal that is the set-up's, not the student's."""
    if code in (401, 403):
        return " (--token-file must hold this course's token exactly as the service's --tokens file lists it)"
    if code == 413:
        return " (the service's --max-mb is below this archive's size)"
    return ""


def _student_words(code: int) -> str:
    if code == 401:
        why = "The grading service did not accept this course's key (a setup problem, not your submission)."
    elif code == 413:
        why = "The grading service refused your submission as too large for it."
    elif code == 429:
        why = ("You have submitted more often in the last hour than the grading service takes; submit again "
               "later, or wait for your instructor to grade this one again.")
    elif code >= 500:
        why = "The grading service failed while taking your submission."
    else:
        why = f"The grading service refused the request ({code})."
    return f"{why} {NOT_A_GRADE}"


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number of seconds or an HTTP date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read()).get("detail", ""))[:300]
    except (ValueError, AttributeError, OSError):
        return error.reason or ""


GRADESCOPE_METADATA = "submission_metadata.json"  # beside /autograder/submission
PRAIRIELEARN_DATA = Path("data", "data.json")  # beside /grade/student
PRAIRIELEARN_TIME = "_submitted_at"  # what prairielearn/questions/tiledSgemm/server.py stamps at submission


def student_of(submission: Path, given: str) -> str:
    """The student's LMS id: given, or Gradescope's submission metadata beside the submission folder."""
    if given:
        return given
    found = _json_value(Path(submission).parent / GRADESCOPE_METADATA, ("users", 0, "id"))
    return "" if found is None else str(found)


def submitted_at_of(submission: Path, given: str) -> str:
    """When the LMS took the submission: given (--submitted-at), or Gradescope's `created_at`, or the time the
    PrairieLearn question stamped into its submitted answers; "" where none says."""
    if given:
        return given
    folder = Path(submission).parent
    for path, keys in ((folder / GRADESCOPE_METADATA, ("created_at",)),
                       (folder / PRAIRIELEARN_DATA, ("submitted_answers", PRAIRIELEARN_TIME))):
        found = _json_value(path, keys)
        if isinstance(found, str) and found:
            return found
    return ""


def _json_value(path: Path, keys: tuple) -> object | None:
    """A value of a JSON file, by its keys and indexes; None where the file or a step is missing."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
        for key in keys:
            value = value[key]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return value


def mark_for_regrade(result: SubmissionResult, url: str) -> SubmissionResult:
    """A grader error the service itself reported (its worker died, the cluster failed) is marked too."""
    if result.outcome == GRADER_ERROR and not result.regrade_reason:
        result.regrade_reason = f"the grading service at {url} could not grade it: {result.message}"
    return result
