"""Observation encoders of the chunked (diffusion / flow) policies: an observation history → one condition vector.
The state history is normalised and flattened, or encoded by an MLP (`state_features`).

    state [B, T_o, D] (normalised inside)  and optionally  image [B, T_o, V, Hi, Wi, 3] uint8
        → cond [B, C]

Images go through a small ResNet-style CNN per view and time step (random initialisation, no hub weights),
with DrQ-style random-shift augmentation while training.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from torch import nn
from torch.nn import functional as F

from policyforge.config import ConfigError, check, check_in
from policyforge.policies.base import IMAGE_KEY, EnvSpec
from policyforge.policies.networks import MAX_WIDTH, mlp
from policyforge.policies.normalizer import RunningNormalizer

MAX_CHANNELS = 1024
"""Most channels of the image CNN (it runs at full image resolution for every view and time step)."""
MAX_SHIFT = 64
"""Largest random shift, px: DrQ shifts 64-128 px images by 4."""


@dataclasses.dataclass
class EncoderConfig:
    """How observations become the condition of the denoiser."""

    obs_key: Literal["policy", "critic"] = "policy"
    """The state observation it reads: `policy` (what a robot sees) or `critic` (the privileged state: object poses
    and the instruction's ids; BC reads it from the dataset's observation.environment_state): an expert for
    simulation, or a teacher that a deployable student learns from (`algo: distill`)."""
    images: bool = True
    """Read the env's camera images when it renders them; false: the state alone, the cameras being rendered for
    something else (a reward model: sim.reward_model)."""
    normalize_state: bool = True
    """Normalise the state with running statistics (fitted on the demonstrations for BC)."""
    state_features: int = 0
    """> 0: encode the normalised state history with an MLP (256 hidden, Mish) to this many features;
    0: pass it on flattened (the denoiser's conditioning MLP reads it)."""
    image_features: int = 64
    """Features per view and time step from the image CNN (used when the env has image observations)."""
    image_channels: int = 32
    """Channels of the image CNN."""
    random_shift: int = 4
    """Random-shift augmentation while training: pad by this many pixels and crop back (0: off)."""
    views: list[int] = dataclasses.field(default_factory=list)
    """Which of the env's cameras (indices into sim.image.cameras) the policy sees; empty: all of them. E.g. [1] for
    a student that sees only the wrist camera of a teacher's [task, wrist]."""

    def __post_init__(self) -> None:
        check_in(self.state_features, "state_features", f"[0, {MAX_WIDTH}]", "0: the flattened state")
        check_in(self.image_features, "image_features", f"[1, {MAX_WIDTH}]")
        check_in(self.image_channels, "image_channels", f"[8, {MAX_CHANNELS}]", "its GroupNorm has 8 groups")
        check(self.image_channels % 8 == 0, "image_channels", f"must be a multiple of 8, got {self.image_channels}")
        check_in(self.random_shift, "random_shift", f"[0, {MAX_SHIFT}]", unit=" px")
        check(len(set(self.views)) == len(self.views), "views", f"must be distinct camera indices, got {self.views}")
        check(all(view >= 0 for view in self.views), "views", f"camera indices count from 0, got {self.views}")


class EncodedPolicyConfig:
    """Mixin of the policy configs with an `encoder: EncoderConfig` (diffusion, flow): which of the env's
    observations their policy reads."""

    @property
    def reads_images(self) -> bool:  # off: cameras rendered for something else (a reward model) alone
        return self.encoder.images

    def encoder_inputs(self, env: EnvSpec) -> dict[str, Any]:
        """The policy's `state_dim`, `obs_key` and `image_shape` ([V, H, W, 3], or None) in `env`."""
        key, shapes = self.encoder.obs_key, env.obs_shapes
        check(key in shapes, "policy.encoder.obs_key", f"the env has the observations {sorted(shapes)}, not {key!r}")
        image_shape = tuple(shapes[IMAGE_KEY]) if self.encoder.images and IMAGE_KEY in shapes else None
        return {"state_dim": shapes[key][0], "obs_key": key, "image_shape": image_shape}


class _ResidualConv(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(8, channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(8, channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))


class ImageEncoder(nn.Module):
    """uint8 images [N, Hi, Wi, 3] → features [N, F]: strided stem, two residual stages, global average pool."""

    def __init__(self, channels: int, features: int, random_shift: int):
        super().__init__()
        self.random_shift = random_shift
        c = channels
        self.net = nn.Sequential(
            nn.Conv2d(3, c, 5, stride=2, padding=2),
            nn.GroupNorm(8, c),
            nn.ReLU(),
            _ResidualConv(c),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
            nn.GroupNorm(8, 2 * c),
            nn.ReLU(),
            _ResidualConv(2 * c),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2 * c, features),
            nn.LayerNorm(features),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        if self.training and self.random_shift:
            x = random_shift(x, self.random_shift)
        return self.net(x)


def random_shift(x: torch.Tensor, pad: int) -> torch.Tensor:
    """Shift each image [N, C, H, W] by a random integer offset in [-pad, pad]² (edges replicated)."""
    n, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    dy = torch.randint(0, 2 * pad + 1, (n, 1, 1), device=x.device)
    dx = torch.randint(0, 2 * pad + 1, (n, 1, 1), device=x.device)
    rows = (torch.arange(h, device=x.device)[None, :, None] + dy).expand(n, h, w)
    cols = (torch.arange(w, device=x.device)[None, None, :] + dx).expand(n, h, w)
    batch = torch.arange(n, device=x.device)[:, None, None].expand(n, h, w)
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)


class ObservationEncoder(nn.Module):
    """Normalised, flattened state history, concatenated with image features of every view and time step."""

    def __init__(
        self, config: EncoderConfig, state_dim: int, n_obs_steps: int, image_shape: tuple[int, ...] | None = None
    ):
        super().__init__()
        self.normalizer = RunningNormalizer(state_dim, enabled=config.normalize_state)
        history_dim = n_obs_steps * state_dim
        self.state = mlp(history_dim, [256], config.state_features, "mish") if config.state_features else None
        self.image, self.views = None, list(config.views)
        views = 0
        if image_shape is not None:
            if any(not 0 <= view < image_shape[0] for view in self.views):
                raise ConfigError("encoder.views", f"the env has {image_shape[0]} cameras, got views {self.views}")
            views = len(self.views) or image_shape[0]
            self.image = ImageEncoder(config.image_channels, config.image_features, config.random_shift)
        state_out = config.state_features or history_dim
        self.out_dim = state_out + n_obs_steps * views * config.image_features

    def forward(self, state: torch.Tensor, image: torch.Tensor | None = None) -> torch.Tensor:
        """state [B, T_o, D], image [B, T_o, V, Hi, Wi, 3] → [B, out_dim]."""
        state = self.normalizer(state).flatten(1)
        parts = [self.state(state) if self.state is not None else state]
        if self.image is not None:
            if image is None:
                raise ValueError("this policy reads image observations: pass obs['image'] (sim.image.cameras)")
            b = image.shape[0]
            if self.views:
                image = image[:, :, self.views]
            parts.append(self.image(image.flatten(0, 2)).view(b, -1))
        return torch.cat(parts, dim=-1)
