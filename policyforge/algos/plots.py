"""Learning-curve figures (PNG) from a run's metrics.jsonl, readable at a glance: titled with the task and the
method (`naming.method_name`), the success rate on a fixed 0–100% axis, and only the panels the run has data for
(a task without a success flag has no success panel rather than a flat 0%)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, PercentFormatter

from policyforge.algos.logger import read_metrics
from policyforge.io import atomic_path

SUCCESS = "success rate"
PANELS = [
    ("return", ["train/return", "eval/return"]),
    (SUCCESS, ["train/success", "eval/success"]),
    ("episode length", ["train/length", "eval/length"]),
    ("throughput (steps/s)", ["perf/sps"]),
    ("behaviour-cloning loss", ["loss/bc"]),
]
"""(y label, metrics drawn in it); a panel appears when one of its metrics was logged."""
STEP_KEYS = {"env_steps": "environment steps", "gradient_steps": "gradient steps"}


def plot_learning_curves(run_dir: Path, title: str | None = None) -> Path:
    """Write `plots/learning_curves.png` of a run (`learning_curves_figure` of its metrics); `title` defaults to
    `<task> · <method>` from the run's config."""
    run_dir = Path(run_dir)
    if title is None:
        title = _title_of(run_dir)
    figure = learning_curves_figure(read_metrics(run_dir), title)
    out = run_dir / "plots" / "learning_curves.png"
    with atomic_path(out) as tmp:
        figure.savefig(tmp, dpi=110, format="png")
    plt.close(figure)
    return out


def learning_curves_figure(records: list[dict[str, Any]], title: str) -> Figure:
    """Return, success, episode length, throughput and, for behaviour cloning, its loss against environment steps
    (or, for behaviour cloning, gradient steps); evaluations are marked points (a fine-tuning run's first is its
    initial policy, at step 0). The success panel (fixed [0, 1], shown in %) appears only where evaluations
    logged `eval/success`, which tasks without a success flag do not; the runner's training count of success,
    0 for such tasks, is then not shown either."""
    step_key = next((k for k in STEP_KEYS if records and k in records[0]), "env_steps")
    defined = {key for record in records for key in record}
    panels = [(label, keys) for label, keys in PANELS if defined & set(keys)]
    if "eval/success" not in defined:
        panels = [(label, keys) for label, keys in panels if label != SUCCESS]
    columns = max(1, (len(panels) + 1) // 2)
    figure, axes = plt.subplots(2, columns, figsize=(5.5 * columns, 7), squeeze=False)
    figure.set_layout_engine("constrained")
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    for axis, (label, keys) in zip(axes.flat, panels, strict=False):
        for key in keys:
            points = [(r[step_key], r[key]) for r in records if key in r]
            if points:
                steps, values = zip(*points, strict=True)
                evaluation = key.startswith("eval")
                axis.plot(steps, values, marker="o" if evaluation else None, markersize=3, label=key, clip_on=False)
        axis.set_xlabel(STEP_KEYS[step_key])
        axis.xaxis.set_major_formatter(EngFormatter(sep=""))  # 400k, 12M: full step counts run into each other
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        if label == SUCCESS:
            axis.set_ylim(0.0, 1.0)
            axis.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
        if axis.has_data():
            axis.legend(fontsize=8)
    figure.suptitle(title)
    return figure


def _title_of(run_dir: Path) -> str:
    """`<task> · <method>` of the run in `run_dir` ("" where it has no readable config)."""
    from policyforge.algos.naming import run_title
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig
    from policyforge.config import load

    try:
        return run_title(load(RunConfig, run_dir / CONFIG_FILE))
    except (OSError, ValueError):
        return ""
