"""Reward scaling by the running standard deviation of the discounted return (as SB3's VecNormalize)."""

from __future__ import annotations

import torch

from policyforge.policies.normalizer import RunningNormalizer


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
