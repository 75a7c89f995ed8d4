"""Rules of the architecture that a refactor could silently break.

The import rules read every `import` of the package's source, those inside functions too (a lazy import is
still a dependency), so they hold without importing anything.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "grader"
# A class walks intake -> classroom -> pipeline -> report; the stages below a class never reach back up.
ENTRIES = ("grader.cli", "grader.__main__", "grader.serve")
ONE_SUBMISSION = ("grader.intake", "grader.source", "grader.execute", "grader.judge", "grader.diagnose", "grader.plan",
                  "grader.on_gpu", "grader.on_cpu", "grader.settle",
                  "grader.report", "grader.pipeline", "grader.emulation", "grader.rubric", "grader.run_events")
# What starts workers over many students or reaches a cluster's: the class's stage alone uses these (the service
# hands its jobs to classroom/'s Workers or to its cluster client).
SPREADS_STUDENTS = ("distributed", "multiprocessing", "grader.classroom.batch_worker")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def imported(name: str) -> set[str]:
    """Every module `name` imports (absolute names; `from . import x` names x where x is a module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES}
    return found - {name}


IMPORTS = {name: imported(name) for name in MODULES}


def within(module: str, prefixes) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def circles() -> list[list[str]]:
    """The package's import circles (strongly connected parts of more than one module), Tarjan's way."""
    graph = {name: {m for m in found if m in MODULES} for name, found in IMPORTS.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while not part or part[-1] != node:
                part.append(stack.pop())
                on_stack.discard(part[-1])
            if len(part) > 1:
                found.append(sorted(part))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_the_import_graph_is_read_whole():
    # The rules below mean nothing if the reading missed the package: each stage is there, with its links.
    stages = {"grader.pipeline", "grader.classroom.batch", "grader.execute.runner", "grader.report.junit_report"}
    assert stages <= set(MODULES)
    assert "grader.execute.early" in IMPORTS["grader.pipeline"]
    assert "grader.execute.spawn" in IMPORTS["grader.execute.early"]
    assert "grader.execute.spawn" in IMPORTS["grader.execute.runner"]
    assert "grader.execute.confine.sandbox" in IMPORTS["grader.execute.spawn"]


def test_no_module_imports_itself_back_through_others():
    assert circles() == []


@pytest.mark.parametrize("stage", ["grader.report", "grader.judge"])
def test_the_judge_and_the_reports_import_nothing_that_runs_code(stage):
    # Verdicts and reports are pure functions of the results: nothing of execute/ (the children, the sandbox).
    reached = {name: sorted(m for m in found if within(m, ["grader.execute"]))
               for name, found in IMPORTS.items() if within(name, [stage])}
    assert {name: found for name, found in reached.items() if found} == {}


def test_one_submissions_stages_never_reach_up_to_the_class_or_the_commands():
    reached = {name: sorted(m for m in found if within(m, ["grader.classroom", *ENTRIES]))
               for name, found in IMPORTS.items() if within(name, ONE_SUBMISSION)}
    assert {name: found for name, found in reached.items() if found} == {}


def test_the_class_stage_never_reaches_up_to_the_commands_or_the_service():
    reached = {name: sorted(m for m in found if within(m, ENTRIES))
               for name, found in IMPORTS.items() if within(name, ["grader.classroom"])}
    assert {name: found for name, found in reached.items() if found} == {}


def test_only_the_class_stage_spreads_students_over_workers():
    # The service and the commands hand a class to classroom/; they start no workers of their own.
    spreading = {name: sorted(m for m in found if within(m, SPREADS_STUDENTS))
                 for name, found in IMPORTS.items() if not within(name, ["grader.classroom"])}
    assert {name: found for name, found in spreading.items() if found} == {}


def test_only_the_gpu_child_imports_pycuda():
    importing = sorted(name for name, found in IMPORTS.items() if within("pycuda", found) or
                       any(within(m, ["pycuda"]) for m in found))
    assert importing == ["grader.execute.gpu.child"]


def test_the_parent_side_never_imports_cuda():
    # Everything but the child's main() must import on a machine without a GPU, and the parent
    # must never initialise CUDA (a forked or reused CUDA context is the classic grader bug).
    code = ("import sys, grader.cli, grader.pipeline, grader.execute.runner, grader.execute.gpu.child, grader.report; "
            "assert not [m for m in sys.modules if m.startswith('pycuda')], 'pycuda imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
