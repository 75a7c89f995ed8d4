"""The service's HTTP API (FastAPI).

    POST /v1/jobs?student=ID    body: the student's archive (a zip), `Authorization: Bearer TOKEN`
                                -> 202 {"id", "status": "queued", "position"}
    GET  /v1/jobs/{id}          -> {"id", "status", "position"} and, once done, "result": the native JSON,
                                   or ?format=gradescope / prairielearn shaped for that LMS
    GET  /v1/leaderboard        -> {"leaderboard": [{"student", "gflops", "ratio"}, …]}: each student's best
                                   GFLOP/s over their timed runs, best first

Each course has its own bearer token; a job is visible only with its course's token. Every refusal is a
4xx with the reason: 401 a missing or unknown token, 413 an archive over the cap, 429 a second job in
flight for the student or too many in the window, 400 anything malformed.
"""
from __future__ import annotations

import hmac
import io
import re
import time
import zipfile
from dataclasses import dataclass

from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from ..report.gradescope import timing_figures, to_gradescope
from ..report.prairielearn import to_prairielearn
from ..result import SubmissionResult
from .store import DONE, JobStore

STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")  # LMS ids: numbers, logins, emails
FORMATS = {"native": None, "gradescope": to_gradescope, "prairielearn": to_prairielearn}


@dataclass(frozen=True)
class ServiceLimits:
    max_bytes: int = 8 << 20  # one student's archive, as batch intake caps a student's own zip
    per_window: int = 20  # jobs a student may submit per window
    window_s: float = 3600.0


def create_app(store: JobStore, tokens: dict[str, str], limits: ServiceLimits, wake=lambda: None) -> FastAPI:
    """`tokens`: course -> bearer token. `wake` tells the runner a job is waiting."""
    app = FastAPI(title="tiled-SGEMM grader", docs_url=None, redoc_url=None, openapi_url=None)

    def course_of(authorization: str | None) -> str:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and token:
            for course, known in tokens.items():
                if hmac.compare_digest(token.encode(), known.encode()):
                    return course
        raise HTTPException(401, "a course's bearer token is required: Authorization: Bearer TOKEN",
                            headers={"WWW-Authenticate": "Bearer"})

    @app.post("/v1/jobs", status_code=202)
    async def submit(request: Request, student: str = Query(""), authorization: str | None = Header(None)):
        course = course_of(authorization)
        if not STUDENT_ID.match(student):
            raise HTTPException(400, "student: the student's LMS id is required (letters, digits, . _ @ + -; "
                                     "at most 128)")
        archive = await _body(request, limits.max_bytes)
        if not zipfile.is_zipfile(io.BytesIO(archive)):
            raise HTTPException(400, "the body must be the student's submission as a zip archive")
        if store.in_flight(course, student):
            raise HTTPException(429, f"student {student} already has a job queued or being graded; "
                                     "wait for its result", headers={"Retry-After": "30"})
        if store.submitted_since(course, student, time.time() - limits.window_s) >= limits.per_window:
            raise HTTPException(429, f"student {student} has submitted {limits.per_window} times in the last "
                                     f"{limits.window_s / 60:g} minutes; try again later",
                                headers={"Retry-After": str(int(limits.window_s))})
        job = store.add(course, student, archive)
        wake()
        return {"id": job.id, "status": job.status, "position": store.position(job)}

    @app.get("/v1/jobs/{job_id}")
    def status(job_id: str, format: str = Query("native"), authorization: str | None = Header(None)):
        course = course_of(authorization)
        if format not in FORMATS:
            raise HTTPException(400, f"format: one of {', '.join(FORMATS)}")
        job = store.get(job_id)
        if job is None or job.course != course:  # another course's job does not exist for this token
            raise HTTPException(404, f"no job {job_id[:64]}")
        answer = {"id": job.id, "status": job.status, "position": store.position(job)}
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
        raise HTTPException(413, f"the archive is larger than {cap >> 20} MB")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise HTTPException(413, f"the archive is larger than {cap >> 20} MB")
    return bytes(body)
