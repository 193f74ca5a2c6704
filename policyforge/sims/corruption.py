"""Observation and action corruption for sim-to-real (`sim.corruption`): per-term sensor noise and bias, stale and
dropped observations, and actions that take effect late — what a real robot's sensors and links do to the policy.

A wrapper over the VecEnv contract, so it is the same on every backend (native MuJoCo, MJX, gymnasium). Only the
`policy` observation is corrupted; the privileged `critic` one stays clean (asymmetric actor-critic). Per env
and per episode it draws a bias per feature and the two latencies; each step it adds fresh noise, and with
`obs_drop_prob` the step's reading does not arrive (the previous one is seen again). The policy's own previous
action (a task's `last_action` term) is what the policy chose, never delayed or corrupted: on a robot the
deployment code keeps it in memory (`real_robot.deploy`), while the simulator's copy is the action applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.sims.config import CorruptionConfig
from policyforge.sims.vec_env import Obs, StepResult, VecEnv
from policyforge.sims.wrapper import VecEnvWrapper

_STATE_TENSORS = ("obs_history", "action_history", "previous_action", "bias", "obs_latency", "action_latency")
"""What a snapshot of the corruption holds besides its random stream."""
SEED_OFFSET = 0x5EED_C0
"""Added to `reset(seed)` for the corruption's own random stream, so it differs from the simulator's."""


class Corruption(VecEnvWrapper):
    """`env` with its policy observation and its actions corrupted as `config` says; `terms` maps the task's
    observation term names to their columns of the policy observation (`Task.observation_terms`)."""

    def __init__(self, env: VecEnv, config: CorruptionConfig, terms: dict[str, slice], seed: int = 0):
        super().__init__(env)
        dim, n, device = env.obs_shapes["policy"][0], env.num_envs, env.device
        self.config, self.terms = config, {"all": slice(0, dim), **terms}
        self.noise_std = self._per_feature(config.noise, "noise", dim)
        self.bias_bound = self._per_feature(config.bias, "bias", dim)
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed + SEED_OFFSET)
        self.obs_history = torch.zeros(n, int(config.obs_latency_steps[1]) + 1, dim, device=device)
        """[N, L+1, D] what the policy would see, newest first."""
        self.action_history = torch.zeros(n, int(config.action_latency_steps[1]) + 1, env.action_dim, device=device)
        """[N, La+1, A] the policy's actions, newest first."""
        self.previous_action = torch.zeros(n, env.action_dim, device=device)
        self.bias = torch.zeros(n, dim, device=device)
        self.obs_latency = torch.zeros(n, dtype=torch.long, device=device)
        self.action_latency = torch.zeros(n, dtype=torch.long, device=device)
        self._rows = torch.arange(n, device=device)

    def _per_feature(self, per_term: dict[str, float], field: str, dim: int) -> torch.Tensor:
        """[D] the value of each feature: `all` first, then the named terms over it."""
        values = torch.zeros(dim, device=self.env.device)
        for term in sorted(per_term, key=lambda name: name != "all"):
            if term not in self.terms:
                known = ", ".join(self.terms)
                raise ConfigError(f"sim.corruption.{field}", f"unknown observation term {term!r}; known: {known}")
            values[self.terms[term]] = float(per_term[term])
        return values

    def reset(self, seed: int | None = None) -> Obs:
        if seed is not None:
            self.generator.manual_seed(seed + SEED_OFFSET)
        return super().reset(seed)

    def started(self, obs: Obs, env_ids: torch.Tensor | None) -> Obs:
        ids = self._rows if env_ids is None else env_ids
        self._new_episodes(ids, obs["policy"][ids])
        return {**obs, "policy": self._seen()}

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        action = torch.as_tensor(action, dtype=torch.float32, device=self.env.device)
        self.action_history = torch.cat([action[:, None], self.action_history[:, :-1]], dim=1)
        obs, reward, terminated, truncated, info = self.env.step(self.action_history[self._rows, self.action_latency])
        self.previous_action = action.clone()  # new episodes zero rows of it: never the caller's tensor
        final = info["final_obs"]
        self._sense(final["policy"])
        final_seen = self._seen()
        ended = torch.nonzero(terminated | truncated)[:, 0]
        if len(ended):
            self._new_episodes(ended, obs["policy"][ended])
        info = {**info, "final_obs": {**final, "policy": final_seen}}
        return {**obs, "policy": self._seen()}, reward, terminated, truncated, info

    def get_state(self) -> dict[str, Any] | None:
        """The wrapped env's snapshot with every env's latencies, bias, histories and the random stream (a resumed
        run continues exactly)."""
        state = self.env.get_state()
        if state is None:
            return None
        mine = {name: getattr(self, name).clone() for name in _STATE_TENSORS}
        return {"env": state, "corruption": {**mine, "generator": self.generator.get_state()}}

    def set_state(self, state: dict[str, Any]) -> None:
        if "corruption" not in state:  # a snapshot from before the corruption kept its own: the env's alone
            self.env.set_state(state)
            return
        self.env.set_state(state["env"])
        for name in _STATE_TENSORS:
            getattr(self, name).copy_(state["corruption"][name])
        self.generator.set_state(state["corruption"]["generator"])

    def _new_episodes(self, ids: torch.Tensor, first_obs: torch.Tensor) -> None:
        """Draw envs `ids`' bias and latencies, forget their past; their first reading `first_obs` [n, D] fills
        their observation history (nothing older exists in a new episode)."""
        cfg, n = self.config, len(ids)
        unit = torch.rand(n, self.bias.shape[1], generator=self.generator, device=self.bias.device)
        self.bias[ids] = (2 * unit - 1) * self.bias_bound
        self.obs_latency[ids] = self._latency(cfg.obs_latency_steps, n)
        self.action_latency[ids] = self._latency(cfg.action_latency_steps, n)
        self.action_history[ids] = 0.0
        self.previous_action[ids] = 0.0
        self.obs_history[ids] = self._corrupt(first_obs, ids)[:, None]

    def _latency(self, bounds: tuple[int, int], n: int) -> torch.Tensor:
        low, high = int(bounds[0]), int(bounds[1])
        return torch.randint(low, high + 1, (n,), generator=self.generator, device=self.bias.device)

    def _corrupt(self, clean: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Readings [n, D] of envs `ids`: `clean` plus their bias and fresh noise."""
        noise = torch.randn(clean.shape, generator=self.generator, device=clean.device) * self.noise_std
        return clean + self.bias[ids] + noise

    def _sense(self, clean: torch.Tensor) -> None:
        """This step's readings [N, D] into the history; a dropped one repeats the previous."""
        reading = self._corrupt(clean, self._rows)
        if self.config.obs_drop_prob > 0:
            dropped = torch.rand(len(reading), generator=self.generator, device=reading.device)
            reading = torch.where((dropped < self.config.obs_drop_prob)[:, None], self.obs_history[:, 0], reading)
        self.obs_history = torch.cat([reading[:, None], self.obs_history[:, :-1]], dim=1)

    def _seen(self) -> torch.Tensor:
        """[N, D] what the policy sees now: each env's reading of `obs_latency` steps ago, with its own last action."""
        seen = self.obs_history[self._rows, self.obs_latency].clone()
        if "last_action" in self.terms:
            seen[:, self.terms["last_action"]] = self.previous_action
        return seen
