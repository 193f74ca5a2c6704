"""Adapters out: any policyforge VecEnv as a gymnasium `VectorEnv`, a gymnasium `Env` (one env), or a
Stable-Baselines3 `VecEnv`, so users can bring their own learners. Observations are one key of the dict
(`policy` by default), as float32 numpy arrays [N, D] (SB3: optionally a Dict with the privileged `critic`
key too, for `AsymmetricActorCriticPolicy`, the SB3 policy defined here); actions are Box(-1, 1)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from stable_baselines3.common import vec_env as sb3_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, MlpExtractor

from policyforge.sims.vec_env import VecEnv, env_ids_of


def _spaces(env: VecEnv, obs_key: str, field: str = "obs_key") -> tuple[gym.spaces.Box, gym.spaces.Box]:
    if obs_key not in env.obs_shapes:
        raise ValueError(f"{field} {obs_key!r} is not an observation of this env; it has {list(env.obs_shapes)}")
    obs = gym.spaces.Box(-np.inf, np.inf, env.obs_shapes[obs_key], np.float32)
    return obs, gym.spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)


def _numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy().copy()


class GymnasiumVectorEnv(gym.vector.VectorEnv):
    """A VecEnv as a gymnasium VectorEnv with same-step auto-reset (`final_obs` / `_final_obs` in infos).

    `render()` returns the frames of `render_indices` only (the first `render_envs` envs by default;
    rendering is ~50 ms an env on the CPU); `metadata["render_fps"]` is 1 / control_dt."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, env: VecEnv, obs_key: str = "policy", render_envs: int = 4):
        self.env, self.obs_key = env, obs_key
        self.metadata = {**type(self).metadata, "render_fps": round(1 / env.control_dt)}
        self.render_indices: list[int] = list(range(min(render_envs, env.num_envs)))
        """Envs whose frames `render()` returns."""
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
        return tuple(self.env.render(env_ids=self.render_indices))

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


MONITOR_ATTRIBUTES = ("episode_returns", "episode_lengths", "episode_times", "total_steps")
"""Per-env attributes of SB3's `Monitor`, which `SB3VecEnv.get_attr` returns env by env."""
MONITOR_METHODS = {
    "get_episode_rewards": "episode_returns",
    "get_episode_lengths": "episode_lengths",
    "get_episode_times": "episode_times",
    "get_total_steps": "total_steps",
}
"""Per-env methods of SB3's `Monitor` (`env_method` name -> the attribute it returns)."""
PER_ENV_METHODS = ("reset", "render", *MONITOR_METHODS)
"""`SB3VecEnv.env_method` names that act on the selected envs only."""


