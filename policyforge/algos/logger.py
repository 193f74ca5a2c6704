"""Metrics of a run: one JSON line per log point (plots read it), TensorBoard scalars, and a terminal display."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

METRICS_FILE = "metrics.jsonl"


class MetricsLogger:
    """Appends metrics to `metrics.jsonl` and TensorBoard; on resume, drops what came after the checkpoint."""

    def __init__(
        self, run_dir: Path, resume_step: int | None = None, tensorboard: bool = True, step_key: str = "env_steps"
    ):
        self.path, self.step_key = run_dir / METRICS_FILE, step_key
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if json.loads(line)[step_key] <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = self.path.open("a")
        self._writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)

    def log(self, env_steps: int, metrics: dict[str, float]) -> None:
        """One log point at `env_steps` (in the run's step unit)."""
        record = {self.step_key: env_steps, **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._writer is not None:
            for key, value in metrics.items():
                self._writer.add_scalar(key, value, env_steps)

    def close(self) -> None:
        self._file.close()
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class ProgressDisplay:
    """Live progress bar with steps, steps/s, return, success and ETA; plain lines when not on a terminal."""

    def __init__(self, console: Console, total_steps: int, start_steps: int, every_s: float = 10.0):
        self.console, self.total, self.every_s = console, total_steps, every_s
        self._last_print = 0.0
        self._progress = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,} steps"),
                TextColumn("{task.fields[sps]} steps/s"),
                TextColumn("return {task.fields[ret]}  success {task.fields[success]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
            )
            self._task = self._progress.add_task(
                "train", total=total_steps, completed=start_steps, sps="-", ret="-", success="-"
            )
            self._progress.start()

    def update(self, env_steps: int, sps: float, ret: float | None, success: float | None) -> None:
        fields = {
            "sps": f"{sps:,.0f}",
            "ret": "-" if ret is None else f"{ret:.3g}",
            "success": "-" if success is None else f"{success:.0%}",
        }
        if self._progress is not None:
            self._progress.update(self._task, completed=env_steps, **fields)
        elif time.monotonic() - self._last_print >= self.every_s or env_steps >= self.total:
            self._last_print = time.monotonic()
            eta = (self.total - env_steps) / max(sps, 1e-9)
            self.console.print(
                f"steps {env_steps:,}/{self.total:,}  {fields['sps']} steps/s  return {fields['ret']}  "
                f"success {fields['success']}  ETA {eta:.0f}s"
            )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
