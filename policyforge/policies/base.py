"""The policy contract every policy class implements, so that one PPO (and every other algorithm) serves all.

    sample(obs) -> Sample                 action [B, H, A], the stochastic chain that produced it, log-prob [B]
    step_log_probs(obs, chain)            rescore a stored chain under the current parameters, per trainable
        -> (elements, entropy)            stochastic step and action element: [B, n, H, A], and entropy [B]
    log_prob(obs, chain) -> (lp, ent)     the same summed over steps and elements: [B], [B]
    act(obs) -> action [B, H, A]          the deterministic path: the same code as `sample` with noise off
    bc_loss(obs, actions [B, H, A])       the model's own supervised loss

H is the action-chunk length (1 for single actions); actions are in [-1, 1]. The chain is a tensor or a dict of
tensors, batch first. Per-step, per-element log-densities let PPO score only the executed part of a chunk and
give each denoising step its own ratio (DPPO). Observations are the VecEnv's
dict; a policy reads `obs[policy.obs_key]` and normalises it inside itself, so exported graphs carry the
normaliser.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import torch
from torch import nn

Obs = dict[str, torch.Tensor]
Chain = torch.Tensor | dict[str, torch.Tensor]
"""A policy's stochastic chain: a tensor or a dict of tensors, batch first."""


@dataclasses.dataclass
class Sample:
    """What `Policy.sample` returns."""

    action: torch.Tensor
    """[B, H, A] in [-1, 1]."""
    chain: Chain
    """The stochastic latents that produced the action (policy-specific shape, batch first)."""
    log_prob: torch.Tensor
    """[B] log-probability of the chain under the policy that sampled it."""


class Policy(nn.Module, abc.ABC):
    """Base class of every policy."""

    obs_key: str = "policy"
    """Observation key the policy reads."""
    action_dim: int
    """A."""
    chunk_len: int = 1
    """H, actions per decision."""
    export_tolerance: float = 1e-5
    """Largest |exported − act| accepted when an export is checked."""

    @abc.abstractmethod
    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        """Draw actions; `noise_scale=0` is the deterministic path used by `act`."""

    @abc.abstractmethod
    def step_log_probs(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-densities [B, n, H, A] of the n trainable stochastic steps of stored chains, per action element,
        under the current parameters, and the entropy (or an estimate) [B]. Terms that do not depend on the
        parameters (a flow's N(0, I) start) are left out, here and in `Sample.log_prob`."""

    def log_prob(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability [B] and entropy [B] of stored chains under the current parameters."""
        elements, entropy = self.step_log_probs(obs, chain)
        return elements.sum((1, 2, 3)), entropy

    def act(self, obs: Obs) -> torch.Tensor:
        """Deterministic actions [B, H, A]: `sample` with the noise switched off."""
        return self.sample(obs, noise_scale=0.0).action

    @abc.abstractmethod
    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """Supervised loss (scalar) of demonstrated actions [B, H, A]."""

    def update_normalizer(self, obs: Obs) -> None:
        """Fold a batch of observations into the policy's observation normaliser (if it has one)."""

    @abc.abstractmethod
    def example_obs(self, batch: int) -> Obs:
        """Zero observations of the shapes and dtypes `act` reads (export traces with them)."""

    def export_spec(self) -> dict[str, Any]:
        """Input/output description stored beside exported graphs."""
        return {"obs_key": self.obs_key, "action_dim": self.action_dim, "chunk_len": self.chunk_len}
