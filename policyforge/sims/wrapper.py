"""A VecEnv that wraps another: everything it does not change is the wrapped env's (attributes included: num_envs,
device, task, state …), so wrappers stack (a reward model's over an instruction's) and a wrapper states only what
it changes. A wrapper with per-episode state of its own overrides `started`, which every way of starting episodes
(`reset`, `reset_to`, `reset_envs`) goes through: none of them can be forgotten."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from policyforge.sims.vec_env import Obs, StepResult, VecEnv


class VecEnvWrapper(VecEnv):
    """Forwards the whole VecEnv contract to `self.env`; subclasses override what they change."""

    def __init__(self, env: VecEnv):
        self.env = env
        self.obs_shapes = dict(env.obs_shapes)

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (during unpickling or __init__): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, seed: int | None = None) -> Obs:
        return self.started(self.env.reset(seed), None)

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        return self.env.step(action)

    def reset_envs(self, env_ids: Any) -> Obs:
        ids = torch.as_tensor(np.atleast_1d(np.asarray(env_ids, dtype=np.int64)), device=self.env.device)
        return self.started(self.env.reset_envs(env_ids), ids)

    def reset_to(self, initial: Any) -> Obs:
        return self.started(self.env.reset_to(initial), None)

    def started(self, obs: Obs, env_ids: torch.Tensor | None) -> Obs:
        """Envs `env_ids` [K] (None: every env) begin new episodes; `obs` is the wrapped env's observation of all
        envs after that. Returns this wrapper's observation (by default `obs`)."""
        return obs

    def started_mask(self, env_ids: torch.Tensor | None) -> torch.Tensor:
        """`started`'s envs as a mask [N] bool."""
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.env.device)
        mask[slice(None) if env_ids is None else env_ids] = True
        return mask

    def render(self, *args: Any, **kwargs: Any) -> Any:
        return self.env.render(*args, **kwargs)

    @property
    def cameras(self) -> list[str]:
        return self.env.cameras

    def instructions(self) -> list[str] | None:
        return self.env.instructions()

    def images(self, env_ids: Any, final: bool = False) -> torch.Tensor:
        return self.env.images(env_ids, final)

    def get_state(self) -> dict[str, Any] | None:
        return self.env.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.env.set_state(state)

    def close(self) -> None:
        self.env.close()
