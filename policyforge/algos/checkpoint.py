"""Atomic, resumable checkpoints: a run killed at any moment resumes from its last complete checkpoint."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policyforge.io import atomic_path

LATEST = "latest.pt"


def rng_state() -> dict[str, Any]:
    """The global RNG states that training draws from (torch, numpy, random)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save(directory: Path, payload: dict[str, Any], iteration: int, keep: int) -> Path:
    """Write `step_<iteration>.pt` and `latest.pt` atomically (a crash leaves the previous ones intact),
    then delete all but the newest `keep` numbered checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step_{iteration:08d}.pt"
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    with atomic_path(directory / LATEST) as tmp:
        torch.save(payload, tmp)
    for old in sorted(directory.glob("step_*.pt"))[:-keep]:
        old.unlink()
    return path


def load(path: Path) -> dict[str, Any]:
    """Load a checkpoint file, or the latest one of a run or checkpoint directory."""
    path = Path(path)
    if path.is_dir():
        candidates = [path / LATEST, path / "checkpoints" / LATEST]
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            raise FileNotFoundError(f"no checkpoint in {path}: expected checkpoints/{LATEST} (was the run started?)")
        path = found
    return torch.load(path, map_location="cpu", weights_only=False)


def iteration_of(path: Path) -> int:
    match = re.search(r"step_(\d+)\.pt$", str(path))
    return int(match.group(1)) if match else -1
