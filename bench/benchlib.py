"""What the bench scripts share: a copy of the project's config with absolute paths and its own cache."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the grader package, wherever the script is started from


def config_with_cache(cache: Path, folder: Path) -> Path:
    """config.yaml written into folder, pointing at the project's cases and reference and at `cache`."""
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {ROOT / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    text = text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {cache}")
    path = folder / "config.yaml"
    path.write_text(text)
    return path
