"""A pytest plugin: the run fails when a test skipped for any reason but missing hardware.

Why: a skip looks green. `pytest.importorskip("jsonschema")` once hid 28 export tests in CI for want of a
pip package. Only a missing GPU, driver, pycuda or CUDA toolkit may skip a test (tests/hardware.py makes
those reasons); any other skip is listed at the end of the run and turns its exit status into a failure.
conftest.py loads it; tests/test_skip_policy.py runs it on small suites of its own.
"""
from __future__ import annotations

import re

import pytest
from hardware import HARDWARE

# pytest.importorskip's reason for the GPU-only packages, which only a GPU machine installs.
_GPU_PACKAGE = re.compile(r"^could not import '(pycuda|cupy|pynvml)(\.[\w.]+)?'")


def allowed(reason: str) -> bool:
    return reason.startswith(HARDWARE) or bool(_GPU_PACKAGE.match(reason))


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipPolicy:
    def __init__(self) -> None:
        self.hidden: list[str] = []

    def _note(self, report) -> None:
        # An xfail is reported as skipped with `wasxfail`: an expected failure, not a skip.
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _reason(report)
            if not allowed(reason):
                self.hidden.append(f"{report.nodeid}: {reason}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)  # a module-level importorskip skips the whole file at collection

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.hidden:
            terminalreporter.section("skips that hide tests", red=True)
            terminalreporter.line("Only a missing GPU, driver, pycuda or CUDA toolkit may skip a test "
                                  "(tests/hardware.py); install what these need (the `test` extra):")
            for line in self.hidden:
                terminalreporter.line(f"  {line}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # Only a run that would have passed changes: an interrupt or an internal error keeps its own status.
        if self.hidden and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipPolicy(), "skip-policy")