class SB3VecEnv(sb3_vec_env.VecEnv):
    """A VecEnv as a Stable-Baselines3 VecEnv, behaving as SB3's DummyVecEnv over `Monitor`-wrapped envs.

    Infos of finished envs carry `terminal_observation`, `TimeLimit.truncated`, `is_success` (tasks with a
    success flag) and Monitor's `episode = {"r", "l", "t"}`, so `env_is_wrapped(Monitor)` is True and
    `evaluate_policy` reads the true episode statistics.

    Per env (`indices`: None for all, an int, or a sequence of ints), one list entry per selected env:
      `env_method("reset")`    new episodes in those envs only (`VecEnv.reset_envs`; the others continue),
                               `[(obs_i, {}), ...]` as gymnasium's `Env.reset` returns;
      `env_method("render")`   `[frame_i [H, W, 3] uint8, ...]`;
      Monitor's `get_episode_rewards`, `get_episode_lengths`, `get_episode_times`, `get_total_steps` methods
      and `get_attr` of its `episode_returns`, `episode_lengths`, `episode_times`, `total_steps`.
    Every other name is an attribute or method of the one batched policyforge VecEnv, shared by all envs:
    `get_attr` returns its value once per selected env (what DummyVecEnv returns for identical envs), and
    `set_attr` / `env_method` act on the whole batch, so they refuse a strict subset of the envs.

    `render()` tiles the frames of `render_indices` (the first `render_envs` envs by default: rendering is
    ~50 ms an env on the CPU), or of `render(indices=...)`; `metadata["render_fps"]` is 1 / control_dt.

    With `critic_key` (e.g. "critic", the task's privileged observation) observations are a Dict of
    `obs_key` and `critic_key` arrays; `AsymmetricActorCriticPolicy` then feeds the first to the actor and
    the second to the critic only.
    """

    def __init__(self, env: VecEnv, obs_key: str = "policy", critic_key: str | None = None, render_envs: int = 4):
        self.env, self.obs_key, self.critic_key = env, obs_key, critic_key
        observation_space, action_space = _spaces(env, obs_key)
        if critic_key is not None:
            critic_space = _spaces(env, critic_key, "critic_key")[0]
            observation_space = gym.spaces.Dict({obs_key: observation_space, critic_key: critic_space})
        super().__init__(env.num_envs, observation_space, action_space)
        self.metadata = {**self.metadata, "render_fps": round(1 / env.control_dt)}
        self.render_indices: list[int] = list(range(min(render_envs, env.num_envs)))
        """Envs whose frames `render()` tiles."""
        self._actions: np.ndarray | None = None
        self._start = time.time()
        n = env.num_envs
        self.episode_returns: list[list[float]] = [[] for _ in range(n)]
        self.episode_lengths: list[list[int]] = [[] for _ in range(n)]
        self.episode_times: list[list[float]] = [[] for _ in range(n)]
        self.total_steps = np.zeros(n, dtype=np.int64)

    def reset(self) -> Any:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        self._reset_seeds()
        return self._obs(self.env.reset(seed))

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs, -1)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        terminated, truncated = _numpy(terminated), _numpy(truncated)
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        episode = {k: _numpy(v) for k, v in info["episode"].items()}
        success = _numpy(info["success"]) if "success" in info else None
        final = self._obs(info["final_obs"])
        self.total_steps += 1
        for i in np.flatnonzero(episode["done"]):
            infos[i]["terminal_observation"] = _row(final, i)
            infos[i]["TimeLimit.truncated"] = bool(truncated[i])
            ret, length = round(float(episode["return"][i]), 6), int(episode["length"][i])
            elapsed = time.time() - self._start
            infos[i]["episode"] = {"r": ret, "l": length, "t": round(elapsed, 6)}  # as Monitor writes it
            self.episode_returns[i].append(ret)
            self.episode_lengths[i].append(length)
            self.episode_times[i].append(elapsed)
            if success is not None:
                infos[i]["is_success"] = bool(success[i])
        return self._obs(obs), _numpy(reward), terminated | truncated, infos

    def close(self) -> None:
        self.env.close()

    def render(self, mode: str | None = None, indices: Any = None) -> np.ndarray | None:
        """Frames of `indices` (default `render_indices`) tiled into one image, as SB3's `VecEnv.render`."""
        if indices is None:
            return super().render(mode)
        chosen, self.render_indices = self.render_indices, list(self._get_indices(indices))
        try:
            return super().render(mode)
        finally:
            self.render_indices = chosen

    def get_images(self) -> list[np.ndarray]:
        return list(self.env.render(env_ids=self.render_indices))

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        ids = self._ids(indices)
        if attr_name in MONITOR_ATTRIBUTES:
            values = getattr(self, attr_name)
            return [values[i] if isinstance(values, list) else int(values[i]) for i in ids]
        return [getattr(self.env, attr_name)] * len(ids)

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        self._whole_batch(f"set_attr({attr_name!r})", indices)
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        ids = self._ids(indices)
        if method_name == "reset":
            return self._reset_envs(ids, *args, **kwargs)
        if method_name == "render":
            return list(self.env.render(*args, env_ids=ids, **kwargs))
        if method_name in MONITOR_METHODS:
            return self.get_attr(MONITOR_METHODS[method_name], ids)
        self._whole_batch(f"env_method({method_name!r})", indices)
        return [getattr(self.env, method_name)(*args, **kwargs)] * len(ids)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """True for SB3's `Monitor` (and its base classes): the infos carry its episode statistics."""
        return [issubclass(Monitor, wrapper_class)] * len(self._ids(indices))

    # -- internals ---------------------------------------------------------------------------------------

    def _ids(self, indices: Any) -> list[int]:
        ids = [int(i) for i in self._get_indices(indices)]
        env_ids_of(ids, self.num_envs)  # raises naming ids out of range
        return ids

    def _whole_batch(self, what: str, indices: Any) -> None:
        if set(self._ids(indices)) != set(range(self.num_envs)):
            raise ValueError(
                f"{what} with indices={indices!r}: the {self.num_envs} envs are one batched "
                f"{type(self.env).__name__} and share it, so it applies to all envs (indices=None); "
                f"per env are the methods {', '.join(PER_ENV_METHODS)} and the attributes "
                f"{', '.join(MONITOR_ATTRIBUTES)}"
            )

    def _reset_envs(self, ids: list[int], seed: int | None = None, options: dict | None = None) -> list[tuple]:
        if seed is not None or options:
            raise ValueError(
                "env_method('reset') of some envs takes no seed or options: they continue the batch's random "
                "stream; to seed, call venv.seed(seed) then venv.reset(), which resets all envs"
            )
        obs = self._obs(self.env.reset_envs(ids))
        return [(_row(obs, i), {}) for i in ids]

    def _obs(self, obs: dict[str, Any]) -> np.ndarray | dict[str, np.ndarray]:
        """The adapter's observation [N, D] (or Dict of [N, D] and [N, Dc]) from a VecEnv's."""
        if self.critic_key is None:
            return _numpy(obs[self.obs_key])
        return {self.obs_key: _numpy(obs[self.obs_key]), self.critic_key: _numpy(obs[self.critic_key])}


