"""Adapters out: any policyforge VecEnv as a gymnasium `VectorEnv`, a gymnasium `Env` (one env), or a
Stable-Baselines3 `VecEnv`, so users can bring their own learners. Observations are one key of the dict
(`policy` by default), as float32 numpy arrays; actions are Box(-1, 1)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space
from stable_baselines3.common import vec_env as sb3_vec_env

from policyforge.sims.vec_env import VecEnv


def _spaces(env: VecEnv, obs_key: str) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    if obs_key not in env.obs_shapes:
        raise ValueError(f"obs_key {obs_key!r} is not an observation of this env; it has {list(env.obs_shapes)}")
    obs = gym.spaces.Box(-np.inf, np.inf, env.obs_shapes[obs_key], np.float32)
    return obs, gym.spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)


def _numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy().copy()


class GymnasiumVectorEnv(gym.vector.VectorEnv):
    """A VecEnv as a gymnasium VectorEnv with same-step auto-reset (`final_obs` / `_final_obs` in infos)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, env: VecEnv, obs_key: str = "policy"):
        self.env, self.obs_key = env, obs_key
        self.num_envs = env.num_envs
        self.single_observation_space, self.single_action_space = _spaces(env, obs_key)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = "rgb_array"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return _numpy(self.env.reset(seed)[self.obs_key]), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = _numpy(info["episode"]["done"])
        infos: dict[str, Any] = {}
        if done.any():
            final = _numpy(info["final_obs"][self.obs_key])
            final_obs = np.empty(self.num_envs, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i]
            infos = {"final_obs": final_obs, "_final_obs": done}
            episode = info["episode"]
            infos["episode"] = {"r": _numpy(episode["return"]), "l": _numpy(episode["length"])}
            infos["_episode"] = done
        if "success" in info:
            infos["is_success"], infos["_is_success"] = _numpy(info["success"]), np.ones(self.num_envs, bool)
        return _numpy(obs[self.obs_key]), _numpy(reward), _numpy(terminated), _numpy(truncated), infos

    def render(self) -> tuple[np.ndarray, ...]:
        return tuple(self.env.render())

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


class GymnasiumEnv(gym.Env):
    """One environment of a VecEnv (built with num_envs = 1) as a plain gymnasium Env.

    The VecEnv resets finished episodes itself; this adapter returns their final observation, and the
    next `reset()` starts a new episode as gymnasium expects."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, env: VecEnv, obs_key: str = "policy", render_mode: str | None = None):
        if env.num_envs != 1:
            raise ValueError(f"GymnasiumEnv wraps a VecEnv of exactly 1 env, got num_envs={env.num_envs}")
        self.env, self.obs_key, self.render_mode = env, obs_key, render_mode
        self.observation_space, self.action_space = _spaces(env, obs_key)
        self.metadata = {**self.metadata, "render_fps": round(1 / env.control_dt)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return _numpy(self.env.reset(seed)[self.obs_key])[0], {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action, dtype=np.float64)[None])
        done = bool(terminated[0] or truncated[0])
        source = info["final_obs"] if done else obs
        extra = {"is_success": bool(info["success"][0])} if "success" in info else {}
        return (
            _numpy(source[self.obs_key])[0],
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            extra,
        )

    def render(self) -> np.ndarray | None:
        return self.env.render(env_ids=[0])[0] if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.env.close()


class SB3VecEnv(sb3_vec_env.VecEnv):
    """A VecEnv as a Stable-Baselines3 VecEnv: `terminal_observation`, `TimeLimit.truncated`, `episode` and
    `is_success` in the infos of finished envs, as SB3's Monitor and DummyVecEnv would put them."""

    def __init__(self, env: VecEnv, obs_key: str = "policy"):
        self.env, self.obs_key = env, obs_key
        observation_space, action_space = _spaces(env, obs_key)
        super().__init__(env.num_envs, observation_space, action_space)
        self._actions: np.ndarray | None = None
        self._start = time.time()

    def reset(self) -> np.ndarray:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        self._reset_seeds()
        return _numpy(self.env.reset(seed)[self.obs_key])

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs, -1)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        terminated, truncated = _numpy(terminated), _numpy(truncated)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        episode = {k: _numpy(v) for k, v in info["episode"].items()}
        success = _numpy(info["success"]) if "success" in info else None
        final = _numpy(info["final_obs"][self.obs_key])
        for i in np.flatnonzero(episode["done"]):
            infos[i]["terminal_observation"] = final[i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i])
            infos[i]["episode"] = {
                "r": float(episode["return"][i]),
                "l": int(episode["length"][i]),
                "t": round(time.time() - self._start, 6),
            }
            if success is not None:
                infos[i]["is_success"] = bool(success[i])
        return _numpy(obs[self.obs_key]), _numpy(reward), terminated | truncated, infos

    def close(self) -> None:
        self.env.close()

    def get_images(self) -> list[np.ndarray]:
        return list(self.env.render())

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self.env, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        return [getattr(self.env, method_name)(*args, **kwargs)] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))
