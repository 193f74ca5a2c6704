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

from policyforge.config import check_in
from policyforge.policies.base import EnvSpec, Obs, PolicyConfig, Sample, register_policy
from policyforge.policies.chunked import (
    MIN_STD,
    ChunkConfig,
    ChunkedPolicy,
    gaussian_entropy,
    gaussian_log_density,
    gaussian_log_prob,
)
from policyforge.policies.denoisers import DenoiserConfig
from policyforge.policies.encoders import EncodedPolicyConfig, EncoderConfig

MAX_TIMESTEPS = 10_000
"""Most DDPM training steps (DDPM uses 1000, Diffusion Policy 100); the schedule is tabulated per step."""
Coefficient = float | torch.Tensor
"""A schedule coefficient: a float for one step, [B, 1, 1] for a batch of steps."""


def _at_least(value: Coefficient, floor: float) -> Coefficient:
    return value.clamp(min=floor) if isinstance(value, torch.Tensor) else max(value, floor)


@register_policy("diffusion")
@dataclasses.dataclass
class DiffusionConfig(EncodedPolicyConfig, PolicyConfig):
    """A diffusion policy."""

    steps_field = "inference_steps"

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
        check_in(self.train_timesteps, "train_timesteps", f"[2, {MAX_TIMESTEPS}]")
        check_in(self.inference_steps, "inference_steps", f"[1, train_timesteps={self.train_timesteps}]")
        check_in(self.eta, "eta", "[0, 1]", "0: deterministic DDIM, 1: DDPM's variance")
        why = "actions live in [-1, 1]; RL fine-tuning needs ≥ 0.001 (run_checks), sampling alone any floor"
        check_in(self.min_std, "min_std", "(0, 1]", why)
        check_in(self.noise_clip, "noise_clip", "(0, inf)")
        check_in(self.x0_clip, "x0_clip", "(0, inf)", "actions live in [-1, 1]")

    def build(self, env: EnvSpec) -> DiffusionPolicy:
        return DiffusionPolicy(action_dim=env.action_dim, config=self, **self.encoder_inputs(env))

    def check_for_rl(self) -> None:
        why = "RL rescores log-probabilities of steps with exactly this std: DDIM's last (every one at eta 0)"
        check_in(self.min_std, "min_std", f"[{MIN_STD}, 1]", why)


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
        # the same as Python floats: the sampling loop's arithmetic on scalars is cheaper at batch 1
        self._alpha, self._alpha_prev, self._sigma = alpha.tolist(), alpha_prev.tolist(), sigma.tolist()
        self._t = (timesteps.float() / config.train_timesteps).tolist()

    @property
    def steps(self) -> int:
        return self.config.inference_steps

    def coefficients(self, step: int | torch.Tensor) -> tuple[Coefficient, Coefficient, Coefficient]:
        """ᾱ_k, ᾱ_{k−1} and DDIM's σ at η = 1 of sampling step(s) `step` (0 = first): Python floats for one
        step (the sampling loop), [B, 1, 1] tensors for steps [B] (rescoring a batch of chains)."""
        if isinstance(step, int):
            return self._alpha[step], self._alpha_prev[step], self._sigma[step]
        return tuple(buffer[step][:, None, None] for buffer in (self.ddim_alpha, self.ddim_alpha_prev, self.ddim_sigma))

    def predict(
        self, coefficients: tuple[Coefficient, ...], x: torch.Tensor, eps: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Clipped clean-chunk estimate x0 and the ε consistent with it, [B, H, A] each, from latents x_k and the
        network's ε [B, H, A]."""
        alpha, clip = coefficients[0], self.config.x0_clip
        x0 = ((x - (1 - alpha) ** 0.5 * eps) / alpha**0.5).clamp(-clip, clip)
        return x0, (x - alpha**0.5 * x0) / (1 - alpha) ** 0.5

    def moments(
        self, coefficients: tuple[Coefficient, ...], x0: torch.Tensor, eps: torch.Tensor, noise_scale: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std [B, H, A] of the DDIM transition to x_{k−1}; `noise_scale` scales η and the std."""
        _, alpha_prev, sigma = coefficients
        sigma = noise_scale * self.config.eta * sigma
        mean = alpha_prev**0.5 * x0 + _at_least(1 - alpha_prev - sigma**2, 0.0) ** 0.5 * eps
        std = noise_scale * _at_least(sigma, self.config.min_std)
        return mean, std.expand_as(mean) if isinstance(std, torch.Tensor) else torch.full_like(mean, std)

    def sample(
        self, obs: Obs, noise_scale: float = 1.0, score: bool = True, start: torch.Tensor | None = None
    ) -> Sample:
        conditions = self._conditions(obs, self.steps)
        features = self.step_features(conditions, self._t, [0.0] * self.steps)
        x = self.initial_latent(conditions[0], noise_scale, start)
        chain, log_prob = [x], torch.zeros_like(x[:, 0, 0])
        for k in range(self.steps):
            coefficients = self.coefficients(k)
            x0, eps = self.predict(coefficients, x, self.network(k).decode(x, features[k]))
            mean, std = self.moments(coefficients, x0, eps, noise_scale)
            if noise_scale:
                x_next = mean + std * torch.randn_like(mean).clamp(-self.config.noise_clip, self.config.noise_clip)
            else:
                x_next = mean
            if score and k >= self.frozen_steps:  # the chain's density is always scored under the nominal (η, σ)
                nominal = (mean, std) if noise_scale == 1.0 else self.moments(coefficients, x0, eps)
                log_prob = log_prob + gaussian_log_prob(x_next, *nominal)
            x = x_next
            chain.append(x)
        return Sample(x.clamp(-1.0, 1.0), torch.stack(chain, dim=1), log_prob)

    def step_log_probs(self, obs: Obs, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-densities [B, n, H, A] of the n trainable transitions of chains [B, K + 1, H, A], entropy [B]."""
        step, x, target, cond = self.trainable_transitions(obs, chain)
        t = self.ddim_timesteps[step].float() / self.config.train_timesteps
        coefficients = self.coefficients(step)
        x0, eps = self.predict(coefficients, x, self.denoiser(x, t, torch.zeros_like(t), cond))
        mean, std = self.moments(coefficients, x0, eps)
        batch = chain.shape[0]
        elements = gaussian_log_density(target, mean, std).view(batch, -1, *target.shape[1:])
        return elements, gaussian_entropy(std).view(batch, -1).sum(-1)

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
