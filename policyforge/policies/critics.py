"""Critics: a state-value function (PPO, on the privileged `critic` observation) and twin Q-functions (SAC)."""

from __future__ import annotations

import torch
from torch import nn

from policyforge.policies.base import Obs
from policyforge.policies.networks import Activation, mlp
from policyforge.policies.normalizer import RunningNormalizer


class ValueFunction(nn.Module):
    """V(s) [B] from `obs[obs_key]` (by default the privileged critic observation), normalised inside."""

    def __init__(
        self,
        obs_dim: int,
        hidden: list[int],
        activation: Activation = "elu",
        obs_key: str = "critic",
        normalize_obs: bool = True,
    ):
        super().__init__()
        self.obs_key = obs_key
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.net = mlp(obs_dim, hidden, 1, activation, out_gain=1.0)

    def forward(self, obs: Obs) -> torch.Tensor:
        return self.net(self.normalizer(obs[self.obs_key]))[:, 0]


class TwinQ(nn.Module):
    """Two independent Q(s, a) [B] heads (clipped double-Q), on normalised observations."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: list[int],
        activation: Activation = "relu",
        obs_key: str = "critic",
        normalize_obs: bool = True,
    ):
        super().__init__()
        self.obs_key = obs_key
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.q1 = mlp(obs_dim + action_dim, hidden, 1, activation)
        self.q2 = mlp(obs_dim + action_dim, hidden, 1, activation)

    def forward(self, obs: Obs, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Q-values [B] of both heads for actions [B, A]."""
        x = torch.cat([self.normalizer(obs[self.obs_key]), action], dim=-1)
        return self.q1(x)[:, 0], self.q2(x)[:, 0]
