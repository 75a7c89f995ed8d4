"""The class summary page: how the batch went, at a glance, in one self-contained index.html.

Why: after grading a class an instructor wants the shape of it before any single student's file:
how many compiled, the score distribution (out of the points the run could check: without a GPU, the
page says what needs one), how fast kernels were against the reference (time ratios, and each kernel's
GFLOP/s against the reference's), which findings on how to make it faster were common (result.feedback, by
kind), and which mistakes were common (grouped by cause, failure_cause(): one student's bug in twenty cases
is one row, counted once). Instructor-facing: full messages, hidden cases included. Everything comes from
the results as stored; every student text is HTML-escaped.
The plots are PNGs written next to the page and also inlined, so the page can be mailed alone.
matplotlib is imported only here and only when plotting; without it the page says so.
"""
from __future__ import annotations

import base64
import html
import io
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.report.points import format_points, run_gpu_note, run_total
from grader.report.regrade import Regrade, verdict_words
from grader.report.status import LABELS, status_label
from grader.report.student_view import cause_of
from grader.result import ERROR, FAILED, TIMING, CheckResult, SubmissionResult

SCORE_PNG = "score_histogram.png"
TIMING_PNG = "timing_ratio.png"
GFLOPS_PNG = "gflops.png"
TOP_FAILURES = 10

_CSS = """body{font-family:sans-serif;margin:2em;max-width:60em}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #999;padding:.3em .6em;text-align:left;vertical-align:top}td.n{text-align:right}
pre{margin:0;white-space:pre-wrap}img{max-width:100%}.note{color:#555}"""


def timing_ratios(results: list[SubmissionResult]) -> list[float]:
    """Student time / reference time from each timing check that measured one (metrics["ratio"])."""
    return [float(c.metrics["ratio"]) for r in results for c in r.checks
            if c.kind == TIMING and isinstance(c.metrics.get("ratio"), (int, float))]


def class_gflops(results: list[SubmissionResult]) -> list[tuple[str, float, float]]:
    """(submission, its GFLOP/s, the reference's GFLOP/s in the same measurement) from each timing check that
    measured both (metrics["student_gflops"], ["reference_gflops"]: judge/timing.py), fastest first."""
    found = [(r.submission, float(c.metrics["student_gflops"]), float(c.metrics["reference_gflops"]))
             for r in results for c in r.checks
             if c.kind == TIMING and all(isinstance(c.metrics.get(key), (int, float))
                                         for key in ("student_gflops", "reference_gflops"))]
    return sorted(found, key=lambda row: -row[1])


def common_findings(results: list[SubmissionResult]) -> list[tuple[str, int, str]]:
    """(kind of finding, submissions that have it, one of its messages) over result.feedback, most common first:
    the how-to-make-it-faster advice the class got (issue 26)."""
    counts: Counter = Counter()
    example: dict[str, str] = {}
    for result in results:
        for what in dict.fromkeys(item.what for item in result.feedback):
            counts[what] += 1
        for item in result.feedback:
            example.setdefault(item.what, item.message)
    return [(what, n, example[what]) for what, n in counts.most_common()]


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def failure_cause(check: CheckResult) -> str:
    """What the class summary groups a failed check by: the kinds of unsafe thing the kernel did in it (two
    students reading past B's end at different lines made one mistake), else the cause a student's own report
    groups it by (student_view.cause_of)."""
    if check.unsafe:
        return "unsafe: " + ", ".join(sorted(set(check.unsafe)))
    return cause_of(check)


@dataclass
class Failure:
    """One cause, over the class: who showed it, in which checks, and one message that says it."""

    cause: str
    example: str
    submissions: dict[str, None] = field(default_factory=dict)  # insertion-ordered sets
    checks: dict[str, None] = field(default_factory=dict)


def common_failures(results: list[SubmissionResult], top: int = TOP_FAILURES) -> list[Failure]:
    """The causes of failed and errored checks, by how many submissions show each, most first (ties in the
    order first seen)."""
    groups: dict[str, Failure] = {}
    for result in results:
        for check in result.checks:
            if check.status in (FAILED, ERROR):
                cause = failure_cause(check)
                group = groups.setdefault(cause, Failure(cause, first_line(check.message)))
                group.submissions[result.submission] = None
                group.checks[check.name] = None
    return sorted(groups.values(), key=lambda group: -len(group.submissions))[:top]


