"""The compact reward model policyforge trains itself (`algo: reward_model`, `algos/reward_model.py`): a
language-conditioned progress + success estimator on camera frames, in the spirit of LIV / ReWiND (a learned
language-conditioned value of a frame) and LeRobot's reward classifier (a success classifier on frames).

    instruction → frozen all-MiniLM-L6-v2 (cached per instruction), mean over its tokens → [B, 384]
    frames uint8 [B, T, V, H, W, 3] → per frame (shared over views and time) a strided CNN whose feature maps the
        instruction scales and shifts after every stage (FiLM, Perez et al. 2018, as RT-1 conditions its image
        encoder) → the last map flattened, so where things are is kept → [B, T·V·F]
    → MLP → logits [B, 2]: progress (sigmoid: [0, 1]) and success (sigmoid: a probability)

The instruction modulates what the frames are read for from the first stage on, so "touch the red cube" and "touch
the blue cube" on the same frame score differently (trained by counterfactual pairs: `rewards/labels.py`). The map is
flattened rather than pooled: progress is a relation between places (the gripper's and the named cube's), which a
global average discards (BENCHMARKS.md, "Reward models"). Rollouts, the env wrapper and training pass the
instruction as text or as token ids (`sims.instruction_obs`); MiniLM's features of a paraphrase never seen in
training lie near the seen ones', which is what held-out instructions test.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
from torch import nn

from policyforge.config import check, check_in
from policyforge.policies.encoders import MAX_CHANNELS, MAX_SHIFT, random_shift
from policyforge.policies.networks import MAX_WIDTH, mlp
from policyforge.rewards.base import RewardInputs, RewardModel, RewardScores
from policyforge.sims.instruction_obs import INSTRUCTION_TOKENS

MAX_WINDOW = 16


@dataclasses.dataclass
class LearnedRewardConfig:
    """The learned reward model's network (`algo.model`)."""

    window: int = 1
    """T, frames per sample: the scored frame and the T - 1 before it (1: the latest frame alone)."""
    frame_stride: int = 4
    """Control steps between a window's frames (with window > 1); the env wrapper then scores every this many."""
    image_channels: int = 16
    """Channels of the CNN's first stage (the later ones have twice as many)."""
    image_features: int = 64
    """Features per view and frame."""
    hidden: int = 256
    """Width of the FiLM-modulated layer and of the head."""
    random_shift: int = 2
    """DrQ random-shift augmentation of frames while training, pixels (0: off)."""

    def __post_init__(self) -> None:
        check_in(self.window, "window", f"[1, {MAX_WINDOW}]")
        check_in(self.frame_stride, "frame_stride", "[1, 1000]", unit=" control steps")
        check_in(self.image_channels, "image_channels", f"[8, {MAX_CHANNELS}]")
        check(self.image_channels % 8 == 0, "image_channels", f"must be a multiple of 8, got {self.image_channels}")
        check_in(self.image_features, "image_features", f"[1, {MAX_WIDTH}]")
        check_in(self.hidden, "hidden", f"[1, {MAX_WIDTH}]")
        check_in(self.random_shift, "random_shift", f"[0, {MAX_SHIFT}]", unit=" px")


