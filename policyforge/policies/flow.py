"""Flow-matching policies: rectified flow (Euler, K steps), shortcut models (Frans et al. 2024, good at 1–4 steps)
and MeanFlow (Geng et al. 2025, one step).

Convention: x_0 ~ N(0, I) is noise, x_1 the action chunk, x_t = t·a + (1 − t)·ε, v = a − ε. The network
f(x_t, t, Δ, cond) is the instantaneous velocity at Δ = 0 and, for shortcut / MeanFlow, the average velocity
over [t, t + Δ]. Sampling takes K steps of Δ = 1/K.

The RL chain is the integration path x_0 … x_K, chain [B, K + 1, H, A], made stochastic in one of two ways,
both with exact log-probabilities (sum of the Gaussian transitions; x_0's N(0, I) density does not depend on θ
and is left out):
- `reinflow` (ReinFlow, Zhang et al. 2025): x_{k+1} = x_k + f·Δ + σ_θ·ε with σ_θ(x_k, t, obs) from a learnable
  noise network bounded to `noise_std_range`. Steps frozen by `freeze_early_steps` take σ from the frozen copy
  of the noise network, like their velocity: their densities are not in log_prob, so they must not move.
- `sde` (Flow-GRPO / πRL): the ODE→SDE conversion with the same marginals, σ_s = a·sqrt(s / (1 − s)) at noise
  level s = 1 − t (the first step uses the next grid level, where σ would be infinite).
With `stochastic_steps: one` (Flow-GRPO-Fast / πRL's single noisy step) each chain takes one uniformly drawn
trainable step stochastically and follows the ODE elsewhere; its chain is then {"path": [B, K + 1, H, A],
"step": [B]} and only that step is scored.
`noise_scale` scales the injected noise (and a) and x_0's std (`initial_noise`); at 0 the path is the deterministic
ODE from x_0 = 0 (`act`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import nn

from policyforge.config import check, check_bounds, check_in, check_sizes
from policyforge.policies.base import Chain, EnvSpec, Obs, PolicyConfig, Sample, register_policy
from policyforge.policies.chunked import (
    MIN_STD,
    ChunkConfig,
    ChunkedPolicy,
    gaussian_entropy,
    gaussian_log_density,
    gaussian_log_prob,
)
from policyforge.policies.denoisers import DenoiserConfig, SinusoidalEmbedding
from policyforge.policies.encoders import EncodedPolicyConfig, EncoderConfig
from policyforge.policies.networks import MAX_WIDTH, mlp

FlowVariant = Literal["rectified", "shortcut", "meanflow"]
MAX_STEPS = 1000
"""Most integration steps (flow policies sample in 1-10)."""


@dataclasses.dataclass
class FlowChainConfig(PolicyConfig):
    """What every flow-matching policy shares, whatever its networks (the flow policy's, the VLA's): chunks, the
    flow variant, the integration steps and the RL chain."""

    steps_field = "steps"

    chunk: ChunkConfig = dataclasses.field(default_factory=ChunkConfig)
    """Observation history and action chunks."""
    variant: FlowVariant = "rectified"
    """`rectified` flow, `shortcut` model or `meanflow`: how the network is trained and how it takes big steps."""
    steps: int = 10
    """Integration steps K when sampling."""
    chain_noise: Literal["reinflow", "sde"] = "reinflow"
    """How the RL chain is made stochastic: a learnable noise network (ReinFlow) or the ODE→SDE conversion."""
    noise_std_range: tuple[float, float] = (0.08, 0.16)
    """[min, max] std of the ReinFlow noise network."""
    noise_hidden: list[int] = dataclasses.field(default_factory=lambda: [128, 128])
    """Hidden sizes of the ReinFlow noise network."""
    sde_noise_level: float = 0.5
    """a in σ_s = a·sqrt(s / (1 − s)) (chain_noise: sde)."""
    stochastic_steps: Literal["all", "one"] = "all"
    """Inject noise at every trainable step, or at `one` random step per chain (ODE elsewhere): one step's
    log-probability is a lower-variance policy-gradient signal and cheaper to rescore."""
    initial_noise: float = 1.0
    """Std of the chain's start x_0 ~ N(0, initial_noise²·I) when sampling (`act` starts at x_0 = 0). 1 samples
    the learnt distribution, as noisy as the demonstrations it was cloned from; below 1 the RL chain explores
    around the deterministic path (its chain noise) rather than across the demonstrators' spread. x_0's density
    does not depend on θ, so log-probabilities are unchanged."""
    consistency_fraction: float = 0.25
    """Fraction of each batch trained on big steps (shortcut self-consistency, MeanFlow Δ > 0); the rest on
    instantaneous flow matching."""

    def __post_init__(self) -> None:
        check_in(self.steps, "steps", f"[1, {MAX_STEPS}]")
        check_bounds(self.noise_std_range, "noise_std_range", f"[{MIN_STD}, 1]", "actions live in [-1, 1]")
        check_sizes(self.noise_hidden, "noise_hidden", MAX_WIDTH)
        why = "Flow-GRPO uses 0.7; above 1 noise swamps the flow"
        check_in(self.sde_noise_level, "sde_noise_level", f"[{MIN_STD}, 1]", why)
        check_in(self.initial_noise, "initial_noise", "[0, 1]", "1 is the flow's own N(0, I) prior")
        check(
            self.chain_noise != "sde" or self.steps >= 2,
            "steps",
            "the ODE→SDE chain needs ≥ 2 steps (its first step has no finite σ): raise steps or use reinflow",
        )
        check(
            0 <= self.consistency_fraction < 1,
            "consistency_fraction",
            f"must be in [0, 1), got {self.consistency_fraction}",
        )


@register_policy("flow")
@dataclasses.dataclass
class FlowConfig(EncodedPolicyConfig, FlowChainConfig):
    """A flow-matching policy."""

    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
    """Observation encoder."""
    denoiser: DenoiserConfig = dataclasses.field(default_factory=DenoiserConfig)
    """Velocity network."""

    def build(self, env: EnvSpec) -> FlowPolicy:
        return FlowPolicy(action_dim=env.action_dim, config=self, **self.encoder_inputs(env))


class NoiseNetwork(nn.Module):
    """ReinFlow's noise head: (x_k, t, cond) → per-element std [B, H, A] in [low, high]."""

    def __init__(self, horizon: int, action_dim: int, cond_dim: int, hidden: list[int], std_range: tuple[float, float]):
        super().__init__()
        self.low, self.high = std_range
        self.horizon, self.action_dim = horizon, action_dim
        self.embed = SinusoidalEmbedding(16)
        # a small last layer: every std starts near the middle of the range
        self.net = mlp(horizon * action_dim + cond_dim + 16, hidden, horizon * action_dim, "mish", out_gain=0.01)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        logits = self.net(torch.cat([x.flatten(1), cond, self.embed(t)], dim=-1))
        std = self.low + (self.high - self.low) * torch.sigmoid(logits)
        return std.view(-1, self.horizon, self.action_dim)


