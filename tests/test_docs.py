"""The documentation says what the code does: every configuration key the grader reads is in
docs/configuration.md, and every case field."""
from dataclasses import fields, is_dataclass

from conftest import ROOT

from grader.cases import Case
from grader.config import Config

REFERENCE = (ROOT / "docs" / "configuration.md").read_text()


def keys(cls, prefix: str = "") -> list[str]:
    found = []
    for item in fields(cls):
        if item.name == "source":  # set by load_config, never written in a file
            continue
        kind = item.default_factory() if callable(item.default_factory) else None
        if is_dataclass(kind):
            found += keys(type(kind), f"{prefix}{item.name}.")
        else:
            found.append(prefix + item.name)
    return found


def test_every_configuration_key_is_documented():
    missing = [key for key in keys(Config) if f"`{key}`" not in REFERENCE]
    assert missing == [], f"docs/configuration.md does not list: {missing}"


def test_the_projects_config_yaml_spells_out_every_key():
    """docs/configuration.md says it does: each key set, or (an optional list left out by default) commented."""
    import re

    import yaml

    text = (ROOT / "config.yaml").read_text()
    data = yaml.safe_load(text)

    def given(key: str) -> bool:
        value = data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return re.search(rf"^\s*# {re.escape(part)}: ", text, re.MULTILINE) is not None
            value = value[part]
        return True

    assert [key for key in keys(Config) if not given(key)] == []


def test_every_case_field_is_documented():
    missing = [item.name for item in fields(Case) if f"`{item.name}`" not in REFERENCE]
    assert missing == []


README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))


def test_the_readme_is_a_short_page_with_a_map_of_every_docs_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert all(f"](docs/{page.name})" in text for page in PAGES), "a docs/ page the README's map leaves out"
    assert "<!-- test-command -->" in text  # .ci/run reads the test command under it


def test_every_relative_link_of_the_docs_names_a_file_that_exists():
    import re

    broken = []
    for page in [README, *PAGES]:
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
