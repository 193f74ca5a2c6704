"""What rendering a VLA teacher's cameras only at its own decisions saves: the same DAgger student run (same teacher,
seed and env steps) with `sim.image.render: every_step` and `on_request`, side by side, and where each run's time
went. The students' labels are the same (up to a level of rendering in a few pixels, `VecEnv.images`), so both runs'
success is printed as a check.

    policyforge bench teacher-rendering --teacher runs/vla-bc [--family touch] [--steps 16384] [--out DIR]

The last line is one JSON object: {"every_step_s", "on_request_s", "speedup", "frames_ratio", "split"}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from policyforge.algos.distill_command import distill_config
from policyforge.algos.logger import read_metrics
from policyforge.algos.runner import Runner
from policyforge.bench.distill_table import SPLIT
from policyforge.cli import find_recipe


def timed_run(args: argparse.Namespace, render: str) -> dict:
    """One DAgger student run rendering `render`: its wall time, time split and final success."""
    overrides = [f"runner.total_env_steps={args.steps}", "runner.eval_every_steps=0", "runner.video=none"]
    overrides += [f"out_dir={args.out}", f"name=render-{render}", f"sim.image.render={render}", "runner.eval_envs=32"]
    config = distill_config(args.teacher, args.family, "dagger", find_recipe("vla-distill"), overrides)
    runner = Runner.start(config, Console(quiet=True))
    started = time.perf_counter()
    summary = runner.train()
    seconds = time.perf_counter() - started
    frames = runner.algo.teacher.rendered
    runner.close()
    records = read_metrics(runner.run_dir)
    split = {part: sum(r.get(key, 0.0) for r in records) for part, key in SPLIT.items()}
    return {"seconds": seconds, "split": split, "success": summary["eval/success"], "teacher_frames": frames}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True, help="a VLA run reading cameras")
    parser.add_argument("--family", default="touch")
    parser.add_argument("--steps", type=int, default=16_384, help="env steps of each run")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-teacher-rendering"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = {render: timed_run(args, render) for render in ("every_step", "on_request")}
    table = Table(title=f"DAgger from {args.teacher} on {args.family}, {args.steps:,} env steps, 32 envs")
    for column in ("render", "wall", *SPLIT, "frames for the teacher", "success"):
        table.add_column(column)
    for render, run in runs.items():
        frames = "with every step" if render == "every_step" else f"{run['teacher_frames']:,}"
        split = [f"{run['split'][part]:.0f} s" for part in SPLIT]
        table.add_row(render, f"{run['seconds']:.0f} s", *split, frames, f"{run['success']:.0%}")
    Console(width=150).print(table)
    every, lazy = runs["every_step"], runs["on_request"]
    summary = {
        "every_step_s": round(every["seconds"], 1),
        "on_request_s": round(lazy["seconds"], 1),
        "speedup": round(every["seconds"] / lazy["seconds"], 2),
        "frames_ratio": round(lazy["teacher_frames"] / args.steps, 3),  # of the env frames every step renders
        "split": {render: run["split"] for render, run in runs.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
