"""Arm reach policies on their twin and on franky-sim (a MuJoCo FR3 behind the libfranka protocol), through
`policyforge deploy`: how far from the goal each ends, for a policy trained on the stiff simulated arm (before) and
one trained on the Franka motion generator (after, `sim.task_options.motion_generator: franka`).

    policyforge bench arm-transfer [--before ONNX] [--after ONNX] [--goals 6] [--seconds 6] [--modes joint cartesian]

Prints, per policy and arm mode, the final distance to each goal in simulation (the task's own twin, episode
stretched to the same seconds) and on franky-sim, and their means. The last line is JSON:
{"arm_reach_franky_error_m": {"before": e, "after": e}, ...} (joint mode; mean final distance, m).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge.real_robot.deploy import ExportedPolicy
from policyforge.real_robot.launch import DeployConfig, deploy
from policyforge.sims.config import SimConfig
from policyforge.sims.make import make_env
from policyforge.sims.task import NumpySampler
from policyforge.sims.tasks.arm_base import HOME_QPOS
from policyforge.sims.tasks.arm_tasks import ArmReach

ASSETS = Path("tests/real_robot/assets")


def goals(count: int) -> np.ndarray:
    """`count` reach goals [count, 3] drawn from the task's goal box with a fixed seed (m, base frame)."""
    return np.random.default_rng(7).uniform(ArmReach.goal_low, ArmReach.goal_high, (count, 3))


def twin_distances(path: Path, targets: np.ndarray, seconds: float) -> np.ndarray:
    """Final TCP distance [G] to each goal in the policy's own simulator, from the ready pose, after `seconds`."""
    policy = ExportedPolicy(path)
    options = {**policy.spec.get("task_options", {}), "episode_seconds": seconds + 1.0, "init_joint_noise": 0.0}
    env = make_env(SimConfig(task="arm-reach", num_envs=len(targets), task_options=options))
    initial = env.task.reset(NumpySampler(np.random.default_rng(0)), len(targets), np)
    initial.qpos[:, :7], initial.ctrl[:, :7] = HOME_QPOS, HOME_QPOS
    initial.vars["goal"][:] = targets
    obs = env.reset_to(initial)
    for _ in range(round(seconds / env.task.config.control_dt)):
        actions = np.asarray(policy.run(obs["policy"].numpy()))[:, 0]
        obs, *_ = env.step(torch.as_tensor(actions))
    return np.linalg.norm(env.task.tcp_pos(env.state) - targets, axis=1)


def franky_distances(path: Path, targets: np.ndarray, seconds: float, mode: str) -> np.ndarray:
    """Final distance [G] to each goal on franky-sim, one `deploy --peer sim` per goal."""
    out = []
    for goal in targets:
        config = DeployConfig(source=path, robot="franka", peer="sim", seconds=seconds, arm_mode=mode, realtime=True)
        result = deploy(dataclasses.replace(config, goal=tuple(map(float, goal))), say=lambda line: None)
        out.append(result.facts.get("goal_distance", math.nan))
    return np.asarray(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=ASSETS / "arm-reach-policy.onnx")
    parser.add_argument("--after", type=Path, default=ASSETS / "arm-reach-franka-policy.onnx")
    parser.add_argument("--goals", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=6.0, help="policy phase per goal, s")
    parser.add_argument("--modes", nargs="+", default=["joint", "cartesian"], choices=["joint", "cartesian"])
    args = parser.parse_args(argv)
    targets, console, rows = goals(args.goals), Console(), {}
    table = Table(title=f"arm-reach: final distance to {args.goals} goals after {args.seconds:g} s (cm)")
    for column in ("policy", "mode", "twin", "franky-sim", "twin mean", "franky-sim mean"):
        table.add_column(column)
    for name, path in (("before", args.before), ("after", args.after)):
        twin = twin_distances(path, targets, args.seconds)
        for mode in args.modes:
            franky = franky_distances(path, targets, args.seconds, mode)
            rows[f"{name}/{mode}"] = {"twin_m": twin.tolist(), "franky_m": franky.tolist()}
            cm = lambda values: " ".join(f"{100 * v:.1f}" for v in values)  # noqa: E731
            table.add_row(name, mode, cm(twin), cm(franky), f"{100 * twin.mean():.1f}", f"{100 * franky.mean():.1f}")
    console.print(table)
    error = {name: float(np.mean(rows[f"{name}/{args.modes[0]}"]["franky_m"])) for name in ("before", "after")}
    print(json.dumps({"arm_reach_franky_error_m": error, "mode": args.modes[0], "rows": rows}))


if __name__ == "__main__":
    main()
