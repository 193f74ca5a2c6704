"""Learning-curve figures (PNG) from a run's metrics.jsonl."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from policyforge.algos.logger import read_metrics
from policyforge.io import atomic_path

PANELS = [
    ("return", ["train/return", "eval/return"]),
    ("success rate", ["train/success", "eval/success"]),
    ("episode length", ["train/length", "eval/length"]),
    ("throughput (env steps/s)", ["perf/sps"]),
]


def plot_learning_curves(run_dir: Path, title: str = "") -> Path:
    """Write `plots/learning_curves.png` (return, success, episode length, throughput vs env steps)."""
    records = read_metrics(run_dir)
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for axis, (label, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            points = [(r["env_steps"], r[key]) for r in records if key in r]
            if points:
                steps, values = zip(*points, strict=True)
                axis.plot(steps, values, marker="o" if key.startswith("eval") else None, markersize=3, label=key)
        axis.set_xlabel("environment steps")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        if axis.has_data():
            axis.legend(fontsize=8)
    figure.suptitle(title)
    out = Path(run_dir) / "plots" / "learning_curves.png"
    with atomic_path(out) as tmp:
        figure.savefig(tmp, dpi=110, format="png")
    plt.close(figure)
    return out
