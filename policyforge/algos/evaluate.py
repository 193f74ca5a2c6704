"""Deterministic evaluation: one episode per evaluation env with `policy.act` (action chunks executed by
`ChunkedActor`), optionally filmed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from policyforge.io import write_video
from policyforge.policies.base import Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.vec_env import VecEnv

VIDEO_FPS = 25.0
"""Videos are filmed at about this rate (every k-th control step), whatever the control rate."""


@torch.no_grad()
def evaluate(
    policy: Policy,
    env: VecEnv,
    seed: int,
    video_path: Path | None = None,
    camera: str | None = None,
    video_envs: int = 4,
    video_seconds: float = 10.0,
) -> dict[str, float]:
    """Mean return (and its standard deviation over envs), success rate (for tasks that define success) and length
    of the first episode of every env (no bias towards short episodes). With `video_path`, films the first
    `video_envs` envs side by side (a 2×2 grid by default) for at most `video_seconds` of simulated time."""
    obs = env.reset(seed=seed)
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool)
    defines_success = False
    returns, lengths, successes = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    tiles = np.arange(min(video_envs, n))
    every = max(1, round(1.0 / (VIDEO_FPS * env.control_dt)))
    frames: list[np.ndarray] = []
    term_sums: dict[str, torch.Tensor] = {}
    term_steps = torch.zeros(n)
    step, last_frame = 0, int(video_seconds / env.control_dt) if video_path is not None else -1
    actor = ChunkedActor(policy, n)
    while not finished.all():
        obs, _, _, _, info = env.step(actor(obs))
        actor.episodes_ended(info["episode"]["done"])
        if step <= last_frame and step % every == 0:
            frames.append(_tile(env.render(camera, env_ids=tiles, width=240, height=180)))
        step += 1
        active = (~finished).float()
        for name, value in info["reward_terms"].items():
            term_sums[name] = term_sums.get(name, torch.zeros(n)) + value * active
        term_steps += active
        defines_success |= "success" in info
        episode = info["episode"]
        first = episode["done"] & ~finished
        returns[first] = episode["return"][first]
        lengths[first] = episode["length"][first].float()
        successes[first] = episode["success"][first].float()
        finished |= episode["done"]
    if video_path is not None:
        write_video(video_path, frames, fps=1 / (env.control_dt * every))
    per_step = {
        f"eval/terms/{name}": float((total / term_steps.clamp(min=1)).mean()) for name, total in term_sums.items()
    }
    success = {"eval/success": float(successes.mean())} if defines_success else {}
    return {
        "eval/return": float(returns.mean()),
        "eval/return_std": float(returns.std(unbiased=False)),
        **success,
        "eval/length": float(lengths.mean()),
        **per_step,
    }


def _tile(frames: np.ndarray) -> np.ndarray:
    """[n, H, W, 3] frames in a near-square grid, [rows·H, cols·W, 3]."""
    n, height, width, _ = frames.shape
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    grid = np.zeros((rows * height, cols * width, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        r, c = divmod(i, cols)
        grid[r * height : (r + 1) * height, c * width : (c + 1) * width] = frame
    return grid
