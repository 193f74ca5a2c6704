"""Gaussian policy: an MLP mean with a learned (state-independent or state-dependent) standard deviation.

The chain is the pre-squash sample u = mean + std · ε, [B, 1, A]. Without squashing (PPO) the action is u
clipped to [-1, 1]; with squashing (SAC) it is tanh(u) and the log-probability includes tanh's Jacobian.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import nn

from policyforge.config import check_bounds, check_in, check_sizes
from policyforge.policies.base import EnvSpec, Obs, Policy, PolicyConfig, Sample, register_policy
from policyforge.policies.chunked import gaussian_log_density, tanh_log_jacobian
from policyforge.policies.networks import MAX_WIDTH, Activation, mlp
from policyforge.policies.normalizer import RunningNormalizer

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
MAX_HISTORY = 100
"""Most observations of history (2 s at 50 Hz; legged students use 5-50)."""


@register_policy("gaussian")
@dataclasses.dataclass
class GaussianConfig(PolicyConfig):
    """Architecture of a Gaussian policy."""

    hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of the mean network."""
    activation: Activation = "elu"
    """Hidden activation."""
    init_std: float = 1.0
    """Initial standard deviation (pre-squash units)."""
    state_dependent_std: bool = False
    """Predict log-std with the network (SAC) instead of one learned vector (PPO)."""
    log_std_bounds: tuple[float, float] = (-5.0, 2.0)
    """Clamp of the log standard deviation."""
    squash: bool = False
    """tanh-squash actions (SAC); otherwise clip them to [-1, 1] (PPO)."""
    normalize_obs: bool = True
    """Normalise observations with running statistics inside the policy."""
    obs_key: Literal["policy", "critic"] = "policy"
    """The observation it reads: `policy` (what a robot sees), or `critic` (the privileged state: a teacher that a
    deployable student learns from, `algo: distill`)."""
    history: int = 0
    """Read the last this many observations, oldest first (a proprioceptive-history student, e.g. a walking
    policy that infers its velocity); 0: the current one alone."""

    def __post_init__(self) -> None:
        check_sizes(self.hidden, "hidden", MAX_WIDTH)
        check_in(self.init_std, "init_std", "(0, inf)")
        why = "std e^-20 … e^20 is beyond any use; float32 overflows at e^88"
        check_bounds(self.log_std_bounds, "log_std_bounds", "[-20, 20]", why, strict=True)
        check_in(self.history, "history", f"[0, {MAX_HISTORY}]", "observations of history")

    reads_images = False

    def build(self, env: EnvSpec) -> GaussianPolicy:
        return GaussianPolicy(env.obs_shapes[self.obs_key][0], env.action_dim, self, self.obs_key)


class GaussianPolicy(Policy):
    """Diagonal Gaussian over single actions (H = 1)."""

    def __init__(self, obs_dim: int, action_dim: int, config: GaussianConfig, obs_key: str = "policy"):
        super().__init__()
        self.config, self.obs_key, self.action_dim = config, obs_key, action_dim
        self.n_obs_steps = config.history
        self.normalizer = RunningNormalizer(obs_dim, enabled=config.normalize_obs)
        out = 2 * action_dim if config.state_dependent_std else action_dim
        self.net = mlp(obs_dim * max(1, config.history), config.hidden, out, config.activation, out_gain=0.01)
        init_log_std = math.log(config.init_std)
        if config.state_dependent_std:
            nn.init.constant_(self.net[-1].bias[action_dim:], init_log_std)
        else:
            self.log_std = nn.Parameter(torch.full((action_dim,), init_log_std))

    def distribution(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and standard deviation of the pre-squash Gaussian, [B, 1, A] each, from obs[obs_key] [B, D] (or
        its history [B, T_o, D])."""
        out = self.net(self.normalizer(obs[self.obs_key]).flatten(1))
        if self.config.state_dependent_std:
            mean, log_std = out.chunk(2, dim=-1)
        else:
            mean, log_std = out, self.log_std.expand_as(out)
        log_std = log_std.clamp(*self.config.log_std_bounds)
        return mean[:, None, :], log_std.exp()[:, None, :]

    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        mean, std = self.distribution(obs)
        chain = mean + noise_scale * std * torch.randn_like(mean) if noise_scale else mean
        return Sample(self._squash(chain), chain, self._log_density(chain, mean, std).sum((-2, -1)))

    def step_log_probs(self, obs: Obs, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One stochastic step: log-densities [B, 1, 1, A] of chains [B, 1, A]."""
        mean, std = self.distribution(obs)
        entropy = (0.5 + _HALF_LOG_2PI + std.log()).sum(dim=(-2, -1))
        return self._log_density(chain, mean, std)[:, None], entropy

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of demonstrated actions [B, 1, A]."""
        chain = torch.atanh(actions.clamp(-0.999, 0.999)) if self.config.squash else actions
        mean, std = self.distribution(obs)
        return -self._log_density(chain, mean, std).sum((-2, -1)).mean()

    def example_obs(self, batch: int) -> Obs:
        history = (self.n_obs_steps,) if self.n_obs_steps else ()
        return {self.obs_key: torch.zeros(batch, *history, self.normalizer.mean.shape[0])}

    def update_normalizer(self, obs: Obs) -> None:
        self.normalizer.update(obs[self.obs_key])

    def _squash(self, chain: torch.Tensor) -> torch.Tensor:
        return torch.tanh(chain) if self.config.squash else chain.clamp(-1.0, 1.0)

    def _log_density(self, chain: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Per-element log-density [B, 1, A] of the action (tanh's Jacobian included when squashing)."""
        log_prob = gaussian_log_density(chain, mean, std)
        if self.config.squash:
            log_prob = log_prob - tanh_log_jacobian(chain)
        return log_prob
