"""What the runner needs from an algorithm: one collect-and-learn iteration, and its state for checkpoints."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

from policyforge.policies.base import Obs, Policy
from policyforge.sims.vec_env import VecEnv

StepCallback = Callable[[dict[str, Any]], None]
"""Called with the `info` of every env step (episode statistics for logging)."""


class Algorithm(abc.ABC):
    """An RL algorithm driving a VecEnv."""

    policy: Policy
    step_unit: str = "env_steps"
    """What the run's step counter counts (behaviour cloning counts gradient steps)."""

    ranked_by: tuple[str, ...] = ("eval/success", "eval/return")
    """The evaluation figures that decide which checkpoint is best (best.pt), compared in this order."""

    def evaluation(self) -> dict[str, float] | None:
        """Figures (`eval/*`) of an algorithm that evaluates what it trains itself, offline (a reward model on
        held-out rollouts); None: the runner evaluates the policy by rolling it out in the env."""
        return None

    def total_steps(self, default: int) -> int:
        """The run's length in `step_unit`s (`default`: runner.total_env_steps)."""
        return default

    @abc.abstractmethod
    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        """Collect experience from `obs` on, learn from it; return the latest observation and metrics."""

    @abc.abstractmethod
    def steps_per_iteration(self, env: VecEnv) -> int:
        """Environment steps (summed over envs) one `iterate` takes."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: networks, optimisers, normalisers, buffers."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()`."""


def select(obs: Obs, keys: set[str]) -> Obs:
    """The observation entries algorithms store: those their networks read."""
    return {k: v for k, v in obs.items() if k in keys}
