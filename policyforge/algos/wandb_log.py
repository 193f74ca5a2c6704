"""Weights & Biases beside TensorBoard (`runner.wandb: true`): the same scalars, against the run's step unit, in
OFFLINE mode unless the user chose otherwise (WANDB_MODE=online, after `wandb login`), so that training never waits
on a network or an account. Its files go under the run directory (RUN/wandb/); upload an offline run later with
`wandb sync RUN/wandb/offline-run-*`. `wandb` is an optional extra: `pip install 'policyforge[wandb]'`.

Each training session (a start, or a resume) is one W&B run, grouped under the run directory's name; the step
axis is the run's own (env_steps, or gradient_steps for behaviour cloning), so a resumed session's points follow
its checkpoint's step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from policyforge.config import ConfigError

INSTALL = "pip install wandb==0.30.0 (the `wandb` extra of policyforge's pyproject.toml)"
"""How to install it, in words a rich console prints as they are (no [brackets], which it reads as markup)."""
DEFAULT_MODE = "offline"
"""W&B's mode when WANDB_MODE is unset: records locally, uploads nothing."""


def check_installed() -> None:
    """ConfigError naming runner.wandb, with the install command, when the `wandb` package is missing."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(
            "runner.wandb",
            f"is true but the wandb package is not installed: {INSTALL}; or set runner.wandb=false (TensorBoard "
            "and metrics.jsonl log the same scalars)",
        ) from None


class WandbScalars:
    """One W&B run of a training session: `log(step, metrics)` adds a point, `close()` finishes it."""

    def __init__(self, run_dir: Path, project: str, step_key: str, config: dict[str, Any], resume_step: int | None):
        check_installed()
        import wandb

        self.step_key = step_key
        self.mode = os.environ.get("WANDB_MODE") or DEFAULT_MODE
        """offline (default), online, or disabled: WANDB_MODE where the user set it."""
        name = run_dir.name if not resume_step else f"{run_dir.name}@{resume_step}"
        self.run = wandb.init(
            project=project,
            dir=str(run_dir),
            name=name,
            group=run_dir.name,
            config=config,
            mode=self.mode,
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.run.define_metric(step_key)
        self.run.define_metric("*", step_metric=step_key)
        self.directory = Path(self.run.dir).parent
        """This session's W&B files (RUN/wandb/offline-run-<time>-<id>/ in offline mode)."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({self.step_key: step, **{key: float(value) for key, value in metrics.items()}})

    def close(self) -> None:
        self.run.finish()
