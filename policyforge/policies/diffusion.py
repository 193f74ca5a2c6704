"""Diffusion policy: DDPM ε-prediction training, DDIM sampling (noise schedule and timesteps from `diffusers`).

Its chain for RL (DPPO, Ren et al. 2024) is the sequence of DDIM latents x_K … x_0, chain [B, K + 1, H, A];
each step is a Gaussian transition x_{k−1} ~ N(μ_θ(x_k, obs), σ_k²) whose std is floored at `min_std` and
whose noise is clipped at ±`noise_clip`·σ. log_prob sums the transitions of the trainable (last) steps;
`freeze_early_steps` hands the earlier ones to a frozen copy. With `noise_scale = 0` sampling starts from
x_K = 0 and is plain deterministic DDIM (η = 0): that is `act`, and what exports contain.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from diffusers import DDIMScheduler, DDPMScheduler

from policyforge.config import check
from policyforge.policies.base import Obs, Sample
from policyforge.policies.chunked import ChunkConfig, ChunkedPolicy, gaussian_entropy, gaussian_log_prob
from policyforge.policies.denoisers import DenoiserConfig
from policyforge.policies.encoders import EncoderConfig


@dataclasses.dataclass
class DiffusionConfig:
    """A diffusion policy."""

    chunk: ChunkConfig = dataclasses.field(default_factory=ChunkConfig)
    """Observation history and action chunks."""
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
    """Observation encoder."""
    denoiser: DenoiserConfig = dataclasses.field(default_factory=DenoiserConfig)
    """ε-prediction network."""
    train_timesteps: int = 100
    """DDPM diffusion steps used in training."""
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = "squaredcos_cap_v2"
    """Noise schedule (a diffusers beta_schedule)."""
    inference_steps: int = 10
    """DDIM steps K when sampling."""
    eta: float = 1.0
    """DDIM η of the stochastic (RL) chain: 0 deterministic … 1 DDPM-like variance."""
    min_std: float = 0.1
    """Floor of every transition's std in the chain (DPPO: 0.1), keeps log-probabilities well-conditioned."""
    noise_clip: float = 3.0
    """Transition noise clipped at ± this many stds."""
    x0_clip: float = 1.0
    """Predicted clean actions clipped to ± this (actions live in [-1, 1])."""

    def __post_init__(self) -> None:
        check(self.train_timesteps >= 2, "train_timesteps", f"must be ≥ 2, got {self.train_timesteps}")
        check(
            1 <= self.inference_steps <= self.train_timesteps,
            "inference_steps",
            f"must be in [1, train_timesteps={self.train_timesteps}], got {self.inference_steps}",
        )
        check(self.eta >= 0, "eta", f"must be ≥ 0, got {self.eta}")
        check(self.min_std > 0, "min_std", f"must be > 0 (log-probabilities need a std), got {self.min_std}")
        check(self.noise_clip > 0, "noise_clip", f"must be > 0, got {self.noise_clip}")


