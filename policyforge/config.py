"""Typed configs: dataclasses filled from YAML files and `key=value` overrides, checked at load time.

Every config is a dataclass with a docstring under each field. `from_dict` converts and checks a plain
mapping against the dataclass' type hints; a wrong key, a wrong type or an impossible value raises
`ConfigError` naming the field's dotted path and what is allowed. A field typed with a `Tagged` family (the
run config's `policy` and `algo`) holds whichever registered dataclass its `class:` key names; a bare name
(`algo: sac`, the override `policy=flow`) is that class with its defaults.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib.metadata
import math
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

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


_INTERVAL = re.compile(r"([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])")


def check_in(value: float | None, field: str, interval: str, why: str = "", unit: str = "") -> None:
    """Raise `ConfigError` unless `value` lies in `interval`, written as in maths: "(0, 1]", "[1, 1024]", "[0, π]",
    "[0, inf)" (an infinite bound reads "≥ 0" in the message), a bound set by another field as "[1, horizon=8]";
    None passes (optional fields). `why` follows the message in parentheses; `unit` follows the numbers (" m")."""
    if value is None:
        return
    low_bracket, low_text, high_text, high_bracket = _INTERVAL.fullmatch(interval.strip()).groups()
    low, high = (_bound(text) for text in (low_text, high_text))
    above = value > low if low_bracket == "(" else value >= low
    below = value < high if high_bracket == ")" else value <= high
    if not (above and below):
        if math.isinf(high):
            allowed = f"{'>' if low_bracket == '(' else '≥'} {low_text}"
        elif math.isinf(low):
            allowed = f"{'<' if high_bracket == ')' else '≤'} {high_text}"
        else:
            allowed = f"in {interval.strip()}"
        message = f"must be {allowed}{unit}, got {_show(value)}{unit}"
        raise ConfigError(field, message + (f" ({why})" if why else ""))


def _bound(text: str) -> float:
    number = text.rpartition("=")[2]
    return math.pi if number == "π" else float(number)


def check_sizes(sizes: Sequence[int], field: str, most: int) -> None:
    """Raise `ConfigError` unless every entry of a list of layer sizes / channels is in [1, most]."""
    bad = [size for size in sizes if not 1 <= size <= most]
    check(not bad, field, f"every entry must be in [1, {most}], got {list(sizes)}")


def check_bounds(
    bounds: tuple[float, float] | None, field: str, interval: str, why: str = "", strict: bool = False
) -> None:
    """Raise `ConfigError` unless a [low, high] range has both ends in `interval` and low ≤ high (low < high if
    strict); None passes. `why` follows the message in parentheses."""
    if bounds is None:
        return
    low, high = bounds
    for value in bounds:
        try:
            check_in(value, field, interval)
        except ConfigError:
            message = f"both ends must be in {interval}, got {list(bounds)}" + (f" ({why})" if why else "")
            raise ConfigError(field, message) from None
    order = "low < high" if strict else "low ≤ high"
    check(low < high if strict else low <= high, field, f"must be [low, high] with {order}, got {list(bounds)}")


SEED_LIMIT = 2**32 - 1
"""numpy's `np.random.seed` (and JAX's 32-bit keys) take seeds in [0, 2**32 − 1]."""


def check_seed(seed: int, field: str, largest_offset: int = 0) -> None:
    """Raise `ConfigError` unless `seed` plus the largest offset the code adds to it (e.g. the evaluation seed
    offset) is a valid numpy seed."""
    most = SEED_LIMIT - largest_offset
    offset = f"; seeds up to seed + {largest_offset:,} are used" if largest_offset else ""
    check(0 <= seed <= most, field, f"must be in [0, {most}]{offset}, got {seed}")


def _show(value: float) -> str:
    """A number as a user wrote it: -1 rather than -1.0."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


TAG_KEY = "class"
"""The key that names a tagged section's dataclass."""


class Tagged:
    """Base of a family of config dataclasses that share one config field, told apart by a `class:` key
    (`policy: {class: flow, steps: 10}`); each member registers under its tag in the family's `registry`. The keys
    of another member are unknown keys, so a section written for one class cannot silently configure another."""

    registry: ClassVar[dict[str, type[Tagged]]]
    """Members by tag (declared by the family's base class)."""
    tag: ClassVar[str] = ""
    """The member's name (its `class:`)."""
    plugin_group: ClassVar[str] = ""
    """Entry-point group of installed packages that add members: an unknown `class:` imports the entry point of
    that name, whose module registers it (`[project.entry-points."policyforge.policies"] my-policy = "pkg.mod"`)."""

    @classmethod
    def discover(cls, tag: str) -> None:
        """Import the installed plugin that provides `tag`, if there is one (it registers itself)."""
        if cls.plugin_group:
            for entry in importlib.metadata.entry_points(group=cls.plugin_group, name=tag):
                entry.load()


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass `cls` from `data`, converting and checking every field recursively."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"expected a mapping of {cls.__name__} fields, got {data!r}")
    upgrade = getattr(cls, "upgrade", None)
    if upgrade is not None:  # a dataclass that reads an older layout of its section
        data = upgrade(dict(data))
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        key_path = _join(path, str(key))
        if key not in fields:
            raise ConfigError(key_path, f"unknown key{_did_you_mean(str(key), fields)}; allowed: {', '.join(fields)}")
        tp = hints[key]
        if _is_family(tp) and isinstance(value, Mapping) and TAG_KEY not in value:
            value = {TAG_KEY: _default_tag(fields[key]), **value}
        kwargs[key] = _convert(value, tp, key_path)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(_join(path, err.path), err.reason) from None


