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
    ("throughput (steps/s)", ["perf/sps"]),
    ("behaviour-cloning loss", ["loss/bc"]),
]
STEP_KEYS = {"env_steps": "environment steps", "gradient_steps": "gradient steps"}


def plot_learning_curves(run_dir: Path, title: str = "") -> Path:
    """Write `plots/learning_curves.png` (return, success, episode length, throughput, and the BC loss when
    there is one, against environment steps or, for behaviour cloning, gradient steps)."""
    records = read_metrics(run_dir)
    step_key = next((k for k in STEP_KEYS if records and k in records[0]), "env_steps")
    panels = [(label, keys) for label, keys in PANELS if label != PANELS[-1][0] or any(keys[0] in r for r in records)]
    figure, axes = plt.subplots(2, (len(panels) + 1) // 2, figsize=(5.5 * ((len(panels) + 1) // 2), 7))
    figure.set_layout_engine("constrained")
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    for axis, (label, keys) in zip(axes.flat, panels, strict=False):
        for key in keys:
            points = [(r[step_key], r[key]) for r in records if key in r]
            if points:
                steps, values = zip(*points, strict=True)
                axis.plot(steps, values, marker="o" if key.startswith("eval") else None, markersize=3, label=key)
        axis.set_xlabel(STEP_KEYS[step_key])
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
