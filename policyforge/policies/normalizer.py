"""Normalisation by running statistics, in one place.

- `RunningNormalizer`: observations, a module so that it is saved with and exported inside the model.
- `ReturnScaler`: PPO's reward scaling by the running standard deviation of the discounted return (as SB3's
  VecNormalize); it keeps its statistics in a `RunningNormalizer` and lives outside the model (checkpointed by PPO).
"""

from __future__ import annotations

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """y = clip((x − mean) / sqrt(var + eps), ±clip), statistics from every batch passed to `update`.

    Shapes: x [..., D]. Statistics are buffers (float64 for the running sums): checkpoints carry them and
    exported graphs bake them in. `enabled=False` makes it the identity.
    """

    def __init__(self, dim: int, enabled: bool = True, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.enabled, self.clip, self.eps = enabled, clip, eps
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of a batch x [..., D] (Chan et al.'s parallel variance update)."""
        if not self.enabled:
            return
        x = x.reshape(-1, x.shape[-1]).to(torch.float64)
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.var.copy_((self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        mean, std = self.mean.to(x.dtype), torch.sqrt(self.var + self.eps).to(x.dtype)
        return torch.clamp((x - mean) / std, -self.clip, self.clip)


class ReturnScaler:
    """r / std(R) with R = γ R + r per env, reset at episode ends. Shapes: [N]."""

    def __init__(self, num_envs: int, gamma: float, enabled: bool = True, clip: float = 10.0):
        self.gamma, self.enabled, self.clip = gamma, enabled, clip
        self.returns = torch.zeros(num_envs, dtype=torch.float64)
        self.stats = RunningNormalizer(1)

    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return reward
        self.returns = self.returns * self.gamma + reward.to(torch.float64)
        self.stats.update(self.returns[:, None])
        self.returns[done] = 0.0
        std = torch.sqrt(self.stats.var[0] + self.stats.eps)
        return (reward / std.to(reward.dtype)).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict:
        return {"returns": self.returns.clone(), "stats": self.stats.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.returns = state["returns"].clone()
        self.stats.load_state_dict(state["stats"])
