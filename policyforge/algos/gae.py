"""Generalised advantage estimation (Schulman et al. 2016, eq. 16) over a rollout [T, N]."""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns [T, N].

    rewards, values, dones: [T, N]; next_value: [N], the value of the observation after the last step.
    `dones[t]` ends the episode after step t: nothing is bootstrapped or propagated across it. Time-outs are
    handled by the caller adding γ·V(final observation) to the reward of the truncated step, so that a
    truncated episode is bootstrapped from its true last state while a terminated one is not.
    """
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        following = next_value if t == steps - 1 else values[t + 1]
        alive = 1.0 - dones[t].to(rewards.dtype)
        delta = rewards[t] + gamma * following * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
    return advantages, advantages + values
