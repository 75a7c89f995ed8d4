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


def test_every_case_field_is_documented():
    missing = [item.name for item in fields(Case) if f"`{item.name}`" not in REFERENCE]
    assert missing == []
