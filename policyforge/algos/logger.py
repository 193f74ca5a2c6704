"""Metrics of a run: one JSON line per log point (plots read it) and TensorBoard scalars (`progress` shows them live),
and the same scalars in Weights & Biases where `runner.wandb` asks for them (`wandb_log`, offline by default).

metrics.jsonl is only ever appended to while a run trains. Starting or resuming a run rewrites it, atomically (a
failed write leaves the old file whole), and only when it must: to drop the records after the step the run resumes
from, blank lines, and a torn last line (a write cut short by a kill or a full disk). Readers skip blank lines and a
torn last line; any other line that is not a JSON record is an error naming the line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from policyforge.algos.wandb_log import WandbScalars
from policyforge.errors import UserError
from policyforge.io import atomic_path

METRICS_FILE = "metrics.jsonl"

log = logging.getLogger(__name__)


class MetricsError(UserError):
    """A line of metrics.jsonl other than the last is not a JSON record."""


class MetricsLogger:
    """Appends metrics to `metrics.jsonl`, TensorBoard and (with `wandb_project`) W&B; a resumed run drops what
    came after its checkpoint, a new one starts the file afresh. `wandb_config`: the run's config, as W&B shows it."""

    def __init__(
        self,
        run_dir: Path,
        resume_step: int | None = None,
        tensorboard: bool = True,
        step_key: str = "env_steps",
        wandb_project: str | None = None,
        wandb_config: dict[str, Any] | None = None,
    ):
        self.path, self.step_key = run_dir / METRICS_FILE, step_key
        _keep_until(self.path, resume_step or 0, step_key)
        self._file = self.path.open("a")
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)
        self.wandb: WandbScalars | None = None
        if wandb_project is not None:
            self.wandb = WandbScalars(run_dir, wandb_project, step_key, wandb_config or {}, resume_step)

    def log(self, env_steps: int, metrics: dict[str, float]) -> None:
        """One log point at `env_steps` (in the run's step unit)."""
        record = {self.step_key: env_steps, **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, value, env_steps)
        if self.wandb is not None:
            self.wandb.log(env_steps, metrics)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()
        if self.wandb is not None:
            self.wandb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run's metrics.jsonl (none if it has none)."""
    path = Path(run_dir) / METRICS_FILE
    return [record for _, record in _parse(path, path.read_text(errors="replace"))] if path.exists() else []


def _parse(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    """(line, record) for each record of a metrics file's text, skipping blank lines and a torn last line."""
    lines = text.split("\n")
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append((line, record))
        elif number == last:
            log.warning("%s: ignoring its torn last line %r (a write that did not finish)", path, line[:60])
        else:
            raise MetricsError(
                f"{path}, line {number + 1}, is not a JSON record ({line[:60]!r}): fix or delete that line"
            )
    return records


def _keep_until(path: Path, step: int, step_key: str) -> None:
    """Rewrite `path` atomically with only its records up to `step` if it holds anything else."""
    if not path.exists():
        return
    old = path.read_text(errors="replace")
    new = "".join(line + "\n" for line, record in _parse(path, old) if record.get(step_key, 0) <= step)
    if new != old:
        with atomic_path(path) as tmp:
            tmp.write_text(new)
