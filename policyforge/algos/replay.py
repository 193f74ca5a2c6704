"""A circular replay buffer of transitions on the learner's device."""

from __future__ import annotations

import torch

from policyforge.policies.base import Obs


class ReplayBuffer:
    """Transitions (obs, action [A], reward, next_obs, terminated) in preallocated tensors of `capacity` rows.

    `next_obs` of a finished episode is its true final observation; only `terminated` cuts bootstrapping."""

    def __init__(self, capacity: int, obs_shapes: dict[str, tuple[int, ...]], action_dim: int):
        self.capacity, self.size, self.cursor = capacity, 0, 0
        self.data = {
            **{f"obs/{k}": torch.zeros(capacity, *s) for k, s in obs_shapes.items()},
            **{f"next_obs/{k}": torch.zeros(capacity, *s) for k, s in obs_shapes.items()},
            "action": torch.zeros(capacity, action_dim),
            "reward": torch.zeros(capacity),
            "terminated": torch.zeros(capacity, dtype=torch.bool),
        }

    def add(
        self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, next_obs: Obs, terminated: torch.Tensor
    ) -> None:
        """Append a batch of n transitions (rows [n, ...])."""
        n = len(reward)
        index = (self.cursor + torch.arange(n)) % self.capacity
        items = {"action": action, "reward": reward, "terminated": terminated}
        items.update({f"obs/{k}": obs[k] for k in self._keys("obs")})
        items.update({f"next_obs/{k}": next_obs[k] for k in self._keys("next_obs")})
        for name, value in items.items():
            self.data[name][index] = value.to(self.data[name].dtype)
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> dict[str, object]:
        """A uniform batch: {"obs": Obs, "action", "reward", "next_obs": Obs, "terminated"}."""
        index = torch.randint(0, self.size, (batch_size,))
        return {
            "obs": {k: self.data[f"obs/{k}"][index] for k in self._keys("obs")},
            "next_obs": {k: self.data[f"next_obs/{k}"][index] for k in self._keys("next_obs")},
            **{name: self.data[name][index] for name in ("action", "reward", "terminated")},
        }

    def _keys(self, prefix: str) -> list[str]:
        return [name.split("/", 1)[1] for name in self.data if name.startswith(prefix + "/")]

    def state_dict(self) -> dict:
        return {
            "size": self.size,
            "cursor": self.cursor,
            "data": {k: v[: self.size].clone() for k, v in self.data.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.size, self.cursor = state["size"], state["cursor"]
        for name, values in state["data"].items():
            self.data[name][: self.size] = values
