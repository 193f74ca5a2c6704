"""Running any policy in a VecEnv one step at a time: observation history in, one action per env out.

Chunked policies see the last T_o observations and plan H actions at once; `ChunkedActor` keeps each env's
history, executes `act_steps` actions of every chunk and plans again, per env (an env that starts a new
episode mid-chunk gets a fresh history and a fresh chunk; the others keep theirs). Single-step policies pass
straight through. A per-step residual gets its base's action of each step from `BaseActionHistory`.
"""

from __future__ import annotations

import torch

from policyforge.policies.base import Obs, Policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.residual import BASE_ACTION_KEY, ResidualPolicy


class ObservationHistory:
    """Each env's last T_o observations, pushed every env step: obs [N, ...] → policy obs [N, T_o, ...].

    Policies without a history axis (T_o = 0) get the observation unchanged. An env marked by `restart` fills
    its whole history with the next observation pushed (the first of its new episode)."""

    def __init__(self, policy: Policy, num_envs: int):
        self.length = getattr(policy, "n_obs_steps", 0)
        self.keys = [policy.obs_key] + ([IMAGE_KEY] if getattr(policy, "image_shape", None) else [])
        self.stacked: dict[str, torch.Tensor] = {}
        self.fresh = torch.ones(num_envs, dtype=torch.bool)

    def restart(self, done: torch.Tensor) -> None:
        """Envs `done` [N] bool start a new episode with the next observation."""
        self.fresh |= done

    def push(self, obs: Obs) -> Obs:
        """Add this step's observation; return the policy's view (the history keys only, when it has one)."""
        if not self.length:
            return obs
        for key in self.keys:
            current = obs[key][:, None]
            if key not in self.stacked:
                self.stacked[key] = current.repeat_interleave(self.length, dim=1)
            else:
                self.stacked[key] = torch.cat([self.stacked[key][:, 1:], current], dim=1)
            restart = self.fresh.nonzero()[:, 0]
            self.stacked[key][restart] = current[restart]  # broadcast over the history axis
        self.fresh[:] = False
        return dict(self.stacked)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"fresh": self.fresh.clone(), **{f"stacked.{k}": v.clone() for k, v in self.stacked.items()}}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.fresh = state["fresh"].clone()
        self.stacked = {k.removeprefix("stacked."): v.clone() for k, v in state.items() if k != "fresh"}


class BaseActionHistory:
    """The inputs of a per-step residual: the latest state and its base's action for this step [N, A], the base's
    chunks executed by a `ChunkedActor` exactly as they would be without the residual. Same interface as
    `ObservationHistory`."""

    def __init__(self, policy: ResidualPolicy, num_envs: int):
        self.base = ChunkedActor(policy.base, num_envs)
        self.keys = [policy.obs_key, BASE_ACTION_KEY]

    def restart(self, done: torch.Tensor) -> None:
        self.base.episodes_ended(done)

    def push(self, obs: Obs) -> Obs:
        return {self.keys[0]: obs[self.keys[0]], BASE_ACTION_KEY: self.base(obs)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.base.load_state_dict(state)


def history_for(policy: Policy, num_envs: int) -> ObservationHistory | BaseActionHistory:
    """What turns each env step's observations into `policy`'s inputs (see the two classes)."""
    if isinstance(policy, ResidualPolicy) and policy.per_step:
        return BaseActionHistory(policy, num_envs)
    return ObservationHistory(policy, num_envs)


class ChunkedActor:
    """obs [N, ...] → action [N, A] for a policy returning chunks [N, H, A]."""

    def __init__(self, policy: Policy, num_envs: int, noise_scale: float = 0.0):
        self.policy, self.num_envs, self.noise_scale = policy, num_envs, noise_scale
        self.history = history_for(policy, num_envs)
        self.act_steps = getattr(policy, "act_steps", policy.chunk_len)
        self.chunk: torch.Tensor | None = None
        self.cursor = torch.full((num_envs,), self.act_steps, dtype=torch.long)
        """Index of each env's next action in its chunk; act_steps means "plan again"."""

    def episodes_ended(self, done: torch.Tensor) -> None:
        """Envs `done` [N] bool start a new episode with the next observation."""
        self.history.restart(done)
        self.cursor[done] = self.act_steps

    @torch.no_grad()
    def __call__(self, obs: Obs) -> torch.Tensor:
        policy_obs = self.history.push(obs)
        replan = self.cursor >= self.act_steps
        if replan.any():
            ids = replan.nonzero()[:, 0]
            subset = {k: v[ids] for k, v in policy_obs.items()}
            chunk = self.policy.sample(subset, self.noise_scale).action if self.noise_scale else self.policy.act(subset)
            if self.chunk is None:
                self.chunk = torch.zeros(self.num_envs, *chunk.shape[1:])
            self.chunk[ids] = chunk
            self.cursor[ids] = 0
        action = self.chunk[torch.arange(self.num_envs), self.cursor]
        self.cursor += 1
        return action

    def state_dict(self) -> dict[str, torch.Tensor]:
        chunk = {} if self.chunk is None else {"chunk": self.chunk.clone()}
        history = {f"history.{k}": v for k, v in self.history.state_dict().items()}
        return {"cursor": self.cursor.clone(), **chunk, **history}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.cursor = state["cursor"].clone()
        self.chunk = state["chunk"].clone() if "chunk" in state else None
        history = {k.removeprefix("history."): v for k, v in state.items() if k.startswith("history.")}
        self.history.load_state_dict(history)
