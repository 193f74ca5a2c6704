"""policyforge: train policies in parallel simulation, fine-tune generative policies with RL, deploy safely."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policyforge.algos.loaded import LoadedPolicy

os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering; must precede the first `import mujoco`

__version__ = "0.1.0"


def load(run_dir: str | Path, checkpoint: str | int = "latest") -> LoadedPolicy:
    """A trained run's policy, ready to act (`LoadedPolicy`): `policyforge.load("runs/arm-reach-ppo").act(obs)`
    returns the action its evaluation takes for `obs`. `checkpoint`: "latest", "best", N or a file."""
    from policyforge.algos.loaded import load as load_run_policy  # torch and the simulators load on first use

    return load_run_policy(run_dir, checkpoint)
