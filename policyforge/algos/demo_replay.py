"""Demonstrations as replay transitions for off-policy RL (RLPD, Ball et al. 2023: every batch half online, half
demonstrations): a recorded dataset (`policyforge collect`) turned into the transitions SAC stores, the actor's
inputs included (a per-step residual's base action at each frame, from the base's own actor run along the
episode, its chunks executed as they would be there).

A transition is (frame t, its action, the success flag after it as the reward, frame t+1), not terminated: the
tasks' sparse reward, episodes that end by time. An episode's last frame has no next observation and gives none.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from policyforge.algos.bc import obs_column
from policyforge.algos.nstep import NStepReturns
from policyforge.algos.replay import ReplayBuffer
from policyforge.config import ConfigError
from policyforge.data.dataset import Demonstrations
from policyforge.data.layout import ACTION
from policyforge.policies.base import Obs, Policy

SUCCESS = "next.success"
"""The dataset column of each frame's success flag after its action: the replayed reward."""


def check_demonstrations(config: Any) -> None:
    """Demonstrations replay their success flags: only the sparse reward makes them the run's rewards; steering
    actions (noise) have no recorded counterpart. (`config`: a RunConfig.)"""
    if not config.algo.demonstrations:
        return
    if config.sim.steer.enabled:
        why = "recorded actions are not a base's noise: replay demonstrations with a Gaussian or residual actor"
        raise ConfigError("algo.demonstrations", why)
    if config.sim.task_options.get("reward_type") != "sparse":
        why = "demonstrations are replayed with their success flags as rewards: set sim.task_options.reward_type=sparse"
        raise ConfigError("algo.demonstrations", why)


def demo_replay(
    demos: Demonstrations, policy: Policy, critic_key: str, stored: dict[str, tuple[int, ...]], n_step: int = 1,
    gamma: float = 0.99,
) -> ReplayBuffer:  # fmt: skip
    """Every transition of `demos` in a buffer shaped like SAC's (`stored`: the observation entries it keeps), as
    `n_step` transitions (discount `gamma`) when n_step > 1."""
    columns = {key: torch.as_tensor(demos.column(obs_column(demos, key)), dtype=torch.float32)
               for key in {policy.obs_key, critic_key}}  # fmt: skip
    actions = torch.as_tensor(demos.column(ACTION), dtype=torch.float32)
    rewards = torch.as_tensor(demos.column(SUCCESS).reshape(-1), dtype=torch.float32)
    count = int(sum(end - start - 1 for start, end in demos.episode_bounds))
    buffer = ReplayBuffer(max(count, 1), stored, actions.shape[1], discounted=n_step > 1)
    for start, end in np.asarray(demos.episode_bounds):
        inputs = _actor_inputs(policy, {k: v[start:end] for k, v in columns.items()})
        now, later = slice(0, end - start - 1), slice(1, end - start)
        obs = {**{k: v[now] for k, v in inputs.items()}, critic_key: columns[critic_key][start:end][now]}
        next_obs = {**{k: v[later] for k, v in inputs.items()}, critic_key: columns[critic_key][start:end][later]}
        steps, never = slice(start, end - 1), torch.zeros(end - start - 1, dtype=torch.bool)
        if n_step == 1:
            buffer.add(obs, actions[steps], rewards[steps], next_obs, never)
            continue
        pending = NStepReturns(n_step, gamma, 1)
        for t in range(end - start - 1):  # the episode's last transition ends it (by time: bootstrapped)
            row = slice(t, t + 1)
            last = torch.tensor([t == end - start - 2])
            done = pending.push({k: v[row] for k, v in obs.items()}, actions[steps][row], rewards[steps][row],
                                {k: v[row] for k, v in next_obs.items()}, never[row], last)  # fmt: skip
            if done is not None:
                buffer.add(**done)
    return buffer


@torch.no_grad()
def _actor_inputs(policy: Policy, episode: Obs) -> Obs:
    """The actor's inputs at each frame of one episode ([T, ...] each), pushed frame by frame as in a rollout."""
    state = policy.input_state(1)
    frames = [
        state.push({k: v[t : t + 1] for k, v in episode.items()}) for t in range(len(next(iter(episode.values()))))
    ]
    return {k: torch.cat([frame[k] for frame in frames]) for k in frames[0]}
