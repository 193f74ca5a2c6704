"""Critics: a state-value function (PPO, on the privileged `critic` observation) and Q-function ensembles (SAC)."""

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


class QEnsemble(nn.Module):
    """`count` independent Q(s, a) [B] heads on normalised observations: SAC's clipped double-Q (2), or REDQ's and
    RLPD's ensembles (e.g. 10, with layer norm) whose targets take the minimum over a random subset."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: list[int],
        activation: Activation = "relu",
        obs_key: str = "critic",
        normalize_obs: bool = True,
        count: int = 2,
        layer_norm: bool = False,
    ):
        super().__init__()
        self.obs_key = obs_key
        self.normalizer = RunningNormalizer(obs_dim, enabled=normalize_obs)
        self.heads = nn.ModuleList(
            mlp(obs_dim + action_dim, hidden, 1, activation, layer_norm=layer_norm) for _ in range(count)
        )
        self._register_load_state_dict_pre_hook(_twin_q_names)

    def forward(self, obs: Obs, action: torch.Tensor) -> torch.Tensor:
        """Q-values [M, B] of every head for actions [B, A]."""
        x = torch.cat([self.normalizer(obs[self.obs_key]), action], dim=-1)
        return torch.stack([head(x)[:, 0] for head in self.heads])


def _twin_q_names(state: dict, prefix: str, *args) -> None:
    """Checkpoints of the former TwinQ (heads `q1`, `q2`) load as a 2-head ensemble."""
    for old, new in (("q1.", "heads.0."), ("q2.", "heads.1.")):
        for key in [k for k in state if k.startswith(prefix + old)]:
            state[prefix + new + key[len(prefix + old) :]] = state.pop(key)
