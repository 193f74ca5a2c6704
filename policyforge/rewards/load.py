"""Reward models by `sim.reward_model.kind`, and the env wrapped with one."""

from __future__ import annotations

from policyforge.rewards.base import RewardModel
from policyforge.rewards.config import RewardModelConfig
from policyforge.sims.config import SimConfig
from policyforge.sims.vec_env import VecEnv


def load_reward_model(config: RewardModelConfig) -> RewardModel:
    """The model `config` names, on its device, in eval mode."""
    from policyforge.rewards.learned import load_learned

    return load_learned(config.path, device=config.device)


def with_reward_model(env: VecEnv, sim: SimConfig) -> VecEnv:
    """`env` (made from `sim`) with `sim.reward_model`'s reward (`rewards.wrapper.RewardWrapper`)."""
    from policyforge.rewards.wrapper import RewardWrapper

    return RewardWrapper(env, load_reward_model(sim.reward_model), sim.reward_model, sim.image)
