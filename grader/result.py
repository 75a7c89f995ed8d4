"""The one result model. Every reporter is a pure function of these dataclasses.

A verdict is decided once, by the stage that owns it, and stored here; reporters only render it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Check kinds
COMPILE = "compile"
STATIC = "static"
CASE = "case"
TIMING = "timing"
SANITIZER = "sanitizer"  # compute-sanitizer's diagnosis: feedback, worth no points

# Check statuses
PASSED = "passed"
FAILED = "failed"  # the submission ran and gave a wrong answer / broke a rule
ERROR = "error"  # it could not run: compile error, fault, timeout
SKIPPED = "skipped"  # not attempted, with the reason in the message

# Submission outcomes: what happened to the submission as a whole, decided once by the pipeline and read
# by every reporter. Only the last two mean "not graded"; of those, only a grader error is the grader's fault.
GRADED = "graded"
COMPILE_ERROR = "compile error"
TIMED_OUT = "timed out"  # compiling (or starting the child) ran past its limit
# Graded on the CPU, but the emulator cannot run what the kernel uses (inline PTX, ...): those cases are
# not passed and stay in the total, and the grade is held for a GPU (exports never write it as final).
NEEDS_GPU_GRADE = "needs GPU grade"
GRADER_ERROR = "grader error"
SUBMISSION_ERROR = "submission error"
OUTCOMES = (GRADED, COMPILE_ERROR, TIMED_OUT, NEEDS_GPU_GRADE, GRADER_ERROR, SUBMISSION_ERROR)
NOT_GRADED = (GRADER_ERROR, SUBMISSION_ERROR)

PUBLIC = "public"
HIDDEN = "hidden"

# How a submission's code was confined (SubmissionResult.sandbox), strongest first; execute/confine/sandbox.py decides.
NAMESPACES_AND_UID, NAMESPACES, UID_ONLY, NO_SANDBOX = "namespaces+uid", "namespaces", "uid-only", "none"
UNSAFE_NOTE = "graded without a sandbox (--unsafe-no-sandbox): the submission's code ran with the grader's powers"


@dataclass
class CheckResult:
    name: str
    kind: str
    status: str
    score: float
    max_score: float
    message: str = ""
    visibility: str = PUBLIC
    # Figures scripts may want (errors, GFLOP/s, ratio, line numbers); never needed to render a verdict.
    metrics: dict[str, Any] = field(default_factory=dict)
    # Non-empty when this check cannot be made without a GPU and was not (a CPU run): why, in a few words
    # ("timing", "large cases"). Such a check is "not checked here", never a failure; set by the pipeline
    # from the machine and the config alone, never from what a submission does, but for timing under the
    # speed model (timing.without_gpu: model), held where its estimate lies too near the limit to decide.
    needs_gpu: str = ""
    # What to change, each in words that hold for every case it shows in: reports say each fix once, with
    # the list of checks it explains (report/student_view.py); the message keeps this check's facts.
    fixes: list[str] = field(default_factory=list)
    # What the kernel did in this case that is unsafe whatever its values (judge/findings.py's kinds: an
    # out-of-bounds access, a shared-memory race, a read of a shared entry never written whose value reaches C, a
    # divergent barrier or warp collective): a case with any is not passed, on every engine.
    unsafe: list[str] = field(default_factory=list)
    # What is worth cleaning up though no point depends on it (a read of a shared entry no thread stored, whose
    # value reached no element of C), each in words that hold for every case it shows in: reports say each once.
    hints: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def explained(self) -> str:
        """The message and its fixes, for an output that shows one check on its own (a JUnit test case)."""
        return "\n".join([self.message, *self.fixes]) if self.fixes else self.message

    @property
    def checkable(self) -> bool:
        return not self.needs_gpu


def passed(name: str, kind: str, points: float, message: str = "", **extra: Any) -> CheckResult:
    return CheckResult(name, kind, PASSED, points, points, message, **extra)


def failed(name: str, kind: str, points: float, message: str, **extra: Any) -> CheckResult:
    return CheckResult(name, kind, FAILED, 0.0, points, message, **extra)


def errored(name: str, kind: str, points: float, message: str, **extra: Any) -> CheckResult:
    return CheckResult(name, kind, ERROR, 0.0, points, message, **extra)


def skipped(name: str, kind: str, points: float, message: str, **extra: Any) -> CheckResult:
    return CheckResult(name, kind, SKIPPED, 0.0, points, message, **extra)


# Kinds of performance feedback (Feedback.what)
UNCOALESCED_LOAD = "uncoalesced load"
UNCOALESCED_STORE = "uncoalesced store"
BANK_CONFLICT = "bank conflict"
OCCUPANCY = "occupancy"
SPILLS = "register spills"
THROUGHPUT = "throughput"


@dataclass
class Feedback:
    """One way to make the kernel faster, from evidence the grader observed (the emulator's view of every
    access, the compiled kernel's resources, or Nsight Compute on a GPU). Advice only: worth no points."""

    what: str  # one of the kinds above
    message: str  # the finding in the student's terms, at their line: "line 12: each warp's load of B ..."
    advice: str  # what to change
    line: int | None = None  # in the student's file; None for the kernel as a whole
    value: float | None = None  # the student's figure (sectors per request, conflict ways, occupancy %)
    reference_value: float | None = None  # the reference kernel's figure on the same case
    unit: str = ""  # of value and reference_value: "sectors per request", "way", "%", "registers"
    source: str = ""  # who observed it: "emulator", "compiler", "ncu"


CPU_EMULATOR = "CPU emulator"  # what a result graded on the CPU backend was graded on, where a GPU's name would be


@dataclass
class Provenance:
    """What a result was graded with (issue 51): enough to tell, when two gradings of one submission differ,
    whether the grader, the configuration, the cases, the machine or the submission changed. Hashes only
    (sha256, hex), never the secret: the cases' seeds, into which a secret may be mixed, are left out of the
    cases' digests (a seed changed in a case file changes that file's hash). The machine is the result's own
    device, backend and sandbox (SubmissionResult.graded_on, .sandbox)."""

    grader_version: str = ""  # the package's version
    grader_digest: str = ""  # its code (every .py of the package): an upgrade nobody numbered still shows
    config_sha256: str = ""  # the configuration file as read ("" for the project's defaults alone)
    # The configuration's values that decide verdicts, by dotted key ("timing.max_ratio": 2.0); paths and the
    # timing seed left out (a path differs from machine to machine; a secret may be mixed into the seed).
    settings: dict[str, Any] = field(default_factory=dict)
    case_files: dict[str, str] = field(default_factory=dict)  # case file name -> its sha256
    cases: dict[str, str] = field(default_factory=dict)  # case name -> its definition's digest, seed left out
    reference_sha256: str = ""  # the reference kernel
    submission_sha256: str = ""  # what was handed in: the kernel and the handed-in headers
    toolkit: str = ""  # the CUDA toolkit's nvcc release ("" where none is installed)
    driver: str = ""  # the NVIDIA driver's version ("" where none is loaded)


@dataclass
class SubmissionResult:
    submission: str
    outcome: str
    checks: list[CheckResult] = field(default_factory=list)
    # Who handed it in, as the LMS knows them (batch intake fills these; empty for a single folder).
    student_id: str = ""
    student_name: str = ""
    # Why a submission could not be graded at all (status "error"), or notes on how it was graded.
    message: str = ""
    backend: str = ""
    # How the submission's code was confined: "namespaces+uid", "namespaces", "uid-only" or "none".
    sandbox: str = ""
    # Why it was confined less than namespaces+uid (what this machine or user did not allow); "" otherwise.
    sandbox_note: str = ""
    device: str = ""
    tile_size: int | None = None
    duration_s: float = 0.0
    # Full child output, kept for the instructor; student-facing reports never show it.
    log: str = ""
    # The first lines the student's kernel printed (judge/printed.py), shown back to the student with a note.
    printed: list[str] = field(default_factory=list)
    # What the grade depends on (kernel, config, cases, grader), so a batch --resume can trust it.
    fingerprint: str = ""
    # Who handed it in, by the ids a gradebook matches (batch intake fills what the LMS told it): a Canvas
    # user id, an SIS user id, an SIS login (email or user name). student_id keeps the id as intake read it.
    canvas_user_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    # How intake chose this student's file (the newest of several, the only .cu, ...) and what it refused.
    intake_notes: list[str] = field(default_factory=list)
    # The LMS marked the submission late (a Canvas download names it so); False where the LMS does not say.
    late: bool = False
    # Set when no grade came for the grader's or a service's sake (the grading service refused or could not be
    # reached): what happened, for the instructor, who finds these rows by it and grades them again.
    regrade_reason: str = ""
    # How to make it faster (issue 26): advice from observed evidence, worth no points; most telling first.
    feedback: list[Feedback] = field(default_factory=list)
    # Where the grade's wall time went, in seconds per phase (grader/phases.py), for the instructor and the
    # benches; consecutive, so they add up to the grading process's time.
    phases: dict[str, float] = field(default_factory=dict)
    # What it was graded with (grader, config, cases, toolkit, driver); None where nothing was recorded (a result
    # of a grader from before records were kept, or a submission refused before anything was graded).
    provenance: Provenance | None = None

    @property
    def graded_on(self) -> str:
        """The GPU it ran on, "CPU emulator", or "" where nothing says (its cases did not run on a GPU)."""
        return CPU_EMULATOR if self.backend == "cpu" else self.device

    @property
    def status(self) -> str:
        """The coarse JSON status scripts have read since the first version: "graded" or "error"."""
        return "error" if self.outcome in NOT_GRADED else "graded"

    @property
    def graded(self) -> bool:
        return self.outcome not in NOT_GRADED

    @property
    def score(self) -> float:
        return round(sum(c.score for c in self.checks), 6)

    @property
    def max_score(self) -> float:
        return round(sum(c.max_score for c in self.checks), 6)

    @property
    def checkable_max(self) -> float:
        """The points this run could award: max_score less the checks that need a GPU it did not have."""
        return round(sum(c.max_score for c in self.checks if c.checkable), 6)

    @property
    def needs_gpu_points(self) -> float:
        return round(self.max_score - self.checkable_max, 6)

    def to_dict(self, with_log: bool = False) -> dict[str, Any]:
        """The stored result; `with_log` keeps the child's output, for a grading process handing its result
        to the one that stores it (from_dict takes it back either way)."""
        data = asdict(self)
        if not with_log:
            data.pop("log")
        data["score"] = self.score
        data["max_score"] = self.max_score
        data["status"] = self.status
        ordered = {key: data.pop(key) for key in ("submission", "score", "max_score", "status", "outcome", "checks")}
        ordered.update(data)
        return ordered

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubmissionResult:
        fields = {k: v for k, v in data.items()
                  if k not in ("score", "max_score", "status", "checks", "feedback", "provenance")}
        checks = [CheckResult(**c) for c in data.get("checks", [])]
        feedback = [Feedback(**f) for f in data.get("feedback", [])]
        provenance = Provenance(**data["provenance"]) if data.get("provenance") else None
        return cls(checks=checks, feedback=feedback, provenance=provenance, **fields)