def _row(obs: np.ndarray | dict[str, np.ndarray], i: int) -> np.ndarray | dict[str, np.ndarray]:
    return {key: value[i] for key, value in obs.items()} if isinstance(obs, dict) else obs[i]


class _SplitMlpExtractor(MlpExtractor):
    """SB3's MlpExtractor with a value network on critic features of their own size."""

    def __init__(self, actor_dim: int, critic_dim: int, **kwargs: Any):
        super().__init__(actor_dim, **kwargs)
        self.value_net = MlpExtractor(critic_dim, **kwargs).value_net


class _KeyExtractor(BaseFeaturesExtractor):
    """One key of a Dict observation, flattened."""

    def __init__(self, observation_space: gym.spaces.Dict, key: str):
        super().__init__(observation_space, get_flattened_obs_dim(observation_space[key]))
        self.key = key

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        return observations[self.key].flatten(1)


class AsymmetricActorCriticPolicy(ActorCriticPolicy):
    """SB3's MLP actor-critic with an asymmetric critic: the actor reads `obs[actor_key]` only (what the
    real robot senses), the value network `obs[critic_key]` only (privileged simulation state), for the Dict
    observations of `SB3VecEnv(env, critic_key="critic")`:

        venv = SB3VecEnv(make_env(SimConfig(task="quadruped-walk", num_envs=64)), critic_key="critic")
        PPO(AsymmetricActorCriticPolicy, venv).learn(1_000_000)

    `net_arch` applies to both networks as in `MlpPolicy`; deployment needs the actor alone."""

    def __init__(self, *args: Any, actor_key: str = "policy", critic_key: str = "critic", **kwargs: Any):
        self.actor_key, self.critic_key = actor_key, critic_key
        super().__init__(*args, **{**kwargs, "share_features_extractor": False})

    def _build(self, lr_schedule: Any) -> None:
        for key in (self.actor_key, self.critic_key):
            if not isinstance(self.observation_space, gym.spaces.Dict) or key not in self.observation_space.spaces:
                raise ValueError(
                    f"AsymmetricActorCriticPolicy reads observation key {key!r}, the observation space is "
                    f"{self.observation_space}; build the env as SB3VecEnv(env, critic_key={self.critic_key!r})"
                )
        self.features_extractor = self.pi_features_extractor = _KeyExtractor(self.observation_space, self.actor_key)
        self.vf_features_extractor = _KeyExtractor(self.observation_space, self.critic_key)
        self.features_dim = self.pi_features_extractor.features_dim
        super()._build(lr_schedule)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = _SplitMlpExtractor(
            self.features_dim,
            self.vf_features_extractor.features_dim,
            net_arch=self.net_arch,
            activation_fn=self.activation_fn,
            device=self.device,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "actor_key": self.actor_key, "critic_key": self.critic_key}
