"""Running any policy in a VecEnv one step at a time: observations in, one action per env out.

Chunked policies see the last T_o observations and plan H actions at once; `ChunkedActor` keeps each env's
input state (`Policy.input_state`: its observation history, or a per-step residual's base actions), executes
`act_steps` actions of every chunk and plans again, per env (an env that starts a new episode mid-chunk gets a
fresh history and a fresh chunk; the others keep theirs). Single-step policies pass straight through.
"""

from __future__ import annotations

import torch

from policyforge.policies.base import Obs, Policy


class ChunkedActor:
    """obs [N, ...] → action [N, A] for a policy returning chunks [N, H, A]."""

    def __init__(self, policy: Policy, num_envs: int, noise_scale: float = 0.0):
        self.policy, self.num_envs, self.noise_scale = policy, num_envs, noise_scale
        self.history = policy.input_state(num_envs)
        self.act_steps = policy.act_steps
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