def _checks_cell(names: list[str], shown: int = 4) -> str:
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _out_of(results: list[SubmissionResult]) -> str:
    """"36", or from a run without a GPU "74 checkable without a GPU"."""
    total = format_points(run_total(results))
    return f"{total} checkable without a GPU" if run_gpu_note(results) else total


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _plots(results: list[SubmissionResult]) -> dict[str, bytes] | None:
    """The PNGs by file name; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on a grading server
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return None
    written: dict[str, bytes] = {}
    scores = [r.score for r in results]
    if scores:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        total = run_total(results)
        ax.hist(scores, bins=min(20, max(5, len(set(scores)))), range=(0, total) if total > 0 else None,
                color="#4477aa", edgecolor="white")
        ax.set_xlabel(f"score (points out of {_out_of(results)})")
        ax.set_ylabel("submissions")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("Scores")
        fig.tight_layout()
        written[SCORE_PNG] = _png(fig)
        plt.close(fig)
    ratios = timing_ratios(results)
    if ratios:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist(ratios, bins=min(20, max(5, len(ratios))), color="#228833", edgecolor="white")
        limits = {c.metrics["max_ratio"] for r in results for c in r.checks
                  if c.kind == TIMING and isinstance(c.metrics.get("max_ratio"), (int, float))}
        for limit in sorted(limits):
            ax.axvline(limit, color="#cc3311", linestyle="--", label=f"limit {limit:g}×")
        if limits:
            ax.legend()
        ax.set_xlabel("student time / reference time")
        ax.set_ylabel("submissions")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title("Kernel time against the reference")
        fig.tight_layout()
        written[TIMING_PNG] = _png(fig)
        plt.close(fig)
    gflops = class_gflops(results)
    if gflops:
        written[GFLOPS_PNG] = _gflops_plot(plt, gflops)
    return written


def _gflops_plot(plt, gflops: list[tuple[str, float, float]]) -> bytes:
    """Each timed kernel's GFLOP/s, fastest first, against the reference's (median of its measurements)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(range(len(gflops)), [g for _, g, _ in gflops], color="#4477aa")
    reference = statistics.median(ref for _, _, ref in gflops)
    ax.axhline(reference, color="#cc3311", linestyle="--", label=f"reference {reference:.0f} GFLOP/s")
    ax.legend()
    ax.set_xticks([])
    ax.set_xlabel(f"submissions, fastest first ({len(gflops)} timed)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("The class's GFLOP/s against the reference")
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    return png


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>'


def _row(*cells: str, numeric: tuple[int, ...] = ()) -> str:
    return "<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{c}</td>' for i, c in enumerate(cells)) + "</tr>"


def render_summary(results: list[SubmissionResult], plots: dict[str, bytes] | None,
                   regrade: Regrade | None = None) -> str:
    e = html.escape
    labels = Counter(status_label(r) for r in results)
    scores = [r.score for r in results]
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>Class summary</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>Class summary</h1>", f"<p>{len(results)} submissions.</p>",
             "<h2>Submissions by status</h2>", "<table><tr><th>status</th><th>count</th></tr>"]
    for label in [*LABELS, *sorted(set(labels) - set(LABELS))]:
        parts.append(_row(e(label), str(labels.get(label, 0)), numeric=(1,)))
    parts.append("</table>")
    parts.append("<h2>Scores</h2>")
    if scores:
        parts.append(f"<p>mean {format_points(round(statistics.mean(scores), 2))}, "
                     f"median {format_points(round(statistics.median(scores), 2))} points out of "
                     f"{e(_out_of(results))}, over all submissions (those not graded count as they scored).</p>")
        if run_gpu_note(results):
            parts.append(f"<p>Graded without a GPU: {e(run_gpu_note(results))}, not checked in this run, so "
                         "they are in no score here.</p>")
    else:
        parts.append("<p>No submissions.</p>")
    if plots is None:
        parts.append('<p class="note">The plots need matplotlib (pip install matplotlib).</p>')
    elif SCORE_PNG in plots:
        parts.append(_img(plots[SCORE_PNG], "histogram of scores"))
    parts.append("<h2>Timing</h2>")
    ratios = timing_ratios(results)
    if not ratios:
        parts.append('<p class="note">No timing measurements in these results.</p>')
    else:
        parts.append(f"<p>{len(ratios)} kernels timed; median ratio to the reference "
                     f"{statistics.median(ratios):.2f}×.</p>")
        if plots and TIMING_PNG in plots:
            parts.append(_img(plots[TIMING_PNG], "distribution of student time / reference time"))
        if plots and GFLOPS_PNG in plots:
            parts.append(_img(plots[GFLOPS_PNG], "each kernel's GFLOP/s against the reference's"))
    parts += _findings_part(results)
    parts.append(f"<h2>Most common failures (top {TOP_FAILURES})</h2>")
    failures = common_failures(results)
    if failures:
        parts.append("<p>Grouped by cause: a mistake shown by many cases of one submission counts once.</p>"
                     "<table><tr><th>cause</th><th>submissions</th><th>checks</th><th>for example</th></tr>")
        parts.extend(_row(f"<pre>{e(f.cause)}</pre>", str(len(f.submissions)), e(_checks_cell(list(f.checks))),
                          f"<pre>{e(f.example)}</pre>", numeric=(1,)) for f in failures)
        parts.append("</table>")
    else:
        parts.append("<p>No failed or errored checks.</p>")
    parts += _regrade_part(regrade) if regrade is not None else []
    noted = [(r.submission, note) for r in results for note in r.intake_notes]
    if noted:
        parts.append("<h2>Intake notes</h2><p>Which file was graded where a student handed in several, and what "
                     "was refused.</p><table><tr><th>submission</th><th>note</th></tr>")
        parts.extend(_row(e(name), e(note)) for name, note in noted)
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _findings_part(results: list[SubmissionResult]) -> list[str]:
    """The most common how-to-make-it-faster findings: advice the students got, worth no points."""
    findings = common_findings(results)
    if not findings:
        return []
    e = html.escape
    return ["<h2>Most common findings (how to make it faster)</h2>",
            "<p>Advice from the emulator, the compiled kernel and Nsight Compute; worth no points.</p>",
            "<table><tr><th>finding</th><th>submissions</th><th>for example</th></tr>",
            *(_row(e(what), str(n), f"<pre>{e(example)}</pre>", numeric=(1,)) for what, n, example in findings),
            "</table>"]