def to_dict(config: Any) -> Any:
    """Plain YAML-safe data (dicts, lists, scalars) from a config dataclass."""
    if isinstance(config, Tagged):
        return {TAG_KEY: config.tag, **{f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}}
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
                message = f"{key} is not a section, so {dotted} cannot be set"
                if isinstance(child, str):  # `algo=sac algo.batch_size=64`: a class name, not a section
                    message += f" (a class and its keys at once: {key}='{{{TAG_KEY}: {child}, {keys[-1]}: ...}}')"
                raise ConfigError(dotted, message)
            node = child
        try:
            node[keys[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ConfigError(dotted, f"the value {raw!r} is not valid YAML ({_yaml_problem(err)})") from None
    return data


def load(cls: type[T], yaml_path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Load `cls` from an optional YAML file plus `key=value` overrides."""
    data: dict[str, Any] = {}
    if yaml_path is not None:
        data = read_yaml(Path(yaml_path))
    return from_dict(cls, apply_overrides(data, overrides))


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a YAML config file holds; `ConfigError` naming the file (and line) if it holds anything else."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        byte = f"byte {err.object[err.start]:#04x} at offset {err.start}"
        raise ConfigError(str(path), f"is not UTF-8 text ({byte}); save it as UTF-8") from None
    except (IsADirectoryError, PermissionError) as err:
        raise ConfigError(str(path), f"cannot be read: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(str(path), f"is not valid YAML: {_yaml_problem(err)}") from None
    if data is None:  # an empty or truncated file must not silently mean "all defaults"
        raise ConfigError(str(path), "is empty; a config file holds a mapping of config sections (see configs/)")
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the file must hold a mapping of config sections")
    return data


def _yaml_problem(err: yaml.YAMLError) -> str:
    """What PyYAML found wrong, with the line and column (1-based) where it noticed."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def save(config: Any, path: str | Path) -> None:
    """Write the resolved config as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False))


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a dataclass (resolving string annotations is most of what loading costs)."""
    return typing.get_type_hints(cls)


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
    if _is_family(tp):
        return _convert_tagged(value, tp, path)
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
        return _convert_float(value, path)
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


def _is_family(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Tagged) and not dataclasses.is_dataclass(tp)


def _default_tag(field: dataclasses.Field) -> str:
    """The tag of a tagged field's default (what a section without `class:` means)."""
    factory = field.default_factory
    default = factory() if factory is not dataclasses.MISSING else field.default
    return getattr(default, "tag", "")


def _convert_tagged(value: Any, family: type[Tagged], path: str) -> Tagged:
    """The family member that `value`'s `class:` names, filled from the rest of `value`; a bare name is
    `{class: name}` (that member's defaults)."""
    if isinstance(value, str):
        value = {TAG_KEY: value}
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected a class name or a mapping with a `{TAG_KEY}:` key, got {value!r}")
    tag = value.get(TAG_KEY)
    if isinstance(tag, str) and tag not in family.registry:
        try:
            family.discover(tag)
        except Exception as err:  # a plugin that does not import: say which and why
            raise ConfigError(
                _join(path, TAG_KEY), f"the installed plugin for {tag!r} failed to load: {err!r}"
            ) from err
    if tag not in family.registry:
        known = ", ".join(family.registry)
        hint = _did_you_mean(str(tag), family.registry) if isinstance(tag, str) else ""
        raise ConfigError(_join(path, TAG_KEY), f"got {tag!r}{hint}; allowed: {known}")
    member = family.registry[tag]
    return from_dict(member, {k: v for k, v in value.items() if k != TAG_KEY}, path)


FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: tensors (weights, losses, observations) are float32, where anything larger is inf."""


def _convert_float(value: Any, path: str) -> float:
    """A float that is finite in float32. No field takes NaN or ±inf: every float here feeds arithmetic that NaN or
    inf poisons (losses, physics, schedules); where "unlimited" or "off" is meant, the field takes null or 0 and
    says so."""
    number = None
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
        with contextlib.suppress(ValueError):
            number = float(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range
            number = math.inf
    if number is None:
        raise ConfigError(path, f"expected a number, got {value!r}")
    if not abs(number) <= FLOAT32_MAX:  # NaN, ±inf, and numbers that are ±inf in float32
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}… ({len(repr(value))} characters)"
        raise ConfigError(path, f"must be a finite number (within float32's ±3.4e38), got {shown}")
    return number


def _convert_tuple(value: Any, args: tuple[Any, ...], path: str) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise ConfigError(path, f"expected a list like [low, high], got {value!r}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise ConfigError(path, f"expected {len(args)} values, got {len(value)}: {value!r}")
    return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
