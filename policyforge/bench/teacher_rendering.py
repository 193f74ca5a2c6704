"""What rendering a VLA teacher's cameras only at its own decisions saves: the same DAgger student run (same teacher,
seed and env steps) with `sim.image.render: every_step` and `on_request`, side by side, and where each run's time
went. The students' labels are the same (up to a level of rendering in a few pixels, `VecEnv.images`), so both runs'
success is printed as a check.

    policyforge bench teacher-rendering --teacher runs/vla-bc [--family touch] [--steps 16384] [--out DIR]

First the simulator's side alone (ms per step with and without rendering, and per `env.images` of every env, side by
side), then the two runs. The last line is one JSON object: {"every_step_s", "on_request_s", "speedup",
"env_speedup_per_decision", "frames_ratio", "split"}.
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


def env_costs(teacher: Path, family: str, repeats: int = 10) -> dict[str, float]:
    """Side by side on the teacher's sim settings (32 envs): ms per step rendering every env, per step rendering
    none, and per `env.images` of all envs (what a teacher that plans for every env at once asks for)."""
    import numpy as np

    from policyforge.sims import make_env

    costs = {}
    for render in ("every_step", "on_request"):
        config = distill_config(teacher, family, "dagger", find_recipe("vla-distill"), [f"sim.image.render={render}"])
        env = make_env(config.sim)
        action = torch.zeros(env.num_envs, env.action_dim)
        env.step(action)
        started = time.perf_counter()
        for _ in range(repeats):
            env.step(action)
        costs[f"step_{render}_ms"] = (time.perf_counter() - started) / repeats * 1000
        if render == "on_request":
            started = time.perf_counter()
            for _ in range(repeats):
                env.images(np.arange(env.num_envs))
            costs["images_all_ms"] = (time.perf_counter() - started) / repeats * 1000
        env.close()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True, help="a VLA run reading cameras")
    parser.add_argument("--family", default="touch")
    parser.add_argument("--steps", type=int, default=16_384, help="env steps of each run")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-teacher-rendering"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    costs = env_costs(args.teacher, args.family)
    act_steps = 4  # the VLA recipes' chunk: a decision every 4th step
    every = act_steps * costs["step_every_step_ms"]
    lazy = act_steps * costs["step_on_request_ms"] + costs["images_all_ms"]
    console = Console(width=150)
    console.print(
        f"per step: {costs['step_every_step_ms']:.0f} ms rendering every env, {costs['step_on_request_ms']:.0f} ms "
        f"rendering none; env.images of every env {costs['images_all_ms']:.0f} ms → per teacher decision "
        f"({act_steps} steps) {every:.0f} ms against {lazy:.0f} ms: {every / lazy:.1f}×"
    )
    runs = {render: timed_run(args, render) for render in ("every_step", "on_request")}
    table = Table(title=f"DAgger from {args.teacher} on {args.family}, {args.steps:,} env steps, 32 envs")
    for column in ("render", "wall", *SPLIT, "frames for the teacher", "success"):
        table.add_column(column)
    for render, run in runs.items():
        frames = "with every step" if render == "every_step" else f"{run['teacher_frames']:,}"
        split = [f"{run['split'][part]:.0f} s" for part in SPLIT]
        table.add_row(render, f"{run['seconds']:.0f} s", *split, frames, f"{run['success']:.0%}")
    console.print(table)
    summary = {
        "every_step_s": round(runs["every_step"]["seconds"], 1),
        "on_request_s": round(runs["on_request"]["seconds"], 1),
        "speedup": round(runs["every_step"]["seconds"] / runs["on_request"]["seconds"], 2),
        "env_speedup_per_decision": round(every / lazy, 2),
        "frames_ratio": round(runs["on_request"]["teacher_frames"] / args.steps, 3),  # of every step's env frames
        "split": {render: run["split"] for render, run in runs.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
