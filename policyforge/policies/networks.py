"""Small network builders shared by policies and critics."""

from __future__ import annotations

import itertools
import math
from typing import Literal

from torch import nn

Activation = Literal["elu", "tanh", "relu", "silu", "mish"]
MAX_WIDTH = 16_384
"""Widest layer a config may ask for (hidden sizes, channels, features): a 16384² layer already holds 268M weights
(1 GB); wider is a typo that fails to allocate."""
_ACTIVATIONS = {"elu": nn.ELU, "tanh": nn.Tanh, "relu": nn.ReLU, "silu": nn.SiLU, "mish": nn.Mish}


def mlp(
    in_dim: int,
    hidden: list[int],
    out_dim: int,
    activation: Activation = "elu",
    out_gain: float = 1.0,
    layer_norm: bool = False,
) -> nn.Sequential:
    """in_dim → hidden… → out_dim, orthogonal init (gain √2 inside, `out_gain` on the last layer), zero biases;
    `layer_norm`: each hidden layer normalised before its activation (RLPD's critics: stable at high update-to-data
    ratios)."""
    layers: list[nn.Module] = []
    dims = [in_dim, *hidden]
    for a, b in itertools.pairwise(dims):
        layers += [_linear(a, b, math.sqrt(2)), *([nn.LayerNorm(b)] if layer_norm else []), _ACTIVATIONS[activation]()]
    layers.append(_linear(dims[-1], out_dim, out_gain))
    return nn.Sequential(*layers)


def _linear(in_dim: int, out_dim: int, gain: float) -> nn.Linear:
    layer = nn.Linear(in_dim, out_dim)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
