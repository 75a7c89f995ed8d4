"""The service's HTTP API (FastAPI).

    POST /v1/jobs?student=ID[&submitted_at=ISO]   body: the student's archive (a zip), `Authorization:
                                Bearer TOKEN`; submitted_at: when the LMS took it (ISO 8601 with its zone)
                                -> 202 {"id", "status": "queued", "position", "supersedes"}, or "status":
                                   "superseded" and "superseded_by" for one older than the student's newest
    GET  /v1/jobs/{id}          -> {"id", "status", "position"} and, once done, "result": the native JSON,
                                   or ?format=gradescope / prairielearn shaped for that LMS; a job a newer
                                   upload of the student replaced is "superseded", with "superseded_by"
    GET  /v1/leaderboard        -> {"leaderboard": [{"student", "gflops", "ratio"}, …]}: each student's best
                                   GFLOP/s over their timed runs, best first
    GET  /v1/health             -> {"status": "ok", "queued", "running"}, without a token (load balancers)

Each course has its own bearer token; a job is visible only with its course's token. A student's new upload
while an earlier one waits or is being graded is queued, never refused: the newest wins (the waiting one is
superseded). Newest by the LMS's own time of the submission where it says (`submitted_at`): one that arrives
after a newer one of the same student is superseded by it at once. Every refusal is a 4xx with the reason:
401 a missing or unknown token, 413 an archive over the cap, 429 over the hourly limit (with Retry-After:
when the oldest upload of the window leaves it), 400 anything malformed.
"""
from __future__ import annotations

import hmac
import io
import logging
import math
import re
import time
import zipfile
from dataclasses import dataclass
from datetime import datetime

from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from ..report.gradescope import timing_figures, to_gradescope
from ..report.prairielearn import to_prairielearn
from ..result import SubmissionResult
from .store import DONE, SUPERSEDED, JobStore

STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")  # LMS ids: numbers, logins, emails; fullmatch
JOB_ID = re.compile(r"[0-9a-f]{32}")
FORMATS = {"native": None, "gradescope": to_gradescope, "prairielearn": to_prairielearn}
LOGGED_QUERY = ("student", "format", "submitted_at")  # nothing else of a query is written to the log
AHEAD_S = 3600  # how far ahead of this service's clock an LMS's submission time may be (clocks drift)
log = logging.getLogger("grader.serve")


@dataclass(frozen=True)
class ServiceLimits:
    max_bytes: int = 8 << 20  # one student's archive, as batch intake caps a student's own zip
    per_window: int = 20  # jobs a student may submit per window
    window_s: float = 3600.0


