"""Decisions that span several simulator steps: a chunk of actions executed open-loop as one step of an outer
env (Q-chunking, Li et al. 2025: an actor and critics over whole action chunks), and the loop that executes a
chunk, shared with the noise-steered env (`algos.steering`).

A decision's reward is the sum of its executed steps' rewards up to the first episode end (undiscounted within the
decision: the algorithm's `gamma` discounts decisions, as DSRL and Q-chunking treat a chunk as one action); an env
whose episode ends mid-chunk reports that end (terminated / truncated, its statistics and `final_obs` at that step)
and runs the rest of the chunk in its new episode, whose steps belong to no decision. A second end within the same
decision (episodes shorter than a chunk) is not reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.sims.vec_env import Obs, StepResult, VecEnv
from policyforge.sims.wrapper import VecEnvWrapper

AfterStep = Callable[[int, Obs, torch.Tensor], None]
"""Called after executed step i of a decision with its observation and which envs' episodes ended there."""


@torch.no_grad()
def run_decision(env: VecEnv, chunk: torch.Tensor, steps: int, after_step: AfterStep | None = None) -> StepResult:
    """Execute the first `steps` actions of `chunk` [N, H, A] in `env` as one decision (module docstring)."""
    n, device = env.num_envs, env.device
    total, done = torch.zeros(n, device=device), torch.zeros(n, dtype=torch.bool, device=device)
    terminated, truncated = torch.zeros_like(done), torch.zeros_like(done)
    decision_info: dict[str, Any] | None = None
    for i in range(steps):
        obs, reward, step_terminated, step_truncated, info = env.step(chunk[:, i])
        live = ~done
        total += reward * live
        ended_now = (step_terminated | step_truncated) & live
        terminated |= step_terminated & live
        truncated |= step_truncated & live
        decision_info = _merged(decision_info, info, live, ended_now)
        done |= ended_now
        if after_step is not None:
            after_step(i, obs, step_terminated | step_truncated)
    assert decision_info is not None, "a decision executes at least one step"
    final = decision_info["final_obs"]
    decision_info["final_obs"] = {k: torch.where(_rows(done, v), v, obs[k]) for k, v in final.items()}
    return obs, total, terminated, truncated, decision_info


class ActionChunkEnv(VecEnvWrapper):
    """`env` acted in by whole chunks: an action [N, H·A] is H of the env's actions [N, H, A], executed open-loop
    as one decision (`sim.action_chunk`; Q-chunking's actor and critics then see chunks)."""

    def __init__(self, env: VecEnv, chunk: int):
        super().__init__(env)
        if chunk < 1:
            raise ConfigError("sim.action_chunk", f"a chunk holds at least one action, got {chunk}")
        self.chunk, self.env_action_dim = chunk, env.action_dim
        self.action_dim = chunk * env.action_dim
        self.env_steps_per_step = chunk * env.env_steps_per_step
        self.control_dt = env.control_dt * chunk
        self.episode_steps = -(-env.episode_steps // chunk)

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        action = torch.as_tensor(action, dtype=torch.float32, device=self.device)
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(
                f"chunk actions of shape {list(action.shape)}: this environment takes [N, H·A] = "
                f"[{self.num_envs}, {self.action_dim}] ({self.chunk} actions of {self.env_action_dim}, flattened)"
            )
        return run_decision(self.env, action.view(self.num_envs, self.chunk, self.env_action_dim), self.chunk)


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`mask` [N] broadcast over the trailing axes of `like` [N, ...]."""
    return mask.view(-1, *([1] * (like.dim() - 1)))


def _merged(so_far: dict[str, Any] | None, info: dict[str, Any], live: torch.Tensor, ended: torch.Tensor) -> dict:
    """The decision's info after one more executed step: reward terms summed over the live steps, each env's
    episode statistics, final observation and success flag taken at its first episode end (`ended` [N]), the
    success flag of envs still running from the latest step."""
    if so_far is None:
        so_far = {
            "final_obs": {k: v.clone() for k, v in info["final_obs"].items()},
            "episode": {k: torch.zeros_like(v) for k, v in info["episode"].items()},
            "reward_terms": {k: torch.zeros_like(v) for k, v in info["reward_terms"].items()},
        }
    for name, value in info["reward_terms"].items():
        so_far["reward_terms"][name] += value * live
    for name, value in info["episode"].items():
        so_far["episode"][name] = torch.where(ended, value, so_far["episode"][name])
    for name, value in info["final_obs"].items():
        so_far["final_obs"][name] = torch.where(_rows(ended, value), value, so_far["final_obs"][name])
    if "success" in info:
        so_far["success"] = torch.where(live, info["success"], so_far.get("success", info["success"]))
    return so_far
