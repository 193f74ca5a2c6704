"""Algorithms by name (a run config's `algo`): each algorithm module registers how it builds itself from the run
config, the env and the policy (as rsl_rl's `construct_algorithm` does), so a new algorithm is one module and one
`register_algorithm` line, and nothing here knows any algorithm or policy class."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from policyforge.algos.base import Algorithm
from policyforge.policies.base import Policy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def _no_adjustment(config: RunConfig, policy: Policy) -> None:
    """Train the policy as built."""


def _no_checks(config: RunConfig) -> None:
    """No setting of another section rules this algorithm out."""


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """How one algorithm is built from a run config."""

    construct: Callable[[RunConfig, VecEnv, Policy], Algorithm]
    """(run config, env, policy) → the algorithm training that policy in that env."""
    prepare_policy: Callable[[RunConfig, Policy], None] = _no_adjustment
    """Adjusts a freshly built policy the way this algorithm trains it (PPO: `trainable_steps`); applied whenever
    the run's policy is built, so checkpoints load into the same structure."""
    check: Callable[[RunConfig], None] = _no_checks
    """Raises ConfigError, at load time, for settings of other sections this algorithm cannot work with."""


ALGORITHMS: dict[str, AlgorithmEntry] = {}
"""Registered algorithms by name."""


def register_algorithm(name: str, entry: AlgorithmEntry) -> None:
    """Make `name` a valid `algo:` of run configs."""
    if name in ALGORITHMS and ALGORITHMS[name] != entry:
        raise ValueError(f"algorithm {name!r} is registered twice")
    ALGORITHMS[name] = entry
