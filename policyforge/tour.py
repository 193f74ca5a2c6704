"""The environment tour (`policyforge tour`): every task on the native MuJoCo backend, with videos.

Scripted experts solve the arm tasks, an energy-shaping controller swings the pendulum up, and the
quadruped stands on its PD servos under domain randomisation declared in the config. Each task gets an
MP4 and its figures (success, return, simulation throughput) go to `summary.json` and the terminal.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge.config import check_in, check_seed
from policyforge.data.experts import EXPERTS
from policyforge.io import write_json, write_video
from policyforge.sims import RandomizationConfig, SimConfig, make_env
from policyforge.sims.config import MAX_ENVS
from policyforge.sims.vec_env import VecEnv

MAX_VIDEO_SIZE = 4096
"""Largest video side, px (4K); every frame is rendered offscreen at this size and held until written."""


@dataclasses.dataclass
class TourConfig:
    """What the environment tour runs and where it writes."""

    out_dir: str = "runs/tour"
    """Directory for the videos and summary.json."""
    num_envs: int = 16
    """Environments per task."""
    seed: int = 0
    """Seed of every environment."""
    video_width: int = 320
    """Video width, pixels."""
    video_height: int = 240
    """Video height, pixels."""
    quadruped_randomization: RandomizationConfig = dataclasses.field(
        default_factory=lambda: RandomizationConfig(friction=(0.4, 1.2), mass_scale=(0.85, 1.15), kp_scale=(0.8, 1.2))
    )
    """Domain randomisation applied to the quadruped."""

    def __post_init__(self) -> None:
        check_in(self.num_envs, "num_envs", f"[1, {MAX_ENVS}]")
        check_seed(self.seed, "seed")
        check_in(self.video_width, "video_width", f"[16, {MAX_VIDEO_SIZE}]", unit=" px")
        check_in(self.video_height, "video_height", f"[16, {MAX_VIDEO_SIZE}]", unit=" px")


def _pendulum_controller(obs: dict[str, torch.Tensor], max_speed: float) -> torch.Tensor:
    """Energy pumping (dE/dt = 2·u·θ̇) until near upright, then PD balance."""
    cos, sin, speed = obs["policy"].double().T
    speed = speed * max_speed
    energy = 0.5 * speed**2 + 9.81 * (cos - 1.0)
    pump = torch.sign(speed) * torch.sign(-energy)
    balance = -10.0 * torch.atan2(sin, cos) - 2.0 * speed
    return torch.where(cos > 0.9, balance, pump).clamp(-1, 1)[:, None]


def _run_episode(env: VecEnv, act, cfg: TourConfig) -> dict:
    """One episode in every env; returns statistics and the frames of env 0."""
    obs = env.reset(seed=cfg.seed)
    frames, stats = [], {"return": [], "success": []}
    sim_time = 0.0
    for _ in range(env.episode_steps):
        action = act(obs)
        start = time.perf_counter()
        obs, _, _, _, info = env.step(action)
        sim_time += time.perf_counter() - start
        frames.append(env.render(env_ids=[0], width=cfg.video_width, height=cfg.video_height)[0])
        done = info["episode"]["done"]
        stats["return"] += info["episode"]["return"][done].tolist()
        stats["success"] += info["episode"]["success"][done].tolist()
    return {
        "episodes": len(stats["return"]),
        "mean_return": float(np.mean(stats["return"])),
        "success_rate": float(np.mean(stats["success"])),
        "env_steps_per_s": round(env.num_envs * env.episode_steps / sim_time),
        "frames": frames,
    }


def run_tour(cfg: TourConfig, console: Console | None = None) -> dict:
    """Run every task once, write videos and summary.json under `cfg.out_dir`; return the summary."""
    console = console or Console()
    out = Path(cfg.out_dir)
    summary = {}
    for task in ("pendulum-swingup", "arm-reach", "arm-push-cube", "arm-lift-cube", "arm-instructed", "quadruped-walk"):
        randomization = cfg.quadruped_randomization if task == "quadruped-walk" else RandomizationConfig()
        options = {"episode_seconds": 6.0} if task == "quadruped-walk" else {}
        env = make_env(SimConfig(task=task, num_envs=cfg.num_envs, randomization=randomization, task_options=options))
        if task in ("pendulum-swingup", "quadruped-walk"):
            max_speed = getattr(env.task.config, "max_speed", 1.0)
            act = (lambda o, s=max_speed: _pendulum_controller(o, s)) if task == "pendulum-swingup" else None
            act = act or (lambda o, e=env: torch.zeros(e.num_envs, e.action_dim))
            controller = "energy pump + PD" if task == "pendulum-swingup" else "stand, randomised"
        else:
            expert = EXPERTS[type(env.task)](env.task, cfg.num_envs)
            act = lambda o, e=env, x=expert: x.act(e.state)  # noqa: E731
            controller = f"scripted {type(expert).__name__.removesuffix('Expert').lower()}"
        with console.status(f"{task}: {controller}"):
            result = _run_episode(env, act, cfg)
        video = write_video(out / f"{task}.mp4", result.pop("frames"), fps=1 / env.control_dt)
        env.close()
        summary[task] = {"controller": controller, **result, "video": str(video)}
    write_json(out / "summary.json", summary)
    _print_table(console, summary)
    return summary


def _print_table(console: Console, summary: dict) -> None:
    table = Table(title="policyforge tour: native MuJoCo backend")
    for column in ("task", "controller", "episodes", "success", "mean return", "env steps/s"):
        table.add_column(column)
    for task, row in summary.items():
        success = "-" if task in ("quadruped-walk",) else f"{row['success_rate']:.0%}"
        table.add_row(
            task,
            row["controller"],
            str(row["episodes"]),
            success,
            f"{row['mean_return']:.2f}",
            f"{row['env_steps_per_s']:,}",
        )
    console.print(table)
    console.print(f"videos and summary.json in {Path(next(iter(summary.values()))['video']).parent}")
