from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "submissions"


@pytest.fixture
def submission_source():
    def read(name: str) -> str:
        return (SUBMISSIONS / name / "kernel.cu").read_text()

    return read
