"""Networks that map a noisy action chunk, its noise level and a condition to a chunk-shaped output: the ε of a
diffusion policy or the velocity of a flow policy.

    denoiser(x [B, H, A], t [B], delta [B], cond [B, C]) -> [B, H, A]
    = denoiser.decode(x, denoiser.condition(t, delta, cond))   (samplers hoist `condition` out of their loop)

`t` is the noise level / time in [0, 1] (diffusion: timestep / train_timesteps), `delta` the step size a
one-step flow is asked to jump (0 for instantaneous velocities and for diffusion).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import nn

from policyforge.config import check, check_in, check_sizes
from policyforge.policies.networks import MAX_WIDTH, mlp

MAX_KERNEL = 63
"""Widest temporal kernel of the U-Net (Diffusion Policy uses 5) — it slides over chunks of at most a few dozen
steps."""


@dataclasses.dataclass
class DenoiserConfig:
    """Architecture of the denoising / velocity network."""

    kind: Literal["mlp", "unet"] = "mlp"
    """`mlp` (fast at batch 1 on CPUs) or `unet` (1-D temporal U-Net with FiLM conditioning, Chi et al. 2023)."""
    hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256, 256])
    """MLP hidden sizes (kind: mlp)."""
    time_dim: int = 32
    """Size of the sinusoidal embeddings of t and delta."""
    unet_channels: list[int] = dataclasses.field(default_factory=lambda: [64, 128])
    """Channels per U-Net level (kind: unet); the chunk length must be divisible by 2^(levels − 1)."""
    kernel_size: int = 5
    """Temporal convolution kernel (kind: unet)."""
    groups: int = 8
    """GroupNorm groups (kind: unet); must divide every entry of unet_channels."""

    def __post_init__(self) -> None:
        check_in(self.time_dim, "time_dim", f"[2, {MAX_WIDTH}]")
        check(self.time_dim % 2 == 0, "time_dim", f"must be even, got {self.time_dim}")
        check_sizes(self.hidden, "hidden", MAX_WIDTH)
        check_in(self.kernel_size, "kernel_size", f"[1, {MAX_KERNEL}]")
        check(self.kernel_size % 2 == 1, "kernel_size", f"must be odd, got {self.kernel_size}")
        check_sizes(self.unet_channels, "unet_channels", MAX_WIDTH)
        check(self.kind != "mlp" or bool(self.hidden), "hidden", "the MLP denoiser needs at least one hidden layer")
        check(self.kind != "unet" or bool(self.unet_channels), "unet_channels", "the U-Net needs at least one level")
        check_in(self.groups, "groups", "[1, inf)")
        check(
            all(c % self.groups == 0 for c in self.unet_channels),
            "unet_channels",
            f"every entry must be divisible by groups={self.groups}, got {self.unet_channels}",
        )


def build_denoiser(config: DenoiserConfig, horizon: int, action_dim: int, cond_dim: int) -> nn.Module:
    """The network `config` describes, for chunks [B, horizon, action_dim] and conditions [B, cond_dim]."""
    if config.kind == "mlp":
        return MLPDenoiser(config, horizon, action_dim, cond_dim)
    levels = len(config.unet_channels)
    check(
        horizon % 2 ** (levels - 1) == 0,
        "denoiser.unet_channels",
        f"a {levels}-level U-Net halves the chunk {levels - 1} times; chunk.horizon={horizon} is not divisible by "
        f"{2 ** (levels - 1)}: change the horizon or use fewer levels",
    )
    return UNet1DDenoiser(config, action_dim, cond_dim)


class SinusoidalEmbedding(nn.Module):
    """Scalar in [0, 1] [B] → [B, dim] sin/cos features over geometric frequencies 0.01…100 rad per unit (low
    enough that MeanFlow's d/dt through the embedding stays tame)."""

    def __init__(self, dim: int):
        super().__init__()
        half = dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(10_000.0) * torch.arange(half) / half) * 100.0)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        angles = value[:, None] * self.freqs
        return torch.cat([angles.sin(), angles.cos()], dim=-1)


