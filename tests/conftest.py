import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Fails the run when a test skips for any reason but missing hardware; pytester runs it on toy suites.
pytest_plugins = ["skip_policy", "pytester"]

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "submissions"
RUN_TIMEOUT_S = 3


@pytest.fixture
def submission_source():
    def read(name: str) -> str:
        return (SUBMISSIONS / name / "kernel.cu").read_text()

    return read


@pytest.fixture(scope="session")
def config_file(tmp_path_factory):
    """The shipped config with a short run timeout, so a hanging submission costs seconds."""
    folder = tmp_path_factory.mktemp("config")
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    text = text.replace("run_s: 10", f"run_s: {RUN_TIMEOUT_S}")
    (folder / "config.yaml").write_text(text)
    return folder / "config.yaml"


@pytest.fixture(scope="session")
def graders(config_file):
    """backend -> grade(path), shared by every test module so each submission is graded once per backend."""
    made = {}

    def for_backend(backend: str):
        if backend not in made:
            made[backend] = make_grader(config_file, backend)
        return made[backend]

    return for_backend


def make_grader(config_file, backend: str):
    """grade(path) on one backend with the short-timeout config, each submission graded once."""
    from grader.cases import load_cases
    from grader.config import load_config
    from grader.pipeline import RunPlan, grade

    config = load_config(config_file)
    cases = load_cases(config.testcases_dir)
    results = {}

    def grade_named(path: Path):
        if path not in results:
            results[path] = grade(path, config, cases, RunPlan(backend))
        return results[path]

    def prefetch(paths: list[Path]) -> None:
        """Grade many at once: each runs in its own child, so threads here only wait."""
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(grade_named, [p for p in paths if p not in results]))

    grade_named.prefetch = prefetch
    return grade_named