class DiffusionPolicy(ChunkedPolicy):
    """DDPM-trained, DDIM-sampled action chunks [B, H, A]."""

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: DiffusionConfig,
        obs_key: str = "policy",
        image_shape: tuple[int, ...] | None = None,
    ):
        super().__init__(state_dim, action_dim, config.chunk, config.encoder, config.denoiser, obs_key, image_shape)
        self.config = config
        schedule = dict(num_train_timesteps=config.train_timesteps, beta_schedule=config.beta_schedule)
        self.train_scheduler = DDPMScheduler(**schedule, clip_sample=False)
        ddim = DDIMScheduler(**schedule, clip_sample=True, set_alpha_to_one=True)
        ddim.set_timesteps(config.inference_steps)
        timesteps = ddim.timesteps.long()  # descending, e.g. 90, 80, …, 0
        alpha = ddim.alphas_cumprod[timesteps]
        prev = timesteps - config.train_timesteps // config.inference_steps
        alpha_prev = torch.where(prev >= 0, ddim.alphas_cumprod[prev.clamp(min=0)], ddim.final_alpha_cumprod)
        # DDIM's σ at η = 1 (Song et al. 2021, eq. 16)
        sigma = ((1 - alpha_prev) / (1 - alpha) * (1 - alpha / alpha_prev)).sqrt()
        self.register_buffer("ddim_timesteps", timesteps)
        self.register_buffer("ddim_alpha", alpha.float())
        self.register_buffer("ddim_alpha_prev", alpha_prev.float())
        self.register_buffer("ddim_sigma", sigma.float())

    @property
    def steps(self) -> int:
        return self.config.inference_steps

    def predict(
        self, step: torch.Tensor, x: torch.Tensor, cond: torch.Tensor, net: torch.nn.Module
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Clipped clean-chunk estimate x0 and the ε consistent with it, [B, H, A] each, for latents x_k
        [B, H, A] at sampling step(s) `step` [B] (0 = first)."""
        cfg = self.config
        alpha = self.ddim_alpha[step][:, None, None]
        t = self.ddim_timesteps[step].float() / cfg.train_timesteps
        eps = net(x, t, torch.zeros_like(t), cond)
        x0 = ((x - (1 - alpha).sqrt() * eps) / alpha.sqrt()).clamp(-cfg.x0_clip, cfg.x0_clip)
        return x0, (x - alpha.sqrt() * x0) / (1 - alpha).sqrt()

    def moments(
        self, step: torch.Tensor, x0: torch.Tensor, eps: torch.Tensor, noise_scale: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std [B, H, A] of the DDIM transition to x_{k−1}; `noise_scale` scales η and the std."""
        alpha_prev = self.ddim_alpha_prev[step][:, None, None]
        sigma = noise_scale * self.config.eta * self.ddim_sigma[step][:, None, None]
        mean = alpha_prev.sqrt() * x0 + (1 - alpha_prev - sigma**2).clamp(min=0).sqrt() * eps
        return mean, (noise_scale * sigma.clamp(min=self.config.min_std)).expand_as(mean)

    def sample(self, obs: Obs, noise_scale: float = 1.0, score: bool = True) -> Sample:
        conditions = self._conditions(obs, self.steps)
        x = self.initial_latent(conditions[0], noise_scale)
        chain, log_prob = [x], torch.zeros_like(x[:, 0, 0])
        for k in range(self.steps):
            step = torch.full_like(x[:, 0, 0], k, dtype=torch.long)
            x0, eps = self.predict(step, x, conditions[k], self.network(k))
            mean, std = self.moments(step, x0, eps, noise_scale)
            if noise_scale:
                x_next = mean + std * torch.randn_like(mean).clamp(-self.config.noise_clip, self.config.noise_clip)
            else:
                x_next = mean
            if score and k >= self.frozen_steps:  # the chain's density is always scored under the nominal (η, σ)
                nominal = (mean, std) if noise_scale == 1.0 else self.moments(step, x0, eps)
                log_prob = log_prob + gaussian_log_prob(x_next, *nominal)
            x = x_next
            chain.append(x)
        return Sample(x.clamp(-1.0, 1.0), torch.stack(chain, dim=1), log_prob)

    def log_prob(self, obs: Obs, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability and entropy [B] of the trainable transitions of chains [B, K + 1, H, A]."""
        first, batch = self.frozen_steps, chain.shape[0]
        n = self.steps - first
        cond = self.encode(obs)
        x = chain[:, first:-1].flatten(0, 1)  # [B·n, H, A], step-major inside each sample
        step = torch.arange(first, self.steps).repeat(batch)
        x0, eps = self.predict(step, x, cond.repeat_interleave(n, dim=0), self.denoiser)
        mean, std = self.moments(step, x0, eps)
        target = chain[:, first + 1 :].flatten(0, 1)
        log_prob = gaussian_log_prob(target, mean, std).view(batch, n).sum(-1)
        return log_prob, gaussian_entropy(std).view(batch, n).sum(-1)

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """DDPM ε-prediction loss of demonstrated chunks [B, H, A]."""
        cond = self.encode(obs)
        noise = torch.randn_like(actions)
        timesteps = torch.randint(0, self.config.train_timesteps, (actions.shape[0],))
        noisy = self.train_scheduler.add_noise(actions, noise, timesteps)
        predicted = self.denoiser(
            noisy, timesteps.float() / self.config.train_timesteps, torch.zeros(actions.shape[0]), cond
        )
        return torch.nn.functional.mse_loss(predicted, noise)
