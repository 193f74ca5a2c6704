"""Full-budget PPO on quadruped-walk: velocity-tracking error and episode length vs env steps and wall time.

Trains `configs/quadruped-walk-ppo.yaml` (overridable), evaluating deterministically every
`--eval-every` steps on 16 held-out envs, then prints a table, saves a plot beside the run and ends with one
JSON line. Tracking error is |v_xy − command_xy| (m/s) and |ω_z − command_yaw| (rad/s) averaged over the
evaluation episodes' steps.

    policyforge bench learn-quadruped [--steps 20000000] [--eval-every 2000000] [key=value ...]
    policyforge bench learn-quadruped --resume runs/bench/learn-quadruped-<id>   # after a kill: go on from there
"""

from __future__ import annotations

import argparse
import json
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from policyforge.algos.logger import read_metrics
from policyforge.algos.runner import RunConfig, Runner
from policyforge.cli import find_recipe
from policyforge.config import load
from policyforge.io import atomic_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000_000)
    parser.add_argument("--eval-every", type=int, default=2_000_000)
    parser.add_argument("--out-dir", default="runs/bench")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a killed benchmark run from its checkpoint")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.resume:
        runner = Runner.resume(args.resume)
    else:
        overrides = [
            f"out_dir={args.out_dir}",
            f"name=learn-quadruped-{int(time.time())}",
            f"runner.total_env_steps={args.steps}",
            f"runner.eval_every_steps={args.eval_every}",
            *args.overrides,
        ]
        runner = Runner.start(load(RunConfig, find_recipe("quadruped-walk-ppo.yaml"), overrides))
    summary = runner.train()
    runner.close()
    by_step = {r["env_steps"]: r for r in read_metrics(runner.run_dir) if "eval/terms/lin_vel_error" in r}
    evals = [by_step[step] for step in sorted(by_step)]  # the final evaluation may repeat the last periodic one
    print(f"{'env steps':>11} {'wall s':>7} {'lin err m/s':>12} {'yaw err rad/s':>14} {'ep length':>10} {'return':>8}")
    for r in evals:
        print(
            f"{r['env_steps']:11,d} {r['perf/wall_s']:7.0f} {r['eval/terms/lin_vel_error']:12.3f} "
            f"{r['eval/terms/ang_vel_error']:14.3f} {r['eval/length']:10.0f} {r['eval/return']:8.2f}"
        )
    plot = plot_tracking(evals, runner.run_dir)
    final = evals[-1]
    print(
        json.dumps(
            {
                "task": "quadruped-walk",
                "env_steps": summary["env_steps"],
                "wall_s": summary["wall_s"],
                "sps": round(summary["env_steps"] / summary["wall_s"]),
                "lin_vel_error": round(final["eval/terms/lin_vel_error"], 3),
                "ang_vel_error": round(final["eval/terms/ang_vel_error"], 3),
                "episode_length": final["eval/length"],
                "eval_return": round(final["eval/return"], 2),
                "plot": str(plot),
            }
        )
    )


def plot_tracking(evals: list[dict], run_dir) -> str:
    figure, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    steps = [r["env_steps"] for r in evals]
    wall = [r["perf/wall_s"] / 60 for r in evals]
    for x, label, column in ((steps, "environment steps", 0), (wall, "wall time (min)", 1)):
        axes[column].plot(x, [r["eval/terms/lin_vel_error"] for r in evals], "o-", label="|v_xy − cmd| (m/s)")
        axes[column].plot(x, [r["eval/terms/ang_vel_error"] for r in evals], "s-", label="|ω_z − cmd| (rad/s)")
        axes[column].set_xlabel(label)
        axes[column].set_ylabel("tracking error")
        axes[column].legend()
        axes[column].grid(alpha=0.3)
    axes[2].plot(steps, [r["eval/length"] for r in evals], "o-")
    axes[2].set_xlabel("environment steps")
    axes[2].set_ylabel("evaluation episode length (steps, max 1000)")
    axes[2].grid(alpha=0.3)
    out = run_dir / "plots" / "tracking.png"
    with atomic_path(out) as tmp:
        figure.savefig(tmp, dpi=110, format="png")
    plt.close(figure)
    return str(out)


if __name__ == "__main__":
    main()
