"""A real installed distribution on sys.path, for the plugin tests: its module, its metadata and its entry
points, as pip would leave them (importlib.metadata reads them like any other distribution's)."""

from __future__ import annotations

from pathlib import Path

import pytest


def install_distribution(
    root: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, group: str, entry_points: dict[str, str]
) -> None:
    """Write `module`.py (`source`) and a dist-info declaring `entry_points` (name → module) in `group` under
    `root`, and put `root` on sys.path for this test."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    monkeypatch.syspath_prepend(str(root))
