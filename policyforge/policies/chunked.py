"""What diffusion and flow policies share: observation history in, action chunk out, a denoiser conditioned on
the encoded history, and the Gaussian transitions their RL chains are made of.

Observations: obs[obs_key] [B, T_o, D] (or [B, D] when T_o = 1) and, for image policies, obs["image"]
[B, T_o, V, Hi, Wi, 3] uint8. `policies.rollout.ChunkedActor` keeps the history and executes `act_steps` of
each chunk in a VecEnv.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from policyforge.config import check, check_in
from policyforge.policies.base import IMAGE_KEY, Obs, Policy, Sample, load_matching
from policyforge.policies.denoisers import DenoiserConfig, build_denoiser
from policyforge.policies.encoders import EncoderConfig, ObservationEncoder
from policyforge.policies.normalizer import RunningNormalizer

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
MIN_STD = 0.001
"""Smallest std a config may give a Gaussian transition or residual (DPPO floors at 0.1, ReinFlow at 0.08): at
1e-3 a shift of 0.1 in the mean already costs 5000 nats, and PPO's ratios e^Δlog-prob overflow float32 soon after."""
MAX_CHUNK = 1000
"""Longest observation history or action chunk, steps: 20-40 s of control at 25-50 Hz (Diffusion Policy uses 2
and 16); longer is a typo that builds a huge network."""


@dataclasses.dataclass
class ChunkConfig:
    """Observation history and action chunking."""

    n_obs_steps: int = 1
    """T_o, observations (current and previous) the policy sees."""
    horizon: int = 8
    """H, actions predicted per decision."""
    act_steps: int = 8
    """Actions of each chunk executed before planning again (≤ horizon)."""

    def __post_init__(self) -> None:
        check_in(self.n_obs_steps, "n_obs_steps", f"[1, {MAX_CHUNK}]")
        check_in(self.horizon, "horizon", f"[1, {MAX_CHUNK}]")
        check_in(self.act_steps, "act_steps", f"[1, horizon={self.horizon}]")


def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per-element log-density of a diagonal Gaussian, the shape of `x`."""
    return -0.5 * ((x - mean) / std) ** 2 - std.log() - _HALF_LOG_2PI


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Diagonal Gaussian log-density summed over every axis but the first: [B, ...] → [B]."""
    return gaussian_log_density(x, mean, std).flatten(1).sum(-1)


