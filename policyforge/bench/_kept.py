"""Long benchmark results kept on disk and reused while their sizes (steps, seeds' settings, inputs) are the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from policyforge.io import write_json


def kept_result(path: Path, sizes: dict[str, Any], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The result at `path` if it was computed at these `sizes`, else `compute()`'s (written there with them)."""
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept.get("sizes") == sizes:
            return kept
    result = {**compute(), "sizes": sizes}
    write_json(path, result)
    return result
