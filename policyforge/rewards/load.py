"""Reward models by `sim.reward_model.kind`, and the env wrapped with one."""

from __future__ import annotations

from policyforge.rewards.base import RewardModel
from policyforge.rewards.config import RewardModelConfig
from policyforge.sims.config import ImageConfig, SimConfig
from policyforge.sims.vec_env import VecEnv


def load_reward_model(config: RewardModelConfig, image: ImageConfig) -> RewardModel:
    """The model `config` names, on its device, in eval mode; a zero-shot one reads `config.cameras` (default: the
    first of sim.image's) at sim.image's size."""
    cameras = config.cameras or image.cameras[:1]
    if config.kind == "clip":
        from policyforge.rewards.clip import load_clip

        return load_clip(config.path, config.clip, cameras, image.height, image.width).to(config.device)
    if config.kind == "vlm":
        from policyforge.rewards.vlm import load_vlm

        return load_vlm(config.path, config.vlm, cameras, image.height, image.width).to(config.device)
    from policyforge.rewards.learned import load_learned

    return load_learned(config.path, device=config.device)


def with_reward_model(env: VecEnv, sim: SimConfig) -> VecEnv:
    """`env` (made from `sim`) with `sim.reward_model`'s reward (`rewards.wrapper.RewardWrapper`)."""
    from policyforge.rewards.wrapper import RewardWrapper

    return RewardWrapper(env, load_reward_model(sim.reward_model, sim.image), sim.reward_model, sim.image)
