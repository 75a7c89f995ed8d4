"""Turns parsed YAML into typed dataclasses, refusing unknown keys and wrong types with the key's path.

Config and case files are both validated through `build`, so both give the same kind of message:
`config.yaml: timing.repetitions: expected an integer, got 'ten'`.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml

from .errors import ConfigError


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _Strict:
    """YAML's safe loading, refusing a key given twice in one mapping (PyYAML keeps the last, silently: a second
    `timing:` would drop the first one's keys)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise _DuplicateKey(problem=f"the key {key!r} is given twice in the same mapping (keep one)",
                                    problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


class _StrictLoader(_Strict, yaml.SafeLoader):
    pass


# libyaml's parser, where PyYAML was built with it: the same nodes, built and typed by the same Python classes, in
# a tenth of the time (the config and the case files: 15-20 ms of every grade's start with PyYAML's own).
_FastStrictLoader = type("_FastStrictLoader", (_Strict, yaml.CSafeLoader), {}) if yaml.__with_libyaml__ else None


def _parsed(text: str) -> Any:
    if _FastStrictLoader is not None:
        try:
            return yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError:
            pass  # said in PyYAML's words, as before: libyaml words its errors otherwise
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc}") from None
    try:
        return _parsed(text)
    except _DuplicateKey as exc:
        mark = exc.problem_mark
        raise ConfigError(str(path), "", f"line {mark.line + 1}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), "", f"invalid YAML{where}: {problem}") from None


def build(cls: type, data: Any, file: str, key: str = "") -> Any:
    """Build dataclass `cls` from a mapping; missing keys take the field defaults."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(file, key, f"expected a mapping, got {_show(data)}")
    # A field marked `derived` (Config.source: the file's own path) is set by the loader, never by a file.
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("derived")}
    unknown = sorted(set(map(str, data)) - set(fields))
    if unknown:
        raise ConfigError(file, _join(key, unknown[0]), f"unknown key (allowed: {', '.join(sorted(fields))})")
    hints = _hints(cls)
    values = {}
    for name, field in fields.items():
        sub_key = _join(key, name)
        if name in data:
            values[name] = _coerce(hints[name], data[name], file, sub_key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(file, sub_key, "required key is missing")
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate:
        problem = validate()
        if problem:
            bad_key, message = problem
            raise ConfigError(file, _join(key, bad_key), message)
    return obj


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The fields' types, their annotations' text evaluated once per class (a case file's cases each built one)."""
    return typing.get_type_hints(cls)


def _coerce(hint: Any, value: Any, file: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        # `str | list[str]`: a list takes the list option, anything else the first other one.
        lists = [o for o in options if typing.get_origin(o) is list]
        others = [o for o in options if typing.get_origin(o) is not list]
        chosen = lists[0] if isinstance(value, list) and lists else (others or options)[0]
        return _coerce(chosen, value, file, key)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, file, key)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(file, key, f"expected a list, got {_show(value)}")
        (item,) = typing.get_args(hint)
        return [_coerce(item, v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(file, key, f"expected a mapping, got {_show(value)}")
        _, item = typing.get_args(hint)
        return {str(k): _coerce(item, v, file, _join(key, str(k))) for k, v in value.items()}
    return _scalar(hint, value, file, key)


def _scalar(hint: Any, value: Any, file: str, key: str) -> Any:
    # bool is an int in Python; a YAML `true` must not pass as a size or a count.
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        # YAML's .inf and .nan are floats: an endless timeout or nan points would pass every later check.
        if not math.isfinite(value):
            raise ConfigError(file, key, f"expected a finite number, got {value}")
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    raise ConfigError(file, key, f"expected {names.get(hint, hint)}, got {_show(value)}")


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
