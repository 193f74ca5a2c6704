"""Typed configs: dataclasses filled from YAML files and `key=value` overrides, checked at load time.

Every config is a dataclass with a docstring under each field. `from_dict` converts and checks a plain
mapping against the dataclass' type hints; a wrong key, a wrong type or an impossible value raises
`ConfigError` naming the field's dotted path and what is allowed.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from policyforge.errors import UserError

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A config value is wrong; the message names its dotted path and what is allowed."""

    def __init__(self, path: str, message: str):
        self.path = path
        self.reason = message
        super().__init__(f"{path}: {message}" if path else message)


def check(condition: bool, field: str, message: str) -> None:
    """Raise `ConfigError(field, message)` unless condition holds; for `__post_init__` checks."""
    if not condition:
        raise ConfigError(field, message)


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass `cls` from `data`, converting and checking every field recursively."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"expected a mapping of {cls.__name__} fields, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in fields:
            raise ConfigError(key_path, f"unknown key{_did_you_mean(str(key), fields)}; allowed: {', '.join(fields)}")
        kwargs[key] = _convert(value, hints[key], key_path)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(_join(path, err.path), err.reason) from None


def to_dict(config: Any) -> Any:
    """Plain YAML-safe data (dicts, lists, scalars) from a config dataclass."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, list | tuple):
        return [to_dict(v) for v in config]
    if isinstance(config, dict):
        return {k: to_dict(v) for k, v in config.items()}
    return config


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Set `a.b.c=value` overrides (values parsed as YAML) into a nested dict, returning it."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "an override must look like key=value, e.g. sim.num_envs=64")
        dotted, raw = item.split("=", 1)
        keys = dotted.strip().split(".")
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ConfigError(dotted, f"{key} is not a section, so {dotted} cannot be set")
            node = child
        node[keys[-1]] = yaml.safe_load(raw)
    return data


def load(cls: type[T], yaml_path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Load `cls` from an optional YAML file plus `key=value` overrides."""
    data: dict[str, Any] = {}
    if yaml_path is not None:
        text = Path(yaml_path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ConfigError(str(yaml_path), "the file must hold a mapping of config sections")
    return from_dict(cls, apply_overrides(data, overrides))


def save(config: Any, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of dataclass `cls` (for help texts)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in itertools.pairwise(body):
        documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and documented:
            docs[node.target.id] = inspect.cleandoc(str(after.value.value))
    return docs


def _join(path: str, key: str) -> str:
    if not key:
        return path
    return f"{path}.{key}" if path else key


def _did_you_mean(name: str, options: Mapping[str, Any] | Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Convert `value` to type `tp`, or raise ConfigError at `path`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)
    if origin is Literal:
        if value not in args:
            raise ConfigError(path, f"got {value!r}; allowed: {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arm in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arm, path)
            except ConfigError as err:
                errors.append(err.reason)
        raise ConfigError(path, "; or ".join(errors))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {value!r}")
        return value
    if origin is tuple:
        return _convert_tuple(value, args, path)
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list, got {value!r}")
        return [_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected a mapping, got {value!r}")
        return {str(k): _convert(v, args[1], _join(path, str(k))) for k, v in value.items()}
    raise ConfigError(path, f"unsupported config type {_type_name(tp)}")


def _convert_tuple(value: Any, args: tuple[Any, ...], path: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"expected a list like [low, high], got {value!r}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise ConfigError(path, f"expected {len(args)} values, got {len(value)}: {value!r}")
    return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
