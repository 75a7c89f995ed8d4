"""Reporters: pure renderings of grader.result.SubmissionResult.

The names below are imported from their modules when first asked for (PEP 562): importing one reporter (the points'
words, Gradescope's visibilities) then costs that module alone, not Rich and every other format's, which `grade
PATH` would otherwise import before it starts its children (issue 50)."""
from __future__ import annotations

from importlib import import_module

_WHERE = {"to_json": "json_report", "write_json": "json_report", "format_points": "junit_report",
          "to_junit_suite": "junit_report", "to_junit_xml": "junit_report", "write_junit": "junit_report",
          "render": "terminal"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
