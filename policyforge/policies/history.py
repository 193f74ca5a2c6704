"""The per-env input state a policy needs between decisions (`Policy.input_state`): what turns each env step's
observations into the policy's inputs. `ObservationHistory` stacks the last T_o observations; other policies bring
their own (a per-step residual's base-action history, a VLA's cached instruction encoding) with the same interface.
"""

from __future__ import annotations

from typing import Protocol

import torch

Obs = dict[str, torch.Tensor]


class InputState(Protocol):
    """Per-env state between decisions, pushed every env step (PPO's rollouts, evaluation, deployment alike)."""

    def restart(self, done: torch.Tensor) -> None:
        """Envs `done` [N] bool start a new episode with the next observation."""

    def push(self, obs: Obs) -> Obs:
        """Add this env step's observations [N, ...]; return the policy's inputs for it."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything needed to continue exactly (checkpoints)."""

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Continue from `state_dict()`."""


class ObservationHistory:
    """Each env's last T_o observations of `keys`, pushed every env step: obs [N, ...] → policy obs [N, T_o, ...],
    oldest first.

    Policies without a history axis (T_o = 0) get the observation unchanged. An env marked by `restart` fills
    its whole history with the next observation pushed (the first of its new episode, repeated)."""

    def __init__(self, keys: tuple[str, ...], length: int, num_envs: int):
        self.keys, self.length = keys, length
        self.stacked: dict[str, torch.Tensor] = {}
        self.fresh = torch.ones(num_envs, dtype=torch.bool)

    def restart(self, done: torch.Tensor) -> None:
        self.fresh |= done

    def push(self, obs: Obs) -> Obs:
        """Add this step's observation; return the policy's view (the history keys only, when it has one)."""
        if not self.length:
            return obs
        for key in self.keys:
            current = obs[key][:, None]
            if key not in self.stacked:
                self.stacked[key] = current.repeat_interleave(self.length, dim=1)
            else:
                self.stacked[key] = torch.cat([self.stacked[key][:, 1:], current], dim=1)
            restart = self.fresh.nonzero()[:, 0]
            self.stacked[key][restart] = current[restart]  # broadcast over the history axis
        self.fresh[:] = False
        return dict(self.stacked)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"fresh": self.fresh.clone(), **{f"stacked.{k}": v.clone() for k, v in self.stacked.items()}}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.fresh = state["fresh"].clone()
        self.stacked = {k.removeprefix("stacked."): v.clone() for k, v in state.items() if k != "fresh"}
