"""n-step returns for off-policy learning: per-env pending transitions that turn one-step experience into
(obs_t, a_t, Σ_{i<k} γ^i r_{t+i}, next_obs_{t+k}, terminated, γ^k) with k = n, or fewer where the episode ended
first (bootstrapped from its true final observation unless it terminated). With a sparse reward that comes tens of
steps after the decisive action, the value reaches that action in 1/n of the bootstraps (RLPD, ResFiT, SAC-N use
n = 3–10)."""

from __future__ import annotations

from typing import Any

import torch

from policyforge.policies.base import Obs

Rows = dict[str, Any]
"""Transitions as `ReplayBuffer.add` takes them: obs, action, reward, next_obs, terminated, discount."""


class NStepReturns:
    """`n` slots per env, one per pending transition (the step it started at modulo n)."""

    def __init__(self, n: int, gamma: float, num_envs: int):
        self.n, self.gamma, self.step = n, gamma, 0
        self.obs: list[Obs | None] = [None] * n
        self.action: list[torch.Tensor | None] = [None] * n
        self.returns = torch.zeros(n, num_envs)
        self.length = torch.zeros(n, num_envs, dtype=torch.long)
        self.active = torch.zeros(n, num_envs, dtype=torch.bool)

    def push(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, final_obs: Obs, terminated: torch.Tensor,
             ended: torch.Tensor) -> Rows | None:  # fmt: skip
        """One env step of every env [N, ...] (`final_obs`: the true next observation, `ended`: terminated or
        truncated); returns the transitions complete after it (None: none)."""
        slot = self.step % self.n
        self.step += 1
        self.obs[slot], self.action[slot] = obs, action
        self.returns[slot], self.length[slot], self.active[slot] = 0.0, 0, True
        self.returns += self.active * self.gamma ** self.length.float() * reward
        self.length += self.active.long()
        done = self.active & ((self.length == self.n) | ended)
        rows = [self._rows(s, done[s], final_obs, terminated) for s in range(self.n) if done[s].any()]
        self.active &= ~done
        if not rows:
            return None
        return {k: _cat([r[k] for r in rows]) for k in rows[0]}

    def _rows(self, slot: int, envs: torch.Tensor, final_obs: Obs, terminated: torch.Tensor) -> Rows:
        obs, action = self.obs[slot], self.action[slot]
        assert obs is not None and action is not None
        return {
            "obs": {k: v[envs] for k, v in obs.items()},
            "action": action[envs],
            "reward": self.returns[slot, envs].clone(),
            "next_obs": {k: v[envs] for k, v in final_obs.items()},
            "terminated": terminated[envs],
            "discount": self.gamma ** self.length[slot, envs].float(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "obs": self.obs, "action": self.action, "returns": self.returns.clone(),
                "length": self.length.clone(), "active": self.active.clone()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.obs, self.action = state["step"], list(state["obs"]), list(state["action"])
        self.returns, self.length, self.active = state["returns"], state["length"], state["active"]


def _cat(parts: list[Any]) -> Any:
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if isinstance(parts[0], dict) else torch.cat(parts)
