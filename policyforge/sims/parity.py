"""Backend parity: run the native and the MJX env of one task from identical initial states (and physical
parameters) with identical actions, and measure how far their trajectories drift apart
(`policyforge/bench/mjx_parity.py`, `tests/sims/test_mjx.py`; also a check for a new task's MJX port)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import torch

from policyforge.sims.config import RandomizationConfig
from policyforge.sims.task import NumpySampler

if TYPE_CHECKING:
    from policyforge.sims.mjx_env import MjxVecEnv
    from policyforge.sims.mujoco_env import MujocoVecEnv


def oscillating_actions(steps: int, num_envs: int, action_dim: int, amplitude: float, seed: int = 0) -> np.ndarray:
    """Smooth bounded actions [T, N, A]: sines with random phases and periods of 1–2.5 s at 50 Hz, so arms
    sway in free space and quadrupeds step in place instead of drifting into the floor."""
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, (num_envs, action_dim))
    period = rng.uniform(50, 125, (num_envs, action_dim))
    t = np.arange(steps)[:, None, None]
    return (amplitude * np.sin(2 * np.pi * t / period + phase)).astype(np.float32)


@dataclasses.dataclass
class PairedRollout:
    qpos_error: np.ndarray
    """[T] largest |qpos_native − qpos_mjx| over envs still in their first episode."""
    obs_error: np.ndarray
    """[T] same for the policy observation (info["final_obs"])."""
    reward_error: np.ndarray
    """[T] same for rewards."""
    flags_equal: bool
    """terminated and truncated agreed at every step for every env."""
    first_done: np.ndarray
    """[N] step at which each env's first episode ended (T if it did not)."""


def paired_rollout(
    native: MujocoVecEnv, mjx: MjxVecEnv, actions: np.ndarray, randomization: RandomizationConfig | None = None
) -> PairedRollout:
    """Reset both envs to the same initial states (and physical parameters), apply the same actions."""
    n = native.num_envs
    sampler = NumpySampler(np.random.default_rng(1))
    initial = native.task.reset(sampler, n, np)
    if randomization is not None:
        initial.vars.update(native.randomizer.sample(sampler, n, np))
    native.reset_to(initial)
    mjx.reset_to(initial)
    steps = len(actions)
    alive = np.ones(n, dtype=bool)
    errors = np.zeros((steps, 3))
    first_done = np.full(n, steps)
    flags_equal = True
    for t in range(steps):
        action = torch.from_numpy(actions[t])
        _, reward_n, term_n, trunc_n, info_n = native.step(action)
        qpos_n = native.phys["qpos"].copy()
        _, reward_m, term_m, trunc_m, info_m = mjx.step(action)
        qpos_m = np.asarray(mjx.state.data.qpos)
        done = (term_n | trunc_n | term_m | trunc_m).numpy()
        flags_equal &= bool(((term_n == term_m) & (trunc_n == trunc_m)).numpy()[alive].all())
        if alive.any():
            still = alive & ~done  # envs that reset now have new (independently drawn) states
            obs_n, obs_m = info_n["final_obs"]["policy"].numpy(), info_m["final_obs"]["policy"].numpy()
            errors[t] = (
                np.abs(qpos_n - qpos_m)[still].max(initial=0.0),
                np.abs(obs_n - obs_m)[alive].max(),
                np.abs((reward_n - reward_m).numpy())[alive].max(),
            )
        first_done[alive & done] = t + 1
        alive &= ~done
    return PairedRollout(errors[:, 0], errors[:, 1], errors[:, 2], flags_equal, first_done)