def tanh_log_jacobian(chain: torch.Tensor) -> torch.Tensor:
    """Per-element log |d tanh(u)/du| of pre-squash values u, the shape of `chain`: 2 (log 2 − u − softplus(−2u)),
    stable for large |u| (SAC, appendix C)."""
    return 2 * (math.log(2) - chain - torch.nn.functional.softplus(-2 * chain))


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian summed over every axis but the first: [B, ...] → [B]."""
    return (0.5 + _HALF_LOG_2PI + std.log()).flatten(1).sum(-1)


class ChunkedPolicy(Policy):
    """Base of the diffusion and flow policies: an observation encoder and a denoiser, plus a frozen copy of every
    network a step runs (`step_modules`) for the early sampling steps that RL fine-tuning leaves untouched
    (`freeze_early_steps`)."""

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        chunk: ChunkConfig,
        encoder: EncoderConfig | nn.Module,
        denoiser: DenoiserConfig | nn.Module,
        obs_key: str = "policy",
        image_shape: tuple[int, ...] | None = None,
    ):
        """`encoder` and `denoiser`: configs of the standard networks, or networks built by a subclass (the VLA's
        prefix model and action expert) with the same interface (`out_dim`, `normalizer`; condition / decode)."""
        super().__init__()
        self.obs_key, self.action_dim = obs_key, action_dim
        self.chunk_len, self.act_steps, self.n_obs_steps = chunk.horizon, chunk.act_steps, chunk.n_obs_steps
        self.state_dim, self.image_shape = state_dim, tuple(image_shape) if image_shape else None
        if not isinstance(encoder, nn.Module):
            encoder = ObservationEncoder(encoder, state_dim, chunk.n_obs_steps, self.image_shape)
        self.encoder = encoder
        if not isinstance(denoiser, nn.Module):
            if denoiser.kind == "unet":  # onnxruntime's convolutions round differently; sampler steps amplify it
                self.export_tolerance = 1e-3
            denoiser = build_denoiser(denoiser, chunk.horizon, action_dim, self.encoder.out_dim)
        self.denoiser = denoiser
        self.base: nn.ModuleDict | None = None
        self.frozen_steps = 0
        """Sampling steps run by the frozen copy in `base` (the first ones)."""

    rl_only_modules: tuple[str, ...] = ()
    """State-dict prefixes of modules only RL fine-tuning uses (ReinFlow's noise network): a pre-trained policy may
    have them or not."""

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return (self.obs_key, IMAGE_KEY) if self.image_shape is not None else (self.obs_key,)

    def train_only_last_steps(self, count: int) -> None:
        if not 1 <= count <= self.steps:
            raise ValueError(f"must be in [1, {self.steps}] (the policy's sampling steps), got {count}")
        self.freeze_early_steps(self.steps - count)

    def load_pretrained(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Load the full networks, then freeze a copy of *these* weights for the frozen early steps."""
        frozen_steps = self.frozen_steps
        self.freeze_early_steps(0)
        load_matching(self, weights, optional=(*self.rl_only_modules, "base."))  # a fine-tuned run's frozen copy
        self.freeze_early_steps(frozen_steps)

    @property
    def normalizer(self) -> RunningNormalizer:
        """The state normaliser (inside the encoder)."""
        return self.encoder.normalizer

    def freeze_early_steps(self, frozen_steps: int) -> None:
        """Run the first `frozen_steps` sampling steps with a frozen copy of the current networks; only the later
        steps stay trainable (DPPO fine-tunes the last K' denoising steps)."""
        check(
            0 <= frozen_steps < self.steps,
            "frozen_steps",
            f"must be in [0, {self.steps}) (at least the last sampling step trains), got {frozen_steps}",
        )
        self.frozen_steps = frozen_steps
        self.base = None
        if frozen_steps:
            self.base = nn.ModuleDict({name: copy.deepcopy(module) for name, module in self.step_modules().items()})
            self.base.requires_grad_(False)

    def step_modules(self) -> dict[str, nn.Module]:
        """Every network a sampling step runs, by attribute name: what `freeze_early_steps` copies, so that
        nothing a frozen step computes depends on the trainable parameters (log_prob leaves those steps out)."""
        return {"encoder": self.encoder, "denoiser": self.denoiser}

    def encode(self, obs: Obs, frozen: bool = False) -> torch.Tensor:
        """Condition [B, C] from the observation history (with the frozen copy's encoder if `frozen`); a subclass
        may condition on a token sequence [B, P, C] instead (the VLA's prefix), batch first either way."""
        state = obs[self.obs_key]
        state = state[:, None] if state.dim() == 2 else state
        check(
            state.shape[1] == self.n_obs_steps,
            f"obs.{self.obs_key}",
            f"expected a history of n_obs_steps={self.n_obs_steps} observations [B, {self.n_obs_steps}, "
            f"{self.state_dim}], got {list(state.shape)} (policies.rollout.ChunkedActor stacks the history)",
        )
        image = None
        if self.image_shape is not None:
            image = obs.get(IMAGE_KEY)
            if image is not None and image.dim() == len(self.image_shape) + 1:
                image = image[:, None]
        encoder = self.base["encoder"] if frozen and self.base is not None else self.encoder
        return encoder(state, image)

    def initial_latent(self, cond: torch.Tensor, noise_scale: float, start: torch.Tensor | None = None) -> torch.Tensor:
        """The chain's start [B, H, A]: `start` where given (`act_from_noise`), else N(0, noise_scale²·I), all zeros
        without noise. Shapes come from `cond` [B, C] so that exported graphs keep a free batch size."""
        if start is not None:
            expected = (cond.shape[0], self.chunk_len, self.action_dim)
            if tuple(start.shape) != expected:
                raise ValueError(
                    f"steering noise of shape {list(start.shape)} does not fit the base policy "
                    f"({type(self).__name__}), which starts from noise [B, H, A] = {list(expected)}"
                )
            return start.to(cond.dtype)
        zeros = cond.flatten(1)[:, :1, None].expand(-1, self.chunk_len, self.action_dim) * 0
        return zeros + noise_scale * torch.randn_like(zeros) if noise_scale else zeros

    def step_features(
        self, conditions: list[torch.Tensor], times: list[float], deltas: list[float]
    ) -> list[torch.Tensor]:
        """Every sampling step's denoiser conditioning features [B, F], one batched pass per network (they do not
        depend on the latent, so the sampling loop only runs `decode`)."""
        features: list[torch.Tensor] = []
        frozen = min(self.frozen_steps if self.base is not None else 0, len(times))
        for first, end in ((0, frozen), (frozen, len(times))):
            if end <= first:
                continue
            n, cond, net = end - first, conditions[first], self.network(first)
            if n == 1:  # one-step samplers: no stacking
                first_column = cond.flatten(1)[:, 0]  # [B] of conditions [B, C] and token sequences [B, P, C]
                t, delta = torch.full_like(first_column, times[first]), torch.full_like(first_column, deltas[first])
                features.append(net.condition(t, delta, cond))
                continue
            batch = cond.shape[0]
            t = cond.new_tensor(times[first:end])[:, None].expand(n, batch).reshape(-1)
            delta = cond.new_tensor(deltas[first:end])[:, None].expand(n, batch).reshape(-1)
            stacked = cond[None].expand(n, *cond.shape).reshape(n * batch, *cond.shape[1:])
            stacked_features = net.condition(t, delta, stacked)
            features += list(stacked_features.view(n, batch, *stacked_features.shape[1:]).unbind(0))
        return features

    def trainable_transitions(
        self, obs: Obs, chain: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The transitions x_k → x_{k+1} of chains [B, K + 1, H, A] that log_prob scores (the unfrozen steps),
        flattened for one batched network pass: steps [B·n], x_k and x_{k+1} [B·n, H, A], conditions [B·n, C];
        sample-major, so `.view(B, n)` regroups per chain."""
        first, batch = self.frozen_steps, chain.shape[0]
        n = self.steps - first
        steps = torch.arange(first, self.steps).repeat(batch)
        cond = self.encode(obs).repeat_interleave(n, dim=0)
        return steps, chain[:, first:-1].flatten(0, 1), chain[:, first + 1 :].flatten(0, 1), cond

    def network(self, step: int, name: str = "denoiser") -> nn.Module:
        """The network `name` (one of `step_modules`) that runs sampling step `step` (0 = first): the frozen
        copy's for the frozen steps."""
        return self.base[name] if self.base is not None and step < self.frozen_steps else getattr(self, name)

    def update_normalizer(self, obs: Obs) -> None:
        self.encoder.normalizer.update(obs[self.obs_key])

    @abc.abstractmethod
    def sample(
        self, obs: Obs, noise_scale: float = 1.0, score: bool = True, start: torch.Tensor | None = None
    ) -> Sample:
        """As `Policy.sample`; `score=False` skips the log-probability (`act` needs only the action); `start`
        [B, H, A]: the chain's start instead of a draw (`act_from_noise`)."""

    def act(self, obs: Obs) -> torch.Tensor:
        return self.sample(obs, noise_scale=0.0, score=False).action

    @property
    def noise_shape(self) -> tuple[int, int]:
        return (self.chunk_len, self.action_dim)

    def act_from_noise(self, obs: Obs, noise: torch.Tensor) -> torch.Tensor:
        return self.sample(obs, noise_scale=0.0, score=False, start=noise).action

    def example_obs(self, batch: int) -> Obs:
        obs = {self.obs_key: torch.zeros(batch, self.n_obs_steps, self.state_dim)}
        if self.image_shape is not None:
            obs[IMAGE_KEY] = torch.zeros(batch, self.n_obs_steps, *self.image_shape, dtype=torch.uint8)
        return obs

    def export_spec(self) -> dict[str, Any]:
        return {**super().export_spec(), "image_shape": list(self.image_shape) if self.image_shape else None}

    def _conditions(self, obs: Obs, steps: int) -> list[torch.Tensor]:
        """The condition each of `steps` sampling steps sees (the frozen copy's for frozen steps)."""
        cond = self.encode(obs)
        if not self.frozen_steps or self.base is None:
            return [cond] * steps
        with torch.no_grad():
            frozen = self.encode(obs, frozen=True)
        return [frozen if k < self.frozen_steps else cond for k in range(steps)]
