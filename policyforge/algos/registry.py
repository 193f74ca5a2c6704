"""Algorithms by name: the run config's `algo: {class: NAME, ...}` section is the config dataclass an algorithm
module registered under NAME, and the module registers with it how the algorithm builds itself from the run
config, the env and the policy (as rsl_rl's `construct_algorithm` does). A new algorithm is one module and one
`register_algorithm` line; nothing here knows any algorithm or policy class."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from policyforge.algos.base import Algorithm
from policyforge.config import Tagged
from policyforge.policies.base import Policy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def _no_adjustment(config: RunConfig, policy: Policy) -> None:
    """Train the policy as built."""


def _nothing_to_do(config: RunConfig) -> None:
    """No setting of another section rules this algorithm out, or sets one of its defaults."""


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """How one algorithm is built from a run config (whose `algo` section is the algorithm's config)."""

    construct: Callable[[RunConfig, VecEnv, Policy], Algorithm]
    """(run config, env, policy) → the algorithm training that policy in that env."""
    prepare_policy: Callable[[RunConfig, Policy], None] = _no_adjustment
    """Adjusts a freshly built policy the way this algorithm trains it (PPO: `trainable_steps`); applied whenever
    the run's policy is built, so checkpoints load into the same structure."""
    check: Callable[[RunConfig], None] = _nothing_to_do
    """Raises ConfigError, at load time, for settings of other sections this algorithm cannot work with."""
    fill_defaults: Callable[[RunConfig], None] = _nothing_to_do
    """Sets, at load time, the `algo` settings left null whose default depends on other sections (PPO:
    `update_policy_normalizer` on `init_policy`), so the saved config.yaml says what the run did."""


class AlgoConfig(Tagged, abc.ABC):
    """The run config's `algo` section: a registered algorithm's config (`algo: {class: sac, ...}`)."""

    registry: ClassVar[dict[str, type[Tagged]]] = {}
    plugin_group: ClassVar[str] = "policyforge.algorithms"
    reads_images: ClassVar[bool] = False
    """The algorithm reads the env's camera images itself, where the trained policy may not: distillation's teacher
    (another policy on the env's observations), a reward model being trained."""
    entry: ClassVar[AlgorithmEntry]
    """How the algorithm builds itself (set by `register_algorithm`)."""


C = TypeVar("C", bound=type[AlgoConfig])


def register_algorithm(name: str, config_class: C, entry: AlgorithmEntry) -> C:
    """Make `name` a valid `algo: {class: NAME, ...}` of run configs: its section fills `config_class`, and
    `entry` builds the algorithm. The one line an algorithm module adds."""
    registered = AlgoConfig.registry.get(name)
    if registered is not None and (registered is not config_class or config_class.entry != entry):
        raise ValueError(f"algorithm {name!r} is registered twice")
    config_class.tag, config_class.entry = name, entry
    AlgoConfig.registry[name] = config_class
    return config_class
