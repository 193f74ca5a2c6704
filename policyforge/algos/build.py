"""The policy and the algorithm a run config describes, for an environment."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from policyforge.algos.base import Algorithm
from policyforge.algos.bc import BC, demo_windows, load_demonstrations
from policyforge.algos.ppo import PPO
from policyforge.algos.sac import SAC
from policyforge.config import ConfigError, check
from policyforge.policies.base import Policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.diffusion import DiffusionPolicy
from policyforge.policies.flow import FlowPolicy
from policyforge.policies.gaussian import GaussianPolicy
from policyforge.policies.residual import ResidualPolicy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def build_policy(config: RunConfig, env: VecEnv, policy_class: str | None = None) -> Policy:
    """The policy a config describes (of `policy_class`, default config.policy_class), for an env."""
    state_dim, image_shape = env.obs_shapes["policy"][0], env.obs_shapes.get(IMAGE_KEY)
    policy_class = policy_class or config.policy_class
    if policy_class == "residual":
        base = build_policy(config, env, config.residual.base_class)
        return ResidualPolicy(base, state_dim, config.residual)
    if policy_class in ("diffusion", "flow"):
        chunked = DiffusionPolicy if policy_class == "diffusion" else FlowPolicy
        policy = chunked(state_dim, env.action_dim, getattr(config, policy_class), image_shape=image_shape)
        trainable = config.ppo.trainable_steps
        if config.algo == "ppo" and trainable is not None and config.policy_class != "residual":
            check(
                trainable <= policy.steps,
                "ppo.trainable_steps",
                f"must be ≤ the policy's {policy.steps} sampling steps, got {trainable}",
            )
            policy.freeze_early_steps(policy.steps - trainable)
        return policy
    if image_shape is not None:
        raise ConfigError(
            "sim.image.cameras", "the Gaussian policy reads states only: use policy_class diffusion or flow"
        )
    return GaussianPolicy(state_dim, env.action_dim, config.policy)


def build(config: RunConfig, env: VecEnv) -> Algorithm:
    """The policy and algorithm a config describes, for an env."""
    policy = build_policy(config, env)
    if config.algo == "bc":
        cameras = config.sim.image.cameras
        demos = load_demonstrations(config.bc, config.sim.task, env, cameras)
        return BC(policy, demo_windows(policy, demos, config.bc, cameras), config.bc)
    if config.algo == "sac":
        return SAC(policy, env.obs_shapes, config.sac)
    steps_per_iteration = env.num_envs * config.ppo.rollout_steps * getattr(policy, "act_steps", 1)
    iterations = math.ceil(config.runner.total_env_steps / steps_per_iteration)
    critic_dim = env.obs_shapes[config.ppo.critic_obs_key][0]
    return PPO(policy, critic_dim, env.num_envs, config.ppo, iterations)
