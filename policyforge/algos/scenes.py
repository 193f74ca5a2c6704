"""Simulated scenes for behaviour cloning's auxiliary loss (`algo.scene_frames`).

A dataset of N demonstrations shows N layouts of the scene, and a network that must find a named object in its
images learns those layouts by heart instead (bench/vla_localize.py: trained on 400 demonstrations' frames the VLA
placed the named cube no better than the mean guess on a new layout; trained on 8,000 fresh layouts, within ~2 cm).
Layouts cost the simulator one reset and one render each, and its privileged state labels them, so BC can add
thousands: the first frames of fresh episodes, whose privileged state `Policy.privileged_loss` regresses beside the
demonstrations' behaviour-cloning loss.
"""

from __future__ import annotations

import dataclasses

import torch

from policyforge.policies.base import IMAGE_FEATURES_KEY, IMAGE_KEY, Obs, Policy
from policyforge.sims.config import SimConfig
from policyforge.sims.instruction_obs import INSTRUCTION_KEY
from policyforge.sims.make import make_env

SCENE_SEED_OFFSET = 2_000_003
"""Scenes are reset with env seeds from run seed + this on (evaluation's start at + 1_000_003, collection's at 0)."""
SCENE_ENVS = 64
"""Environments reset together per batch of scenes."""


class SceneFrames:
    """The first frame of `count` fresh episodes of a simulation, with its privileged state."""

    def __init__(self, sim: SimConfig, count: int, policy: Policy, seed: int):
        """Reset `count` episodes of `sim` (its task, options and cameras; env seeds from `seed` +
        SCENE_SEED_OFFSET) and keep the observations `policy` reads and the privileged state it regresses
        (`policy.bc_privileged_key`); images as the policy's frozen encoder features where it has one."""
        if policy.bc_privileged_key is None:
            raise ValueError(f"{type(policy).__name__} regresses no privileged state: scenes would teach it nothing")
        self.privileged_key: str = policy.bc_privileged_key
        keep = [key for key in (policy.obs_key, IMAGE_KEY, INSTRUCTION_KEY) if key in policy.obs_keys]
        keep.append(self.privileged_key)
        env = make_env(dataclasses.replace(sim, num_envs=min(count, SCENE_ENVS)), seed=seed + SCENE_SEED_OFFSET)
        parts: dict[str, list[torch.Tensor]] = {key: [] for key in keep}
        try:
            for batch in range(-(-count // env.num_envs)):
                obs = env.reset(seed=seed + SCENE_SEED_OFFSET + batch)
                for key in keep:
                    parts[key].append(obs[key].cpu())
        finally:
            env.close()
        self.obs: Obs = {key: torch.cat(values)[:count] for key, values in parts.items()}
        """Each scene's observation under the env's keys, [count, ...]."""
        if IMAGE_KEY in self.obs:
            features = policy.frozen_image_features(self.obs[IMAGE_KEY])
            if features is not None:
                self.obs[IMAGE_FEATURES_KEY] = features
                del self.obs[IMAGE_KEY]
        self.history = policy.n_obs_steps

    def __len__(self) -> int:
        return len(self.obs[self.privileged_key])

    def sample(self, batch: int) -> Obs:
        """`batch` random scenes shaped as BC's windows (`bc.DemoWindows.sample`): state and images with a history
        axis of n_obs_steps copies of the one frame (an episode's first window repeats its first frame), the
        instruction and the privileged state without one."""
        pick = torch.randint(len(self), (batch,))
        obs = {key: value[pick] for key, value in self.obs.items()}
        if self.history:
            for key in obs.keys() - {INSTRUCTION_KEY, self.privileged_key}:
                obs[key] = obs[key].unsqueeze(1).expand(-1, self.history, *obs[key].shape[1:])
        return obs
