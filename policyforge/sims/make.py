"""Building tasks and environments from configs."""

from __future__ import annotations

import difflib
from typing import Any

from policyforge.config import ConfigError, from_dict
from policyforge.sims.config import SimConfig
from policyforge.sims.task import Task
from policyforge.sims.tasks import TASKS
from policyforge.sims.vec_env import VecEnv


def make_task(name: str, options: dict[str, Any] | None = None) -> Task:
    """A task by registry name, with its options checked against the task's config class."""
    if name not in TASKS:
        close = difflib.get_close_matches(name, list(TASKS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError("sim.task", f"unknown task {name!r}{hint}; available: {', '.join(TASKS)}, or gym:<id>")
    cls = TASKS[name]
    config = from_dict(cls.config_class, options or {}, "sim.task_options")
    return cls(cls.load_model(config), config)


def make_env(config: SimConfig, seed: int = 0) -> VecEnv:
    """The VecEnv a `SimConfig` describes, reset with `seed`; a task that draws instructions also observes them as
    token ids (`obs["instruction"]`, `instruction_obs.InstructionObs`); with `sim.reward_model` its reward is the
    model's (`rewards.wrapper.RewardWrapper`); with `sim.corruption` its policy observation and its actions are
    corrupted (`corruption.Corruption`); with `sim.steer` its actions are a frozen generative policy's starting
    noise (`algos.steering.NoiseSteeredEnv`); with `sim.action_chunk` it takes whole chunks of actions
    (`decisions.ActionChunkEnv`)."""
    from policyforge.sims.instruction_obs import with_instructions

    env = _make_env(config, seed)
    if config.corruption.enabled:
        from policyforge.sims.corruption import Corruption

        task = getattr(env, "task", None)
        env = Corruption(env, config.corruption, task.observation_terms() if task is not None else {}, seed)
    env = with_instructions(env)
    if config.reward_model.enabled:
        from policyforge.rewards.load import with_reward_model

        env = with_reward_model(env, config)
    if config.steer.enabled:
        from policyforge.algos.steering import with_steering

        env = with_steering(env, config)
    if config.action_chunk:
        from policyforge.sims.decisions import ActionChunkEnv

        env = ActionChunkEnv(env, config.action_chunk)
    return env


def _make_env(config: SimConfig, seed: int) -> VecEnv:
    if config.task.startswith("gym:"):
        from policyforge.sims.gym_env import GymVecEnv

        return GymVecEnv(config.task[4:], config.num_envs, device=config.device, seed=seed, **config.task_options)
    task = make_task(config.task, config.task_options)
    options: dict[str, Any] = {
        "device": config.device,
        "randomization": config.randomization,
        "actuator": config.actuator,
        "image": config.image,
        "seed": seed,
    }
    if config.backend == "mjx":
        from policyforge.sims.mjx_env import MjxVecEnv

        return MjxVecEnv(task, config.num_envs, **options)
    from policyforge.sims.mujoco_env import MujocoVecEnv

    return MujocoVecEnv(task, config.num_envs, num_threads=config.num_threads, **options)
