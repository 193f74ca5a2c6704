"""The policy and the algorithm a run config describes, for an environment: the policy section's registered class
(`policy: {class: NAME, ...}`, policies.base.register_policy) and the algorithm section's
(`algo: {class: NAME, ...}`, algos.registry.register_algorithm). Nothing here knows a policy or algorithm class."""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyforge.algos.base import Algorithm
from policyforge.policies.base import EnvSpec, Policy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def build_policy(config: RunConfig, env: VecEnv) -> Policy:
    """The run's policy for an env, as its algorithm trains it (e.g. PPO's frozen early steps), so that the run's
    checkpoints load into it."""
    policy = config.policy.build(EnvSpec(env.obs_shapes, env.action_dim))
    config.algo.entry.prepare_policy(config, policy)
    return policy


def build(config: RunConfig, env: VecEnv) -> Algorithm:
    """The policy and algorithm a config describes, for an env."""
    return config.algo.entry.construct(config, env, build_policy(config, env))
