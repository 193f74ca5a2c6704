"""Residual policy (ResiP, Ankile et al. 2024): a Gaussian correction on top of a frozen base policy.

    action = clip(base action + scale · r, −1, 1),   r ~ N(μ_θ(state, base action), σ_θ²)
                                                     (or r = tanh(u), u ~ N(...): `squash`, a bounded correction)

Two ways to apply it:
- per chunk (default): the residual plans with the base, [B, H, A] corrections of the base's whole chunk
  `base.act(obs)`, fixed for the executed steps of the chunk;
- per step (`per_step: true`, as ResiP runs it): the base's chunks run as they would alone and the residual
  corrects every executed action from the state at that step, closed-loop inside the chunk. Its decisions are
  single steps [B, 1, A]; it reads the base's action of the step as obs["base_action"] [B, A], which its
  input state `BaseActionHistory` (in PPO's rollouts, evaluation and deployment alike) adds to the observations.

The chain is the residual r; log_prob is the residual's only (the base is deterministic and frozen), so PPO
fine-tunes the residual without touching the base. The residual sees the latest state (normalised by its own
statistics) and the base action(s); its output layer starts near zero, so the combined policy starts as the base.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from policyforge.config import check_in, check_sizes
from policyforge.policies.base import EnvSpec, Obs, Policy, PolicyConfig, Sample, load_matching, register_policy
from policyforge.policies.chunked import (
    MIN_STD,
    gaussian_entropy,
    gaussian_log_density,
    gaussian_log_prob,
    tanh_log_jacobian,
)
from policyforge.policies.diffusion import DiffusionConfig
from policyforge.policies.history import InputState
from policyforge.policies.networks import MAX_WIDTH, Activation, mlp
from policyforge.policies.normalizer import RunningNormalizer
from policyforge.policies.rollout import ChunkedActor

BASE_ACTION_KEY = "base_action"
"""Observation key of the base's action at this step [B, A] (per-step residuals)."""


@register_policy("residual")
@dataclasses.dataclass
class ResidualConfig(PolicyConfig):
    """The residual network on top of a frozen base policy."""

    pretrained_part = "base"

    base: PolicyConfig = dataclasses.field(default_factory=DiffusionConfig)
    """The frozen base policy, a `policy` section of its own (`base: {class: flow, ...}`); in a run config,
    `init_policy` gives its weights."""
    hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    """Hidden sizes of the residual's mean network."""
    activation: Activation = "elu"
    """Hidden activation."""
    scale: float = 0.1
    """Residual actions are multiplied by this before they are added to the base action."""
    init_std: float = 0.5
    """Initial std of the residual (before `scale`)."""
    out_gain: float = 0.001
    """Init gain of the output layer: near zero, so the policy starts as its base."""
    squash: bool = False
    """Bound the residual: r = tanh(u) of the Gaussian u, so no correction exceeds `scale` (Policy Decorator's
    bounded residual; what keeps an off-policy actor from walking out of the base's reach on an unfitted critic)."""
    per_step: bool = False
    """Correct every executed action from the state at its step (ResiP; closed-loop inside the base's chunks);
    false: one correction of the whole chunk, decided when the base plans it."""

    def __post_init__(self) -> None:
        check_sizes(self.hidden, "hidden", MAX_WIDTH)
        why = "actions live in [-1, 1]: 2 spans the range, below 0.001 a correction moves nothing"
        check_in(self.scale, "scale", "[0.001, 2]", why)
        check_in(self.init_std, "init_std", f"[{MIN_STD}, 10]", "actions live in [-1, 1]")
        check_in(self.out_gain, "out_gain", "[0, 1]", "near 0, so the policy starts as its base")

    def build(self, env: EnvSpec) -> ResidualPolicy:
        return ResidualPolicy(self.base.build(env), env.state_dim, self)


