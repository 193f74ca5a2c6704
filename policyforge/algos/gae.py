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


def group_relative_advantages(
    rewards: torch.Tensor, dones: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO-style advantages [T, N] and the mask [T, N] of decisions that have one.

    Every decision of an episode that ends within the rollout gets that episode's (undiscounted) return,
    standardised among the episodes finished by its group of envs (envs g·G … g·G + G − 1) in this rollout:
    no critic. Decisions of episodes still running at the end of the rollout have none (mask false); an
    episode that began before the rollout counts from the rollout's first decision, so rollouts should span
    whole episodes.
    """
    steps, num_envs = rewards.shape
    ended = dones.bool()
    to_go, finishes = torch.zeros_like(rewards), torch.zeros_like(ended)
    running, finishing = torch.zeros_like(rewards[0]), torch.zeros_like(ended[0])
    for t in reversed(range(steps)):
        running = rewards[t] + running * ~ended[t]
        finishing = ended[t] | finishing
        to_go[t], finishes[t] = running, finishing
    episode_return = to_go.clone()
    for t in range(1, steps):  # every decision carries the return from its episode's first decision
        episode_return[t] = torch.where(ended[t - 1], to_go[t], episode_return[t - 1])
    groups = num_envs // group_size
    outcome = episode_return.view(steps, groups, group_size)
    weight = ended.view(steps, groups, group_size).to(rewards.dtype)  # one entry per finished episode
    count = weight.sum((0, 2)).clamp_min(1)
    mean = (outcome * weight).sum((0, 2)) / count
    std = (((outcome - mean[None, :, None]) ** 2 * weight).sum((0, 2)) / count).sqrt()
    advantages = (outcome - mean[None, :, None]) / (std[None, :, None] + 1e-6)
    return (advantages.view(steps, num_envs) * finishes), finishes
