"""Circular buffers of named tensors on the learner's device: SAC's transitions, DAgger's labelled observations."""

from __future__ import annotations

import torch

from policyforge.policies.base import Obs


class CircularBuffer:
    """Rows of named tensors in preallocated storage of `capacity` rows; the oldest rows are overwritten first.

    Each field keeps the dtype and per-row shape of the first batch added (images stay uint8), unless `fields`
    allocates it up front: {name: (per-row shape, dtype)}."""

    def __init__(self, capacity: int, fields: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None):
        self.capacity, self.size, self.cursor = capacity, 0, 0
        self.data: dict[str, torch.Tensor] = {
            name: torch.zeros(capacity, *shape, dtype=dtype) for name, (shape, dtype) in (fields or {}).items()
        }

    def add(self, rows: dict[str, torch.Tensor]) -> None:
        """Append n rows: every field [n, ...] (the same fields every time)."""
        n = len(next(iter(rows.values())))
        if not self.data:
            self.data = {k: torch.zeros(self.capacity, *v.shape[1:], dtype=v.dtype) for k, v in rows.items()}
        index = (self.cursor + torch.arange(n)) % self.capacity
        for name, value in rows.items():
            self.data[name][index] = value.to(self.data[name].dtype)
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A uniform batch of rows (with replacement): {field: [batch_size, ...]}."""
        index = torch.randint(0, self.size, (batch_size,))
        return {name: values[index] for name, values in self.data.items()}

    def state_dict(self) -> dict:
        return {
            "size": self.size,
            "cursor": self.cursor,
            "data": {k: v[: self.size].clone() for k, v in self.data.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.size, self.cursor = state["size"], state["cursor"]
        for name, values in state["data"].items():
            if name not in self.data:
                self.data[name] = torch.zeros(self.capacity, *values.shape[1:], dtype=values.dtype)
            self.data[name][: self.size] = values


class ReplayBuffer(CircularBuffer):
    """Transitions (obs, action [A], reward, next_obs, terminated) of `capacity` rows, allocated up front; with
    `discounted`, each also holds the discount of its bootstrap (γ^k of an n-step transition, `nstep.py`).

    `next_obs` of a finished episode is its true final observation; only `terminated` cuts bootstrapping."""

    def __init__(
        self, capacity: int, obs_shapes: dict[str, tuple[int, ...]], action_dim: int, discounted: bool = False
    ):
        fields = {f"{part}/{k}": (s, torch.float32) for part in ("obs", "next_obs") for k, s in obs_shapes.items()}
        fields.update(
            {"action": ((action_dim,), torch.float32), "reward": ((), torch.float32), "terminated": ((), torch.bool)}
        )
        if discounted:
            fields["discount"] = ((), torch.float32)
        super().__init__(capacity, fields)
        self.scalars = (
            ("action", "reward", "terminated", "discount") if discounted else ("action", "reward", "terminated")
        )

    def add(  # type: ignore[override]
        self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, next_obs: Obs, terminated: torch.Tensor,
        discount: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
        """Append a batch of n transitions (rows [n, ...]; `discount` [n] when the buffer is `discounted`)."""
        rows = {"action": action, "reward": reward, "terminated": terminated}
        if "discount" in self.data:
            assert discount is not None, "a discounted buffer stores each transition's discount"
            rows["discount"] = discount
        rows.update({f"obs/{k}": obs[k] for k in self._keys("obs")})
        rows.update({f"next_obs/{k}": next_obs[k] for k in self._keys("next_obs")})
        super().add(rows)

    def sample(self, batch_size: int) -> dict[str, object]:  # type: ignore[override]
        """A uniform batch: {"obs": Obs, "action", "reward", "next_obs": Obs, "terminated"[, "discount"]}."""
        rows = super().sample(batch_size)
        return {
            "obs": {k: rows[f"obs/{k}"] for k in self._keys("obs")},
            "next_obs": {k: rows[f"next_obs/{k}"] for k in self._keys("next_obs")},
            **{name: rows[name] for name in self.scalars},
        }

    def _keys(self, prefix: str) -> list[str]:
        return [name.split("/", 1)[1] for name in self.data if name.startswith(prefix + "/")]