def _regrade_part(regrade: Regrade) -> list[str]:
    """What a regrade (`grade batch --against`) changed: by cause, the students whose submission changed apart,
    then each changed student's scores and changed checks."""
    e = html.escape
    parts = ["<h2>Regrade</h2>", f"<p>{len(regrade.changed)} students changed ({len(regrade.went_down)} went down), "
             f"{regrade.unchanged} unchanged; every changed check is in regrade.csv.</p>"]
    if regrade.differences:
        parts.append("<p>Graded with, then and now:</p><ul>" +
                     "".join(f"<li>{e(line)}</li>" for line in regrade.differences) + "</ul>")
    groups = [(group.cause, group.students) for group in regrade.groups]
    if regrade.submissions_changed:
        groups.append(("submission changed", [change.key for change in regrade.submissions_changed]))
    if groups:
        parts.append("<table><tr><th>cause</th><th>students</th><th>who</th></tr>")
        parts.extend(_row(e(cause), str(len(keys)), e(_checks_cell(keys, 10)), numeric=(1,)) for cause, keys in groups)
        parts.append("</table>")
    if regrade.changed:
        parts.append("<table><tr><th>submission</th><th>old</th><th>new</th><th>changed checks</th></tr>")
        parts.extend(_row(e(change.key), format_points(change.old.score), format_points(change.new.score),
                          "<br>".join(e(f"{check.name}: {verdict_words(check.old)} → {verdict_words(check.new)} "
                                        f"({check.cause})") for check in change.checks) or e("; ".join(change.causes)),
                          numeric=(1, 2)) for change in regrade.changed)
        parts.append("</table>")
    return parts


def summary_files(results: list[SubmissionResult], regrade: Regrade | None = None) -> dict[str, str | bytes]:
    """index.html and the plot PNGs beside it, by file name: the export, as a pure function of the results (and,
    after a regrade, of its comparison with the earlier results)."""
    plots = _plots(results)
    return {"index.html": render_summary(results, plots, regrade), **(plots or {})}


def write_summary(results: list[SubmissionResult], outdir: str | Path) -> Path:
    """Write outdir/index.html (and the plot PNGs beside it); return the page's path."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, content in summary_files(results).items():
        if isinstance(content, bytes):
            (outdir / name).write_bytes(content)
        else:
            (outdir / name).write_text(content, encoding="utf-8")
    return outdir / "index.html"
