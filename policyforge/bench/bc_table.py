"""Behaviour cloning from scripted demonstrations: success rate of every policy class on the arm tasks.

For each task, the scripted expert (degraded by action noise and hesitation, the `policyforge collect` knobs)
records a dataset; each policy class is then trained by `algo: bc` through the same Runner as
`policyforge train` (seeded) and evaluated deterministically on `--eval-envs` fresh episodes. One task is
also learnt from the front camera's 48×48 images (+ state; one observation step, batches of 32, 1500 steps).
Classes: Gaussian (H = 1), diffusion (DDIM 10 steps), rectified flow (10 Euler steps), shortcut model (1 and 4
steps), MeanFlow (1 step); the chunked ones see 2 observations and predict 8 actions, 4 executed.

    policyforge bench bc-table [--tasks arm-push-cube arm-lift-cube] [--episodes 30] [--steps 4000]
                               [--image-task arm-lift-cube] [--out bench/results/bc]

Prints a table; the last line is JSON {"task", "success": {key: rate}, "demos", ...} for arm-lift-cube.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.algos import run_files
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import from_dict
from policyforge.data.collect import collect

CHUNK = {"n_obs_steps": 2, "horizon": 8, "act_steps": 4}
VARIANTS = {
    "gaussian": {"class": "gaussian", "hidden": [256, 256, 256], "init_std": 0.3},
    "diffusion_ddim10": {"class": "diffusion", "chunk": CHUNK, "inference_steps": 10},
    "flow_rf10": {"class": "flow", "chunk": CHUNK, "variant": "rectified", "steps": 10},
    "shortcut_1": {"class": "flow", "chunk": CHUNK, "variant": "shortcut", "steps": 1},
    "shortcut_4": {"class": "flow", "chunk": CHUNK, "variant": "shortcut", "steps": 4},
    "meanflow_1": {"class": "flow", "chunk": CHUNK, "variant": "meanflow", "steps": 1},
}
IMAGE_VARIANTS = ["flow_rf10"]
IMAGE_CHUNK = {"n_obs_steps": 1, "horizon": 8, "act_steps": 4}
"""From images the CNN dominates the cost on this CPU: one observation step, smaller batches and fewer steps."""


def train_and_evaluate(task: str, key: str, dataset: Path, args, out: Path, cameras: list[str]) -> dict:
    settings = {
        "name": f"{task}-{key}" + ("-image" if cameras else ""),
        "out_dir": str(out / "runs"),
        "seed": args.seed,
        "sim": {
            "task": task,
            "num_envs": 1,
            "image": {"cameras": cameras, "width": args.image_size, "height": args.image_size},
        },
        "algo": {
            "class": "bc",
            "dataset": str(dataset),
            "gradient_steps": args.image_steps if cameras else args.steps,
            "steps_per_iteration": 250,
            "batch_size": 32 if cameras else 256,
        },
        "runner": {"eval_envs": args.eval_envs, "video": "none", "eval_every_steps": 0, "tensorboard": False},
        "policy": VARIANTS[key] | ({"chunk": IMAGE_CHUNK} if cameras else {}),
    }
    config = from_dict(RunConfig, settings)
    lock = run_files.reclaim(config.run_dir, "bench")  # a previous run of this benchmark; refuses anything else
    runner = Runner.start(config, Console(quiet=True), "bench", lock)
    start = time.perf_counter()
    summary = runner.train()
    runner.close()
    return {
        "success": summary["eval/success"],
        "return": summary["eval/return"],
        "train_s": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["arm-push-cube", "arm-lift-cube"])
    parser.add_argument("--image-task", default="arm-lift-cube", help="task also learnt from images ('' to skip)")
    parser.add_argument("--episodes", type=int, default=30, help="demonstrations per task")
    parser.add_argument("--noise", type=float, default=0.3, help="expert action noise")
    parser.add_argument("--hesitation", type=float, default=0.1, help="expert hesitation probability")
    parser.add_argument("--steps", type=int, default=4000, help="gradient steps per policy")
    parser.add_argument("--image-steps", type=int, default=1500, help="gradient steps of the image policy")
    parser.add_argument("--eval-envs", type=int, default=50)
    parser.add_argument("--image-size", type=int, default=48)
    parser.add_argument("--keys", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/bc"))
    args = parser.parse_args()
    console = Console(width=180)
    results: dict[str, dict[str, dict]] = {}
    demo_rates: dict[str, float] = {}
    jobs = [(task, key, []) for task in args.tasks for key in args.keys]
    if args.image_task:
        jobs += [(args.image_task, key, ["front"]) for key in IMAGE_VARIANTS if key in args.keys]
    for task, key, cameras in jobs:
        label = task + (" (image)" if cameras else "")
        dataset = args.out / "data" / (task + ("-front" if cameras else ""))
        if label not in demo_rates:
            summary = collect(
                task,
                args.episodes,
                dataset,
                seed=args.seed,
                action_noise=args.noise,
                hesitation=args.hesitation,
                cameras=cameras,
                image_size=args.image_size,
                overwrite=True,
                progress=False,
            )
            demo_rates[label] = summary["success_rate"]
        results.setdefault(label, {})[key] = train_and_evaluate(task, key, dataset, args, args.out, cameras)
        row = results[label][key]
        console.print(f"{label:24s} {key:18s} success {row['success']:.0%}  ({row['train_s']:.0f} s)")
    table = Table(
        title=f"BC success rate ({args.episodes} demos per task, expert noise {args.noise}, hesitation "
        f"{args.hesitation}; {args.steps} gradient steps; {args.eval_envs} eval episodes; seed {args.seed})"
    )
    table.add_column("task")
    table.add_column("demos' success")
    for key in args.keys:
        table.add_column(key)
    for label, row in results.items():
        cells = [f"{row[k]['success']:.0%}" if k in row else "-" for k in args.keys]
        table.add_row(label, f"{demo_rates[label]:.0%}", *cells)
    console.print(table)
    main_task = "arm-lift-cube" if "arm-lift-cube" in results else next(iter(results))
    print(
        json.dumps(
            {
                "task": main_task,
                "success": {k: round(v["success"], 3) for k, v in results[main_task].items()},
                "demos": args.episodes,
                "demo_success": demo_rates[main_task],
                "all": {label: {k: round(v["success"], 3) for k, v in row.items()} for label, row in results.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
