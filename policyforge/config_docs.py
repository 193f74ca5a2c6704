"""A config's documentation: the docstring under each dataclass field (`field_docs`) and a config written as YAML with
those docstrings above its fields as comments (`commented`: what `policyforge config show` prints)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import textwrap
from typing import Any

import yaml

from policyforge.config import TAG_KEY, Tagged, to_dict


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


def commented(config: Any, width: int = 100) -> str:
    """`config` (a dataclass instance) as YAML with each field's docstring above it as comments: what `policyforge
    config show` prints, and loadable again. It walks the instance, not a declared type, so a section whose
    dataclass is chosen at load time shows that dataclass' fields and docstrings."""
    lines: list[str] = []
    _commented(config, "", width, lines)
    return "\n".join(lines) + "\n"


def _commented(config: Any, indent: str, width: int, lines: list[str]) -> None:
    docs: dict[str, str] = {}
    for cls in reversed(type(config).__mro__):  # a subclass' docstring of a field wins over its base's
        if dataclasses.is_dataclass(cls):
            docs.update(field_docs(cls))
    if isinstance(config, Tagged):
        lines.append(f"{indent}# {' '.join((type(config).__doc__ or '').split())}"[: max(width, 40)])
        lines.append(f"{indent}{TAG_KEY}: {config.tag}")
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        section = dataclasses.is_dataclass(value) and not isinstance(value, type)
        if section and not indent and lines:
            lines.append("")
        doc = " ".join(docs.get(field.name, "").split())
        lines += [f"{indent}# {line}" for line in textwrap.wrap(doc, max(width - len(indent) - 2, 40))]
        if section:
            lines.append(f"{indent}{field.name}:")
            _commented(value, indent + "  ", width, lines)
        else:
            text = yaml.safe_dump(to_dict(value), default_flow_style=True, width=math.inf, allow_unicode=True)
            lines.append(f"{indent}{field.name}: {text.removesuffix(chr(10)).removesuffix(chr(10) + '...')}")
