"""`gym:<id>` backend: any installed gymnasium environment behind the VecEnv contract.

Environments run in a gymnasium `SyncVectorEnv` with same-step auto-reset, so the true final observation
of each finished episode is available. Actions in [-1, 1] are scaled to the env's bounded Box action space.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.sims.episodes import EpisodeCounters, end_step
from policyforge.sims.vec_env import Obs, StepResult, VecEnv, env_ids_of, make_step_info, to_torch, validate_action


class GymVecEnv(VecEnv):
    """N copies of a gymnasium env with Box observations and a bounded Box action space."""

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        **env_kwargs: Any,
    ):
        try:
            gym.spec(env_id)
        except gym.error.Error as err:
            raise ConfigError("sim.task", f"gym:{env_id} is not a registered gymnasium env ({err})") from None
        self.env_id = env_id
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id, render_mode="rgb_array", **env_kwargs) for _ in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        if not isinstance(obs_space, gym.spaces.Box) or not isinstance(act_space, gym.spaces.Box):
            raise ConfigError(
                "sim.task", f"gym:{env_id} needs Box observations and actions, got {obs_space} / {act_space}"
            )
        if not (np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all()):
            raise ConfigError(
                "sim.task", f"gym:{env_id} has an unbounded action space; actions in [-1, 1] cannot be scaled"
            )
        self.num_envs = num_envs
        self.action_dim = int(np.prod(act_space.shape))
        self.device = torch.device(device)
        self.obs_shapes = {"policy": obs_space.shape, "critic": obs_space.shape}
        self.control_dt = float(getattr(self.envs.envs[0].unwrapped, "dt", 1.0))
        self.episode_steps = int(self.envs.envs[0].spec.max_episode_steps or 10**9)
        self._low, self._high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
        self._act_shape = act_space.shape
        self.episodes = EpisodeCounters.zeros(num_envs, np, np.float64, np.int64)
        self._seed = seed
        self._last_obs = np.zeros((num_envs, *obs_space.shape), obs_space.dtype)
        """Each env's current observation [N, ...], so that `reset_envs` can return all N."""
        self._last_done = np.zeros(num_envs, dtype=bool)
        """Which envs the last step finished (and gymnasium reset)."""

    @property
    def cameras(self) -> list[str]:
        return ["default"]

    def reset(self, seed: int | None = None) -> Obs:
        obs, _ = self.envs.reset(seed=self._seed if seed is None else seed)
        self._seed = None  # later resets continue the seeded streams
        self._last_done = np.zeros(self.num_envs, dtype=bool)
        self.episodes = EpisodeCounters.zeros(self.num_envs, np, np.float64, np.int64)
        self._last_obs = np.array(obs)
        return self._obs(obs)

    def reset_envs(self, env_ids: Any) -> Obs:
        ids = env_ids_of(env_ids, self.num_envs)
        for i in ids:  # each sub-env continues its own seeded stream
            self._last_obs[i], _ = self.envs.envs[int(i)].reset()
        self.episodes = self.episodes.restart(np.isin(np.arange(self.num_envs), ids), np)
        return self._obs(self._last_obs.copy())

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        action = validate_action(action, self.num_envs, self.action_dim)
        scaled = self._low + (action.reshape(-1, *self._act_shape) + 1.0) * 0.5 * (self._high - self._low)
        obs, reward, terminated, truncated, info = self.envs.step(scaled)
        terminated = np.asarray(terminated, bool)
        done = terminated | np.asarray(truncated, bool)
        self._last_done = done
        final = obs.copy()
        if done.any():
            for i in np.flatnonzero(info.get("_final_obs", done)):
                final[i] = info["final_obs"][i]
        success = self._success(info, done)
        reward = np.asarray(reward, dtype=np.float64)
        outcome = end_step(self.episodes, reward, terminated, success, np, truncated=truncated)  # gym's clock
        self.episodes = outcome.counters
        self._last_obs = np.array(obs)
        out_info = make_step_info(self._obs(final), outcome.episode, {}, success, self._tensor)
        reward_out = self._tensor(reward.astype(np.float32))
        return self._obs(obs), reward_out, self._tensor(terminated), self._tensor(outcome.truncated), out_info

    def render(
        self, camera: str | None = None, env_ids: Any = None, width: int = 320, height: int = 240, final: bool = False
    ) -> np.ndarray:
        """Frames at the env's own render size (gymnasium fixes it when the env is made). The vector env resets
        finished envs inside its step, so their pre-reset state is gone: `final` raises NotImplementedError for
        those."""
        ids = range(self.num_envs) if env_ids is None else np.atleast_1d(np.asarray(env_ids))
        if final and self._last_done[np.asarray(ids, dtype=int)].any():
            raise NotImplementedError(f"gym:{self.env_id} resets inside its step; its pre-reset frames are gone")
        return np.stack([self.envs.envs[int(i)].render() for i in ids])

    def close(self) -> None:
        self.envs.close()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_torch(array, self.device)

    def _obs(self, obs: np.ndarray) -> Obs:
        tensor = to_torch(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1), self.device)
        return {"policy": tensor, "critic": tensor}

    def _success(self, info: dict[str, Any], done: np.ndarray) -> np.ndarray | None:
        """gymnasium's `is_success` flags where the env reports them (in `final_info` for finished envs)."""
        if "is_success" not in info and "is_success" not in info.get("final_info", {}):
            return None
        success = np.asarray(info.get("is_success", np.zeros(self.num_envs)), dtype=bool)
        final = info.get("final_info", {})
        if "is_success" in final:
            success = np.where(done, np.asarray(final["is_success"], dtype=bool), success)
        return success