class ResidualPolicy(Policy):
    """Frozen `base` (any policy) + trainable Gaussian residual over its chunk, or over each executed action."""

    def __init__(self, base: Policy, state_dim: int, config: ResidualConfig):
        super().__init__()
        self.base, self.config = base.eval().requires_grad_(False), config
        self.obs_key, self.action_dim, self.state_dim = base.obs_key, base.action_dim, state_dim
        self.per_step = config.per_step
        if self.per_step:  # single-step decisions on the latest state; the base's history is kept outside
            self.chunk_len, self.act_steps, self.n_obs_steps = 1, 1, 0
        else:
            self.chunk_len, self.act_steps, self.n_obs_steps = base.chunk_len, base.act_steps, base.n_obs_steps
        self.export_tolerance = base.export_tolerance
        chunk = self.chunk_len * base.action_dim
        self.normalizer = RunningNormalizer(state_dim)
        self.net = mlp(state_dim + chunk, config.hidden, chunk, config.activation, out_gain=config.out_gain)
        self.log_std = nn.Parameter(torch.full((base.action_dim,), math.log(config.init_std)))

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return (self.obs_key, BASE_ACTION_KEY) if self.per_step else self.base.obs_keys

    def input_state(self, num_envs: int) -> InputState:
        return BaseActionHistory(self, num_envs) if self.per_step else self.base.input_state(num_envs)

    def load_pretrained(self, weights: Mapping[str, torch.Tensor]) -> None:
        """A residual policy's weights (keys `base.*` among them), or its base's alone (the run of the base)."""
        if any(key.startswith("base.") for key in weights):
            load_matching(self, weights)
        else:
            self.base.load_pretrained(weights)

    def train(self, mode: bool = True) -> ResidualPolicy:
        super().train(mode)
        self.base.eval()  # the base never trains (no dropout / augmentation noise in its actions)
        return self

    def distribution(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Base action, residual mean and std, [B, H, A] each (H = 1 per step)."""
        if self.per_step:
            base_action = obs[BASE_ACTION_KEY][:, None]
        else:
            with torch.no_grad():
                base_action = self.base.act(obs)
        state = obs[self.obs_key]
        latest = state[:, -1] if state.dim() == 3 else state
        mean = self.net(torch.cat([self.normalizer(latest), base_action.flatten(1)], dim=-1)).view_as(base_action)
        return base_action, mean, self.log_std.exp().expand_as(mean)

    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        """Actions [B, H, A]; the chain is the (pre-squash) residual, its log-probability the action's."""
        base_action, mean, std = self.distribution(obs)
        residual = mean + noise_scale * std * torch.randn_like(mean) if noise_scale else mean
        correction = torch.tanh(residual) if self.config.squash else residual
        action = (base_action + self.config.scale * correction).clamp(-1.0, 1.0)
        return Sample(action, residual, self._log_density(residual, mean, std).flatten(1).sum(-1))

    def step_log_probs(self, obs: Obs, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One stochastic step: log-densities [B, 1, H, A] of residuals [B, H, A]."""
        _, mean, std = self.distribution(obs)
        return self._log_density(chain, mean, std)[:, None], gaussian_entropy(std)

    def _log_density(self, residual: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Per-element log-density [B, H, A] of the correction (tanh's Jacobian included when squashing)."""
        log_density = gaussian_log_density(residual, mean, std)
        return log_density - tanh_log_jacobian(residual) if self.config.squash else log_density

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the residuals that turn the base's chunks into demonstrated ones [B, H, A]."""
        base_action, mean, std = self.distribution(obs)
        residual = (actions - base_action) / self.config.scale
        if self.config.squash:
            residual = torch.atanh(residual.clamp(-0.999, 0.999))
        return -gaussian_log_prob(residual, mean, std).mean()

    def update_normalizer(self, obs: Obs) -> None:
        state = obs[self.obs_key]
        self.normalizer.update(state[:, -1] if state.dim() == 3 else state)

    def example_obs(self, batch: int) -> Obs:
        if self.per_step:
            state, base_action = torch.zeros(batch, self.state_dim), torch.zeros(batch, self.action_dim)
            return {self.obs_key: state, BASE_ACTION_KEY: base_action}
        return self.base.example_obs(batch)

    def export_spec(self) -> dict[str, Any]:
        if self.per_step:  # export.export writes the base's graph beside this one
            return {**super().export_spec(), "residual_scale": self.config.scale, "per_step": True}
        return {**self.base.export_spec(), "residual_scale": self.config.scale}


class BaseActionHistory:
    """The inputs of a per-step residual: the latest state and its base's action for this step [N, A], the base's
    chunks executed by a `ChunkedActor` exactly as they would be without the residual (an `InputState`)."""

    def __init__(self, policy: ResidualPolicy, num_envs: int):
        self.base = ChunkedActor(policy.base, num_envs)
        self.state_key = policy.obs_key

    def restart(self, done: torch.Tensor) -> None:
        self.base.episodes_ended(done)

    def push(self, obs: Obs) -> Obs:
        return {self.state_key: obs[self.state_key], BASE_ACTION_KEY: self.base(obs)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.base.load_state_dict(state)