class FilmCNN(nn.Module):
    """uint8 frames [N, H, W, 3] and an instruction embedding [N, E] → features [N, F]: three stride-2 stages
    (conv, GroupNorm, ReLU), each map FiLM-modulated by the instruction, the last one flattened."""

    def __init__(self, channels: int, features: int, height: int, width: int, text_dim: int, random_shift: int):
        super().__init__()
        self.random_shift = random_shift
        widths = [channels, 2 * channels, 2 * channels]
        self.stages = nn.ModuleList()
        self.films = nn.ModuleList()
        previous = 3
        for index, width_out in enumerate(widths):
            kernel = 5 if index == 0 else 3
            self.stages.append(
                nn.Sequential(
                    nn.Conv2d(previous, width_out, kernel, stride=2, padding=kernel // 2),
                    nn.GroupNorm(8, width_out),
                    nn.ReLU(),
                )
            )
            film = nn.Linear(text_dim, 2 * width_out)
            nn.init.zeros_(film.weight)  # starts as the identity modulation
            nn.init.zeros_(film.bias)
            self.films.append(film)
            previous = width_out
        cells = math.ceil(height / 8) * math.ceil(width / 8)
        self.out = nn.Sequential(nn.Flatten(), nn.Linear(cells * widths[-1], features), nn.LayerNorm(features))

    def forward(self, frames: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        if self.training and self.random_shift:
            x = random_shift(x, self.random_shift)
        for stage, film in zip(self.stages, self.films, strict=True):
            scale, shift = film(text).chunk(2, dim=-1)
            x = stage(x) * (1.0 + scale[:, :, None, None]) + shift[:, :, None, None]
        return self.out(x)


class LearnedReward(RewardModel):
    """Progress and success from frames and the instruction (module docstring)."""

    def __init__(self, config: LearnedRewardConfig, cameras: list[str], height: int, width: int):
        super().__init__()
        from policyforge.policies.language import InstructionEncoder

        self.config = config
        self.inputs = RewardInputs(tuple(cameras), height, width, config.window, config.frame_stride)
        self.text = InstructionEncoder(INSTRUCTION_TOKENS)
        self.image = FilmCNN(
            config.image_channels, config.image_features, height, width, self.text.out_dim, config.random_shift
        )
        frames_dim = config.window * len(cameras) * config.image_features
        self.head = mlp(frames_dim, [config.hidden, config.hidden], 2, "mish", out_gain=0.01)
        self.register_buffer("success_offset", torch.zeros(()))
        """Subtracted from the success logit when scoring: the offset that calibrates the success probability on
        held-out rollouts (`metrics.success_offset`, Platt scaling's bias); 0 until a calibrated evaluation."""

    def logits(self, frames: torch.Tensor, instruction_ids: torch.Tensor) -> torch.Tensor:
        """Progress and success logits [B, 2] of frames uint8 [B, T, V, H, W, 3] and token ids int [B, L]."""
        batch, window, views = frames.shape[:3]
        tokens, mask = self.text(instruction_ids)
        weights = mask.unsqueeze(-1).float()
        sentence = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        per_frame = sentence.repeat_interleave(window * views, dim=0)
        features = self.image(frames.flatten(0, 2), per_frame).reshape(batch, -1)
        return self.head(features)

    def probabilities(self, frames: torch.Tensor, instruction_ids: torch.Tensor) -> torch.Tensor:
        """Progress and success probability [B, 2] (`logits` through a sigmoid, success at the calibrated
        operating point: `success_offset`)."""
        logits = self.logits(frames, instruction_ids)
        return torch.sigmoid(torch.stack([logits[:, 0], logits[:, 1] - self.success_offset], dim=1))

    def _score(self, frames: torch.Tensor, instructions: list[str]) -> RewardScores:
        from policyforge.sims.instruction_obs import tokenizer

        probabilities = self.probabilities(frames, tokenizer()(instructions, frames.device))
        return RewardScores(probabilities[:, 0], probabilities[:, 1])


def load_learned(run_dir: str | Path, checkpoint_file: str = "best", device: str = "cpu") -> LearnedReward:
    """The reward model of an `algo: reward_model` run (its best evaluation's weights by default), in eval mode."""
    from policyforge import config as config_io
    from policyforge.algos import checkpoint
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig
    from policyforge.config import ConfigError

    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError("sim.reward_model.path", f"{run_dir} is not a run directory (it has no {CONFIG_FILE})")
    config = config_io.load(RunConfig, run_dir / CONFIG_FILE)
    if config.algo.tag != "reward_model":
        raise ConfigError(
            "sim.reward_model.path",
            f"{run_dir} trained algo {config.algo.tag!r}, not a reward model (train one with algo: reward_model)",
        )
    model = build_learned(config)
    state = checkpoint.load(checkpoint.resolve(run_dir, checkpoint_file))["algo"]["policy"]
    state.setdefault("success_offset", torch.zeros(()))  # a model trained before calibration existed
    model.load_state_dict(state)
    return model.to(device).eval()


def build_learned(config: object) -> LearnedReward:
    """A fresh reward model of a run config (`algo.model`, reading sim.image's cameras at its size)."""
    image = config.sim.image  # type: ignore[attr-defined]
    return LearnedReward(config.algo.model, list(image.cameras), image.height, image.width)  # type: ignore[attr-defined]