class FlowPolicy(ChunkedPolicy):
    """Flow-matching action chunks [B, H, A] with a ReinFlow or Flow-SDE chain."""

    rl_only_modules = ("noise_net.",)

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: FlowChainConfig,
        obs_key: str = "policy",
        image_shape: tuple[int, ...] | None = None,
        networks: tuple[nn.Module, nn.Module] | None = None,
    ):
        """`networks`: (encoder, velocity network) built by a subclass (the VLA's); by default the `encoder` and
        `denoiser` of a FlowConfig. The chain (ReinFlow noise network, Flow-SDE) is the same either way."""
        if networks is None:
            assert isinstance(config, FlowConfig)
            networks = (config.encoder, config.denoiser)
        super().__init__(state_dim, action_dim, config.chunk, *networks, obs_key, image_shape)
        self.config = config
        self.noise_net = None
        if config.chain_noise == "reinflow":
            self.noise_net = NoiseNetwork(
                config.chunk.horizon, action_dim, self.encoder.out_dim, config.noise_hidden, config.noise_std_range
            )

    @property
    def steps(self) -> int:
        return self.config.steps

    def step_modules(self) -> dict[str, nn.Module]:
        modules = super().step_modules()
        if self.noise_net is not None:
            # a frozen copy, not a fixed std: freezing keeps the chain's law, and PPO never sees frozen densities move
            modules["noise_net"] = self.noise_net
        return modules

    def noise_condition(self, cond: torch.Tensor) -> torch.Tensor:
        """What the ReinFlow noise network reads of a condition: [B, encoder.out_dim] (the condition itself here;
        a summary of a token sequence for a policy that conditions on one)."""
        return cond

    def velocity(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, net: nn.Module) -> torch.Tensor:
        """Velocity [B, H, A] used for a step of Δ = 1/K from time t [B] (average velocity for shortcut/MeanFlow)."""
        delta = t * 0 if self.config.variant == "rectified" else t * 0 + 1.0 / self.steps
        return net(x, t, delta, cond)

    def moments(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        velocity: torch.Tensor,
        cond: torch.Tensor,
        noise_scale: float = 1.0,
        step: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std [B, H, A] of x at t + Δ given x [B, H, A] at t [B] and the step's velocity; a ReinFlow
        std comes from the noise network that runs sampling step `step` (None: the trainable one)."""
        dt = 1.0 / self.steps
        if self.noise_net is not None:
            noise_net = self.noise_net if step is None else self.network(step, "noise_net")
            std = noise_scale * noise_net(x, t, self.noise_condition(cond)) if noise_scale else torch.zeros_like(x)
            return x + velocity * dt, std
        s = (1.0 - t).clamp(max=1.0 - dt)[:, None, None]  # noise level; s = 1 has no finite σ
        sigma = noise_scale * self.config.sde_noise_level * (s / (1 - s)).sqrt()
        drift = velocity * (1 + sigma**2 * (1 - s) / (2 * s)) - x * sigma**2 / (2 * s)
        return x + drift * dt, (sigma * math.sqrt(dt)).expand_as(x)

    def sample(
        self, obs: Obs, noise_scale: float = 1.0, score: bool = True, start: torch.Tensor | None = None
    ) -> Sample:
        conditions = self._conditions(obs, self.steps)
        times = [k / self.steps for k in range(self.steps)]
        delta = 0.0 if self.config.variant == "rectified" else 1.0 / self.steps
        features = self.step_features(conditions, times, [delta] * self.steps)
        x = self.initial_latent(conditions[0], noise_scale * self.config.initial_noise, start)
        one_step = self.config.stochastic_steps == "one"
        chosen = torch.randint(self.frozen_steps, self.steps, x.shape[:1], device=x.device) if one_step else None
        chain, log_prob = [x], x[:, 0, 0] * 0
        for k in range(self.steps):
            t = torch.full_like(x[:, 0, 0], k / self.steps)
            velocity = self.network(k).decode(x, features[k])
            mean, std = self.moments(x, t, velocity, conditions[k], noise_scale, step=k)
            if chosen is not None:  # the other chains take the plain ODE step here
                noisy = (chosen == k)[:, None, None]
                mean, std = torch.where(noisy, mean, x + velocity * (1.0 / self.steps)), std * noisy
            x_next = mean + std * torch.randn_like(mean) if noise_scale else mean
            if score and k >= self.frozen_steps:  # scored under the nominal noise
                unmasked = noise_scale == 1.0 and chosen is None
                nominal = (mean, std) if unmasked else self.moments(x, t, velocity, conditions[k])
                step_log_prob = gaussian_log_prob(x_next, *nominal)
                log_prob = log_prob + (step_log_prob if chosen is None else step_log_prob * (chosen == k))
            x = x_next
            chain.append(x)
        path = torch.stack(chain, dim=1)
        return Sample(x.clamp(-1.0, 1.0), path if chosen is None else {"path": path, "step": chosen}, log_prob)

    def step_log_probs(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-densities [B, n, H, A] of the trainable transitions of chains [B, K + 1, H, A] (n = 1, the noisy
        step, for `stochastic_steps: one` chains), and the entropy [B]."""
        if isinstance(chain, dict):
            path, step = chain["path"], chain["step"]
            rows = torch.arange(len(step), device=step.device)
            x, target, cond = path[rows, step], path[rows, step + 1], self.encode(obs)
        else:
            step, x, target, cond = self.trainable_transitions(obs, chain)
        t = step.float() / self.steps
        mean, std = self.moments(x, t, self.velocity(x, t, cond, self.denoiser), cond)
        batch = len(obs[self.obs_key])
        elements = gaussian_log_density(target, mean, std).view(batch, -1, *target.shape[1:])
        return elements, gaussian_entropy(std).view(batch, -1).sum(-1)

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """Flow-matching loss of demonstrated chunks [B, H, A] (+ shortcut self-consistency / MeanFlow identity)."""
        return self.flow_loss(self.encode(obs), actions)

    def flow_loss(self, cond: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """`bc_loss` given the encoded observation `cond`."""
        batch = actions.shape[0]
        n_big = int(batch * self.config.consistency_fraction) if self.config.variant != "rectified" else 0
        noise = torch.randn_like(actions)
        t, delta = torch.rand(batch), torch.zeros(batch)
        if n_big:
            big = slice(batch - n_big, batch)
            shortcut = self.config.variant == "shortcut"
            t[big], delta[big] = self._shortcut_times(n_big) if shortcut else self._meanflow_times(n_big)
        x_t = t[:, None, None] * actions + (1 - t[:, None, None]) * noise
        target = actions - noise
        if n_big:
            if shortcut:
                target[big] = self._shortcut_target(x_t[big], t[big], delta[big], cond[big])
            else:
                target[big] = self._meanflow_target(x_t[big], t[big], delta[big], target[big], cond[big])
        error = (self.denoiser(x_t, t, delta, cond) - target).pow(2).flatten(1).mean(-1)
        if self.config.variant == "meanflow":
            # MeanFlow's adaptive weighting (p = 1): its bootstrapped target otherwise feeds back and diverges
            error = error / (error.detach() + 1e-3)
        return error.mean()

    # -- one-step flow targets ------------------------------------------------------------------------------

    def _shortcut_times(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Times t [n] on the grid of step 2d and step sizes Δ = 2d [n], d ∈ {1/2, 1/4, …} down to 4× finer
        than the sampling steps."""
        levels = max(1, int(math.log2(max(self.steps, 2))) + 2)
        d = 0.5 ** torch.randint(1, levels + 1, (n,)).float()
        return torch.floor(torch.rand(n) / (2 * d)) * 2 * d, 2 * d

    @torch.no_grad()
    def _shortcut_target(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor):
        """Average of two half steps: s(x, t, 2d) ≈ [s(x, t, d) + s(x', t + d, d)] / 2 (stop-gradient)."""
        half = delta / 2
        first = self.denoiser(x, t, half, cond)
        x_mid = x + first * half[:, None, None]
        second = self.denoiser(x_mid, t + half, half, cond)
        return (first + second) / 2

    def _meanflow_times(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Start t and width Δ of random intervals [t, t + Δ] ⊂ [0, 1]."""
        a, b = torch.rand(n), torch.rand(n)
        return torch.minimum(a, b), (a - b).abs()

    def _meanflow_target(
        self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, v: torch.Tensor, cond: torch.Tensor
    ) -> torch.Tensor:
        """u = v + Δ·du/dt along the path with the interval's end fixed (MeanFlow identity, stop-gradient)."""
        cond = cond.detach()

        def average_velocity(x_, t_, delta_):
            return self.denoiser(x_, t_, delta_, cond)

        with torch.no_grad():
            _, du_dt = torch.func.jvp(average_velocity, (x, t, delta), (v, torch.ones_like(t), -torch.ones_like(t)))
        return v + delta[:, None, None] * du_dt
