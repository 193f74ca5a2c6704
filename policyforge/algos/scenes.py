"""Simulated scenes for behaviour cloning's auxiliary loss (`algo.scene_frames`).

A dataset of N demonstrations shows N layouts of the scene, and a network that must find a named object in its
images learns those layouts by heart instead (bench/vla_localize.py: trained on 400 demonstrations' frames the VLA
placed the named cube no better than the mean guess on a new layout; trained on 8,000 fresh layouts, within ~2 cm).
Layouts cost the simulator one reset and one render each, and its privileged state labels them, so BC can add
thousands: the first frames of fresh episodes, whose privileged state `Policy.privileged_loss` regresses beside the
demonstrations' behaviour-cloning loss.

First frames show the arm at home, and in demonstrations the gripper is at the instructed object, so the arm's own
state predicts where that object is: a network that learns the scene from both follows the arm in closed loop
(`policyforge bench vla-estimate`: shuffling the proprioception between envs moved its estimate 12-13 cm). With
`motion_steps`, each batch of scenes is taken after the task's scripted expert has acted for a random number of
steps, in half the envs on another object than the instructed one: the arm in view, occluding, grasping and pushing
cubes, and not always the one whose place the loss asks for.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.policies.base import IMAGE_FEATURES_KEY, IMAGE_KEY, Obs, Policy
from policyforge.sims.config import ImageConfig, SimConfig
from policyforge.sims.instruction_obs import INSTRUCTION_KEY
from policyforge.sims.make import make_env
from policyforge.sims.task import TaskState
from policyforge.sims.vec_env import VecEnv

SCENE_SEED_OFFSET = 2_000_003
"""Scenes are reset with env seeds from run seed + this on (evaluation's start at + 1_000_003, collection's at 0)."""
SCENE_ENVS = 64
"""Environments reset together per batch of scenes."""
MOTION_NOISE, MOTION_HESITATION = 0.3, 0.1
"""The scripted expert's action noise and hesitation in scenes with motion (as the VLA's demonstrations')."""


class SceneFrames:
    """The first frame of `count` fresh episodes of a simulation, with its privileged state."""

    def __init__(self, sim: SimConfig, count: int, policy: Policy, seed: int, motion_steps: int = 0):
        """Reset `count` episodes of `sim` (its task, options and cameras; env seeds from `seed` +
        SCENE_SEED_OFFSET) and keep the observations `policy` reads and the privileged state it regresses
        (`policy.bc_privileged_key`); images as the policy's frozen encoder features where it has one.
        `motion_steps` > 0: each batch's scenes are the frames after the task's scripted expert has acted for
        a random 0..motion_steps steps (`ExpertMotion`)."""
        if policy.bc_privileged_key is None:
            raise ValueError(f"{type(policy).__name__} regresses no privileged state: scenes would teach it nothing")
        self.privileged_key: str = policy.bc_privileged_key
        keep = [key for key in (policy.obs_key, IMAGE_KEY, INSTRUCTION_KEY) if key in policy.obs_keys]
        keep.append(self.privileged_key)
        env = make_env(dataclasses.replace(sim, num_envs=min(count, SCENE_ENVS)), seed=seed + SCENE_SEED_OFFSET)
        motion = ExpertMotion(sim, env.num_envs, motion_steps, seed) if motion_steps else None
        parts: dict[str, list[torch.Tensor]] = {key: [] for key in keep}
        try:
            for batch in range(-(-count // env.num_envs)):
                batch_seed = seed + SCENE_SEED_OFFSET + batch
                obs = env.reset(seed=batch_seed) if motion is None else motion(env, batch_seed)  # no frames thrown away
                for key in keep:
                    parts[key].append(obs[key].cpu())
        finally:
            env.close()
            if motion is not None:
                motion.env.close()
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


class ExpertMotion:
    """Scenes along the task's scripted expert (`data.experts.EXPERTS`, action noise and hesitation as the
    demonstrations'), which acts in a camera-less copy of the env (the simulator alone is ~40× cheaper than with
    two cameras rendered) for a random 0..`steps` steps per batch; in a random half of the envs the expert is told
    another object than the instructed one (tasks with several: `vars["object"]`). The env with cameras then takes
    the copy's state and one more expert step, so its images and observations are of one state."""

    def __init__(self, sim: SimConfig, num_envs: int, steps: int, seed: int):
        from policyforge.data.experts import EXPERTS  # data imports the policies: not at module level

        if sim.backend != "mujoco":
            raise ConfigError("algo.scene_motion_steps", f"moves scenes on sim.backend mujoco, not {sim.backend!r}")
        self.env = make_env(dataclasses.replace(sim, num_envs=num_envs, image=ImageConfig()), seed=seed)
        expert_class = EXPERTS.get(type(self.env.task))
        if expert_class is None:
            raise ConfigError(
                "algo.scene_motion_steps", f"task {sim.task!r} has no scripted expert (data/experts.py): set it to 0"
            )
        self.expert = expert_class(self.env.task, num_envs, MOTION_NOISE, seed, MOTION_HESITATION)
        self.steps, self.rng = steps, np.random.default_rng(seed)

    def __call__(self, env: VecEnv, reset_seed: int) -> Obs:
        """The observation of `env` (with cameras; it takes the copy's state, so it need not be reset) after this
        batch's motion: [N, ...] per key."""
        self.env.reset(seed=reset_seed)
        self.expert.reset(np.arange(self.env.num_envs))
        n = self.env.num_envs
        decoy = (self.rng.random(n) < 0.5) * self.rng.integers(1, 3, n)  # 1 or 2: another of the 3 cubes
        for _ in range(int(self.rng.integers(self.steps + 1))):
            self._step(self.env, decoy)
        env.set_state(self.env.get_state())
        return self._step(env, decoy)

    def _step(self, env: VecEnv, decoy: np.ndarray) -> Obs:
        """One expert step of `env`, the expert told object (instructed + `decoy`) mod 3 [N]."""
        state = env.state
        if "object" in state.vars:
            state = TaskState(state.phys, {**state.vars, "object": (state.vars["object"] + decoy) % 3})
        obs, *_, info = env.step(self.expert.act(state))
        self.expert.reset(np.flatnonzero(info["episode"]["done"].numpy()))
        return obs