def printable(text: str) -> str:
    """A request's path as one log line: a decoded %0A would otherwise start a forged line of its own."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def valid_student(student: str) -> bool:
    """The whole id, not a prefix: `nl1\\n` is not `nl1` (re.match's `$` would let the newline through)."""
    return STUDENT_ID.fullmatch(student) is not None


def submission_time(text: str) -> float | None:
    """`submitted_at` as epoch seconds (None when not given); a 400 naming the field for anything else: a time
    without its zone could be any of 26 hours, and one far ahead of ours would outrank every later upload."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise HTTPException(400, "submitted_at: when the LMS took the submission, an ISO 8601 time with its zone "
                                 f"(as 2026-03-01T14:22:32-07:00), not {text[:60]!r}")
    ahead = when.timestamp() - time.time()
    if ahead > AHEAD_S:
        raise HTTPException(400, f"submitted_at: {text[:60]} is {ahead / 3600:.1f} hours ahead of this service's "
                                 "clock")
    return when.timestamp()


def create_app(store: JobStore, tokens: dict[str, str], limits: ServiceLimits, wake=lambda: None) -> FastAPI:
    """`tokens`: course -> bearer token. `wake` tells the runner a job is waiting."""
    app = FastAPI(title="tiled-SGEMM grader", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def log_request(request: Request, call_next):
        """One line per request: never a header (the token travels in one), only known query fields."""
        started = time.perf_counter()
        response = await call_next(request)
        query = " ".join(f"{key}={request.query_params[key][:140]!r}" for key in LOGGED_QUERY
                         if key in request.query_params)
        peer = request.client.host if request.client else "-"
        log.info("%s %s %s%s -> %d %.3fs", peer, request.method, printable(request.url.path[:200]),
                 f" {query}" if query else "", response.status_code, time.perf_counter() - started)
        return response

    def course_of(authorization: str | None) -> str:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and token:
            for course, known in tokens.items():
                if hmac.compare_digest(token.encode(), known.encode()):
                    return course
        raise HTTPException(401, "a course's bearer token is required: Authorization: Bearer TOKEN",
                            headers={"WWW-Authenticate": "Bearer"})

    @app.get("/v1/health")
    def health():
        counts = store.counts()
        return {"status": "ok", "queued": counts["queued"], "running": counts["running"]}

    @app.post("/v1/jobs", status_code=202)
    async def submit(request: Request, student: str = Query(""), submitted_at: str = Query(""),
                     authorization: str | None = Header(None)):
        course = course_of(authorization)
        if not valid_student(student):
            raise HTTPException(400, "student: the student's LMS id is required (letters, digits, . _ @ + -; "
                                     "at most 128; no spaces or control characters)")
        submitted = submission_time(submitted_at)
        archive = await _body(request, limits.max_bytes)
        if not zipfile.is_zipfile(io.BytesIO(archive)):
            raise HTTPException(400, "the body must be the student's submission as a zip archive")
        now = time.time()
        recent = store.submitted_since(course, student, now - limits.window_s)
        if len(recent) >= limits.per_window:
            wait = max(1, math.ceil(recent[-limits.per_window] + limits.window_s - now))
            raise HTTPException(429, f"student {student} has submitted {limits.per_window} times in the last "
                                     f"{limits.window_s / 60:g} minutes; the next upload is taken in {wait} s",
                                headers={"Retry-After": str(wait)})
        job = store.add(course, student, archive, submitted)
        if job.status == SUPERSEDED:  # older than a submission of the student's the service already has
            log.info("job %s superseded course=%s student=%s by=%s (submitted before it, arrived after)", job.id,
                     course, student, job.superseded_by)
            return {"id": job.id, "status": job.status, "position": 0, "supersedes": [],
                    "superseded_by": job.superseded_by}
        log.info("job %s queued course=%s student=%s bytes=%d", job.id, course, student, len(archive))
        for older in job.supersedes:
            log.info("job %s superseded course=%s student=%s by=%s", older, course, student, job.id)
        wake()
        return {"id": job.id, "status": job.status, "position": store.position(job), "supersedes": job.supersedes}

    @app.get("/v1/jobs/{job_id}")
    def status(job_id: str, format: str = Query("native"), authorization: str | None = Header(None)):
        course = course_of(authorization)
        if format not in FORMATS:
            raise HTTPException(400, f"format: one of {', '.join(FORMATS)}")
        if JOB_ID.fullmatch(job_id) is None:
            raise HTTPException(400, "a job id is 32 hexadecimal digits, as POST /v1/jobs answered it")
        job = store.get(job_id)
        if job is None or job.course != course:  # another course's job does not exist for this token
            raise HTTPException(404, f"no job {job_id}")
        answer = {"id": job.id, "status": job.status, "position": store.position(job)}
        if job.status == SUPERSEDED:
            answer["superseded_by"] = job.superseded_by
            answer["detail"] = (f"not graded: student {job.student} uploaded again (job {job.superseded_by}) "
                                "before this one was graded; the newest upload, by the time the LMS took it, is "
                                "graded instead")
        if job.status == DONE and job.result is not None:
            shape = FORMATS[format]
            answer["result"] = shape(SubmissionResult.from_dict(job.result)) if shape else job.result
        return JSONResponse(answer)

    @app.get("/v1/leaderboard")
    def leaderboard(authorization: str | None = Header(None)):
        """Each student's best GFLOP/s over their timed runs, best first."""
        best: dict[str, dict] = {}
        for student, data in store.results(course_of(authorization)):
            figures = timing_figures(SubmissionResult.from_dict(data))
            gflops = figures.get("student_gflops")
            if gflops is not None and gflops > best.get(student, {}).get("gflops", -1.0):
                best[student] = {"student": student, "gflops": gflops, "ratio": figures["ratio"]}
        return {"leaderboard": sorted(best.values(), key=lambda row: -row["gflops"])}

    return app


async def _body(request: Request, cap: int) -> bytes:
    """The request body, refused (413) as soon as it passes the cap, whatever Content-Length claims."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise HTTPException(413, f"the archive is larger than {cap / (1 << 20):.3g} MB")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise HTTPException(413, f"the archive is larger than {cap / (1 << 20):.3g} MB")
    return bytes(body)
