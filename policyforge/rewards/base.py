"""The reward-model contract: camera frames and the instruction → task progress and a success probability.

    scores = model.score(frames, instructions)          # frames uint8 [B, T, V, H, W, 3], instructions: B strings
    scores.progress [B] in [0, 1]                       # how far the instructed task has come in the latest frame
    scores.success  [B] in [0, 1]                       # the probability that it is done

A model declares what it reads (`RewardInputs`: its cameras in order, the frame size, the window of T frames
`frame_stride` control steps apart, ending at the frame scored), so the VecEnv wrapper (`rewards.wrapper`) can check
an env against it before training starts, and evaluates it every `every` control steps on the whole batch. Real
robots have no `info["success"]`: everything a model reads is what a robot's cameras and its operator give.

Every model is a torch module on its own device; inputs may live anywhere (they are moved). `check_frames` is the one
validation of inputs: frames of the wrong dtype, shape, size or number of views, a missing instruction → ValueError
naming the field and what was expected.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class RewardInputs:
    """What a reward model reads."""

    cameras: tuple[str, ...]
    """The views it reads, in the order of the frames' V axis (names of the env's cameras)."""
    height: int
    """Frame height, pixels."""
    width: int
    """Frame width, pixels."""
    window: int = 1
    """T, frames per sample: the scored frame and the T - 1 before it."""
    frame_stride: int = 1
    """Control steps between consecutive frames of a window."""


@dataclasses.dataclass(frozen=True)
class RewardScores:
    """A model's verdict on a batch, float32 [B] each, on the model's device."""

    progress: torch.Tensor
    """How far the instructed task has come, in [0, 1] (1: done)."""
    success: torch.Tensor
    """The probability that the task is done, in [0, 1]."""
    disagreement: torch.Tensor | None = None
    """How unsure the model is of the progress, ≥ 0 (an ensemble's spread: `rewards.ensemble`); None: not said."""


class RewardModel(nn.Module, abc.ABC):
    """A batched reward model (module docstring). Subclasses set `inputs` and implement `_score`."""

    inputs: RewardInputs
    reports_disagreement: bool = False
    """Whether `score` fills `RewardScores.disagreement` (the env wrapper then logs it as model_disagreement)."""

    @property
    def device(self) -> torch.device:
        parameter = next(self.parameters(), None)
        return parameter.device if parameter is not None else torch.device("cpu")

    @torch.no_grad()
    def score(self, frames: torch.Tensor, instructions: Sequence[str]) -> RewardScores:
        """Progress and success of B samples: `frames` uint8 [B, T, V, H, W, 3] (T = inputs.window, V =
        len(inputs.cameras)), or [B, V, H, W, 3] for a window of one; `instructions` B non-empty strings."""
        if frames.dim() == 5 and self.inputs.window == 1:
            frames = frames[:, None]
        check_frames(frames, instructions, self.inputs)
        was_training = self.training
        self.eval()
        try:
            scores = self._score(frames.to(self.device), list(instructions))
        finally:
            self.train(was_training)
        spread = None if scores.disagreement is None else scores.disagreement.float()
        return RewardScores(scores.progress.float().clamp(0, 1), scores.success.float().clamp(0, 1), spread)

    @abc.abstractmethod
    def _score(self, frames: torch.Tensor, instructions: list[str]) -> RewardScores:
        """`score` on checked inputs: frames uint8 [B, T, V, H, W, 3] on the model's device."""


def check_frames(frames: torch.Tensor, instructions: Sequence[str], inputs: RewardInputs) -> None:
    """ValueError naming `frames` or `instructions` unless they are what `inputs` declares (module docstring)."""
    views = len(inputs.cameras)
    expected = f"uint8 [B, T={inputs.window}, V={views}, H={inputs.height}, W={inputs.width}, 3]"
    if not isinstance(frames, torch.Tensor) or frames.dtype != torch.uint8:
        kind = frames.dtype if isinstance(frames, torch.Tensor) else type(frames).__name__
        raise ValueError(f"frames: expected {expected} (RGB bytes as the env renders them), got {kind}")
    if frames.dim() != 6 or tuple(frames.shape[1:]) != (inputs.window, views, inputs.height, inputs.width, 3):
        raise ValueError(
            f"frames: expected {expected}, got {list(frames.shape)}: the model reads cameras {list(inputs.cameras)} "
            f"at {inputs.width} x {inputs.height} (sim.image.cameras, sim.image.width/height)"
        )
    if isinstance(instructions, str):
        raise ValueError("instructions: expected one string per sample (a list), got a single string")
    if len(instructions) != frames.shape[0]:
        raise ValueError(f"instructions: expected {frames.shape[0]} (one per sample), got {len(instructions)}")
    missing = [i for i, text in enumerate(instructions) if not isinstance(text, str) or not text.strip()]
    if missing:
        raise ValueError(
            f"instructions: sample {missing[0]} has no instruction ({instructions[missing[0]]!r}); a reward model "
            "scores progress on the instructed task: give every sample its instruction"
        )