class _TimeConditioning(nn.Module):
    """Embeds (t, delta) and concatenates the condition: [B, cond_dim + 2·time_dim] → MLP → [B, out_dim]."""

    def __init__(self, time_dim: int, cond_dim: int, out_dim: int):
        super().__init__()
        self.embed = SinusoidalEmbedding(time_dim)
        self.net = nn.Sequential(nn.Linear(cond_dim + 2 * time_dim, out_dim), nn.Mish(), nn.Linear(out_dim, out_dim))

    def forward(self, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([cond, self.embed(t), self.embed(delta)], dim=-1))


class MLPDenoiser(nn.Module):
    """Flattened chunk + conditioning features → MLP (Mish) → chunk."""

    def __init__(self, config: DenoiserConfig, horizon: int, action_dim: int, cond_dim: int):
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        width = config.hidden[0]
        self.conditioning = _TimeConditioning(config.time_dim, cond_dim, width)
        self.net = mlp(horizon * action_dim + width, config.hidden, horizon * action_dim, "mish")

    def condition(self, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Features [B, F] of (t, delta, cond): independent of x, so samplers compute every step's at once."""
        return self.conditioning(t, delta, cond)

    def decode(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Output [B, H, A] for x [B, H, A] and `condition` features [B, F]."""
        return self.net(torch.cat([x.flatten(1), features], dim=-1)).view(-1, self.horizon, self.action_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.condition(t, delta, cond))


class _ConvBlock(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int, groups: int):
        super().__init__(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), nn.Mish())


class _FiLMResidualBlock(nn.Module):
    """Two conv blocks; the condition scales and shifts the first one's output per channel (FiLM)."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel: int, groups: int):
        super().__init__()
        self.first, self.second = _ConvBlock(c_in, c_out, kernel, groups), _ConvBlock(c_out, c_out, kernel, groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond)[:, :, None].chunk(2, dim=1)
        return self.second(self.first(x) * (1 + scale) + shift) + self.skip(x)


class UNet1DDenoiser(nn.Module):
    """Temporal U-Net over the chunk axis (channels = action dims), FiLM-conditioned on (t, delta, cond)."""

    def __init__(self, config: DenoiserConfig, action_dim: int, cond_dim: int):
        super().__init__()
        channels, kernel, groups = config.unet_channels, config.kernel_size, config.groups
        width = channels[0]
        self.conditioning = _TimeConditioning(config.time_dim, cond_dim, width)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        c_prev = action_dim
        for level, c in enumerate(channels):
            last = level == len(channels) - 1
            self.down.append(
                nn.ModuleList(
                    [
                        _FiLMResidualBlock(c_prev, c, width, kernel, groups),
                        _FiLMResidualBlock(c, c, width, kernel, groups),
                        nn.Identity() if last else nn.Conv1d(c, c, 3, stride=2, padding=1),
                    ]
                )
            )
            c_prev = c
        self.mid = nn.ModuleList([_FiLMResidualBlock(c_prev, c_prev, width, kernel, groups) for _ in range(2)])
        for c_skip, c_out in zip(reversed(channels[1:]), reversed(channels[:-1]), strict=True):
            self.up.append(
                nn.ModuleList(
                    [
                        _FiLMResidualBlock(c_skip * 2, c_out, width, kernel, groups),
                        _FiLMResidualBlock(c_out, c_out, width, kernel, groups),
                        nn.ConvTranspose1d(c_out, c_out, 4, stride=2, padding=1),
                    ]
                )
            )
        self.head = nn.Sequential(_ConvBlock(width, width, kernel, groups), nn.Conv1d(width, action_dim, 1))

    def condition(self, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """FiLM input [B, F] of (t, delta, cond)."""
        return self.conditioning(t, delta, cond)

    def forward(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.condition(t, delta, cond))

    def decode(self, x: torch.Tensor, film: torch.Tensor) -> torch.Tensor:
        """Output [B, H, A] for x [B, H, A] and `condition` features [B, F]."""
        h = x.transpose(1, 2)  # [B, A, H]
        skips = []
        for first, second, downsample in self.down:
            h = second(first(h, film), film)
            skips.append(h)
            h = downsample(h)
        for block in self.mid:
            h = block(h, film)
        for first, second, upsample in self.up:
            h = second(first(torch.cat([h, skips.pop()], dim=1), film), film)
            h = upsample(h)
        return self.head(h).transpose(1, 2)
