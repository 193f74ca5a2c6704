"""A policy class added the way a user adds one: this module and its one registration line, no edit anywhere else
(tests/algos/test_contracts.py trains it with PPO and BC, evaluates, exports and deploys it).

A linear Gaussian over single actions that reads a history of the last `history` observations: the rollout half of
the contract (`n_obs_steps`, `input_state`) does the stacking wherever it runs.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from policyforge.config import check_in
from policyforge.policies.base import EnvSpec, Obs, Policy, PolicyConfig, Sample, register_policy
from policyforge.policies.normalizer import RunningNormalizer

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@register_policy("toy-linear")
@dataclasses.dataclass
class ToyLinearConfig(PolicyConfig):
    """A linear Gaussian policy on an observation history."""

    history: int = 2
    """T_o, observations (the current one and earlier) it reads."""
    init_std: float = 0.5
    """Initial standard deviation of its actions."""

    def __post_init__(self) -> None:
        check_in(self.history, "history", "[1, 8]")
        check_in(self.init_std, "init_std", "(0, 2]")

    def build(self, env: EnvSpec) -> ToyLinearPolicy:
        return ToyLinearPolicy(env.state_dim, env.action_dim, self)


class ToyLinearPolicy(Policy):
    """mean = W · normalised history [B, T_o·D]; the chain is the unclipped sample [B, 1, A]."""

    def __init__(self, state_dim: int, action_dim: int, config: ToyLinearConfig):
        super().__init__()
        self.state_dim, self.action_dim, self.n_obs_steps = state_dim, action_dim, config.history
        self.normalizer = RunningNormalizer(state_dim)
        self.linear = nn.Linear(state_dim * config.history, action_dim)
        nn.init.normal_(self.linear.weight, std=0.01)
        nn.init.zeros_(self.linear.bias)
        self.log_std = nn.Parameter(torch.full((action_dim,), math.log(config.init_std)))

    def _mean_std(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.linear(self.normalizer(obs[self.obs_key]).flatten(1))[:, None]
        return mean, self.log_std.exp().expand_as(mean)

    def _log_density(self, chain: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return -0.5 * ((chain - mean) / std) ** 2 - std.log() - _HALF_LOG_2PI

    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        mean, std = self._mean_std(obs)
        chain = mean + noise_scale * std * torch.randn_like(mean) if noise_scale else mean
        return Sample(chain.clamp(-1.0, 1.0), chain, self._log_density(chain, mean, std).sum((1, 2)))

    def step_log_probs(self, obs: Obs, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = self._mean_std(obs)
        entropy = (0.5 + _HALF_LOG_2PI + std.log()).sum((1, 2))
        return self._log_density(chain, mean, std)[:, None], entropy

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        return (self._mean_std(obs)[0] - actions).pow(2).mean()

    def update_normalizer(self, obs: Obs) -> None:
        self.normalizer.update(obs[self.obs_key])

    def example_obs(self, batch: int) -> Obs:
        return {self.obs_key: torch.zeros(batch, self.n_obs_steps, self.state_dim)}
