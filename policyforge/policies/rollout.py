"""Running any policy in a VecEnv one step at a time: observation history in, one action per env out.

Chunked policies see the last T_o observations and plan H actions at once; `ChunkedActor` keeps each env's
history, executes `act_steps` actions of every chunk and plans again, per env (an env that starts a new
episode mid-chunk gets a fresh history and a fresh chunk; the others keep theirs). Single-step policies pass
straight through.
"""

from __future__ import annotations

import torch

from policyforge.policies.base import Obs, Policy
from policyforge.policies.chunked import IMAGE_KEY


class ChunkedActor:
    """obs [N, ...] → action [N, A] for a policy returning chunks [N, H, A]."""

    def __init__(self, policy: Policy, num_envs: int, noise_scale: float = 0.0):
        self.policy, self.num_envs, self.noise_scale = policy, num_envs, noise_scale
        self.history_len = getattr(policy, "n_obs_steps", 0)
        """T_o; 0 for policies without a history axis (they get obs [N, D])."""
        self.act_steps = getattr(policy, "act_steps", policy.chunk_len)
        self.keys = [policy.obs_key] + ([IMAGE_KEY] if getattr(policy, "image_shape", None) else [])
        self.history: dict[str, torch.Tensor] = {}
        self.fresh = torch.ones(num_envs, dtype=torch.bool)
        """Envs whose history restarts from the next observation."""
        self.chunk: torch.Tensor | None = None
        self.cursor = torch.full((num_envs,), self.act_steps, dtype=torch.long)
        """Index of each env's next action in its chunk; act_steps means "plan again"."""

    def episodes_ended(self, done: torch.Tensor) -> None:
        """Envs `done` [N] bool start a new episode with the next observation."""
        self.fresh |= done
        self.cursor[done] = self.act_steps

    @torch.no_grad()
    def __call__(self, obs: Obs) -> torch.Tensor:
        policy_obs = self._with_history(obs)
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

    def _with_history(self, obs: Obs) -> Obs:
        if not self.history_len:
            return obs
        for key in self.keys:
            current = obs[key][:, None]
            if key not in self.history:
                self.history[key] = current.repeat_interleave(self.history_len, dim=1)
            else:
                self.history[key] = torch.cat([self.history[key][:, 1:], current], dim=1)
            restart = self.fresh.nonzero()[:, 0]
            self.history[key][restart] = current[restart]  # broadcast over the history axis
        self.fresh[:] = False
        return dict(self.history)
