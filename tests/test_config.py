"""Config and case files: the shipped ones load, and every mistake names the key and the file."""
import shutil
from pathlib import Path

import pytest

from grader.cases import load_cases
from grader.config import DEFAULT_CONFIG, load_config
from grader.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path):
    """A copy of the shipped config, cases and reference to break one thing at a time."""
    for name in ("config.yaml", "testcases", "reference"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def test_shipped_config_and_cases_load():
    config = load_config(DEFAULT_CONFIG)
    cases = load_cases(config.testcases_dir)
    assert config.kernel.name == "mysgemm" and config.reference_path.is_file()
    total = sum(c.points for c in cases) + config.points.timing + sum(vars(config.points.static).values())
    assert total == 100


def test_default_suite_covers_the_required_shapes():
    cases = load_cases(load_config().testcases_dir)
    shapes = [(c.m, c.n, c.k) for c in cases]
    assert any(m == n == k and m % 16 == 0 for m, n, k in shapes)
    for dim in range(3):  # a non-multiple of 16 in each of m, n, k alone
        assert any(s[dim] % 16 and all(s[d] % 16 == 0 for d in range(3) if d != dim) for s in shapes)
    assert any(len(set(s)) == 3 for s in shapes)
    assert (1, 1, 1) in shapes
    assert any(s[2] == 1 for s in shapes) and any(s[0] == 1 for s in shapes) and any(s[1] == 1 for s in shapes)
    assert any(max(s) < 16 for s in shapes)
    assert any(min(s) >= 1000 for s in shapes)
    assert {c.visibility for c in cases} == {"public", "hidden"}


@pytest.mark.parametrize("old, new, message", [
    ("  repetitions: 15", "  repetitions: ten", "config.yaml: timing.repetitions: expected an integer, got 'ten'"),
    ("  run_s: 10", "  run_s: 10\n  run_ms: 5", "config.yaml: timeouts.run_ms: unknown key"),
    ("args: [m, n, k, A, B, C]", "args: [m, n, k, A, B, B]", "config.yaml: kernel.args: must list, in the kernel's order, each of A, B, C once"),
    ("  max_ratio: 2.0", "  max_ratio: -1", "config.yaml: timing.max_ratio: must be positive"),
    ("reference: reference/kernel.cu", "reference: nowhere.cu", "config.yaml: reference: file not found"),
    ("    load_barrier: 4", "    load_barrier: true", "config.yaml: points.static.load_barrier: expected a number"),
    ("kernel:\n", "kernel: [\n", "config.yaml: invalid YAML at line"),
])
def test_config_mistakes_name_key_and_file(project, old, new, message):
    edit(project / "config.yaml", old, new)
    with pytest.raises(ConfigError) as raised:
        load_config(project / "config.yaml")
    assert str(raised.value).startswith(str(project / message.split(":")[0]))
    assert message in str(raised.value)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml: file not found"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize("old, new, message", [
    ("m: 67, n: 64, k: 64, seed: 201", "m: 0, n: 64, k: 64, seed: 201", "20-ragged.yaml: cases[0].m: must be between 1"),
    ("seed: 203, points: 4", "seed: 203, points: 4, distribution: cauchy", "cases[2].distribution: unknown 'cauchy'"),
    ("seed: 202, points: 4", "seed: 202", "cases[1].points: required key is missing"),
    ("name: ragged_n,", "name: ragged_m,", "cases[1].name: duplicate case name 'ragged_m'"),
    ("seed: 204, points: 4}", "seed: 204, points: 4, visibility: secret}", "cases[3].visibility: must be public or hidden"),
])
def test_case_file_mistakes_name_case_and_key(project, old, new, message):
    edit(project / "testcases" / "20-ragged.yaml", old, new)
    with pytest.raises(ConfigError) as raised:
        load_cases(project / "testcases")
    assert "20-ragged.yaml" in str(raised.value) and message in str(raised.value)


def test_empty_case_folder_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no \\*.yaml case files"):
        load_cases(tmp_path)


SHIPPED_YAML = sorted([ROOT / "config.yaml", DEFAULT_CONFIG, *(ROOT / "presets").glob("*.yaml"),
                       *(ROOT / "testcases").glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED_YAML, ids=lambda path: path.name)
def test_libyaml_reads_every_shipped_file_as_pyyaml_does(path):
    """Files are parsed with libyaml where PyYAML has it (schema._parsed, a tenth of the time): the same values,
    of the same types, as PyYAML's own parser gives."""
    import yaml

    from grader.schema import _StrictLoader, load_yaml

    assert yaml.__with_libyaml__  # the grader's pinned PyYAML wheels carry it: else this test proves nothing
    pure = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    assert repr(load_yaml(path)) == repr(pure)  # repr: 1 and 1.0 and True differ


@pytest.mark.parametrize("text, words", [
    ("a: [1, 2\nb: 3\n", "invalid YAML at line 2, column 2: expected ',' or ']', but got ':'"),
    ("a:\n\t- 1\n", "invalid YAML at line 2, column 1: found character '\\t' that cannot start any token"),
    ("x: y: z\n", "invalid YAML at line 1, column 5: mapping values are not allowed here"),
    ("a: 1\nb:\n  c: 2\n  c: 3\n", "line 4: the key 'c' is given twice in the same mapping (keep one)"),
])
def test_a_yaml_mistake_is_said_in_pyyamls_words(tmp_path, text, words):
    """libyaml words its errors otherwise ("mapping values are not allowed in this context"): a file it refuses is
    read again by PyYAML, so what the instructor reads did not change."""
    from grader.schema import load_yaml

    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_yaml(path)
    assert str(raised.value) == f"{path}: {words}"
