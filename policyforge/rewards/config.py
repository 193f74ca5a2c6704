"""`sim.reward_model`: which reward model replaces or adds to a task's reward, and how the wrapper evaluates it."""

from __future__ import annotations

import dataclasses
from typing import Literal

from policyforge.config import check, check_in

REWARD_KINDS = ("learned",)
SIGNALS = ("dense", "sparse", "both")
MODES = ("replace", "add")
MAX_EVERY = 1000


@dataclasses.dataclass
class RewardModelConfig:
    """A reward model as the env's reward (`rewards.wrapper.RewardWrapper`); off while `path` is empty."""

    path: str = ""
    """What to load: a run directory of `algo: reward_model` (kind learned); empty: no reward model."""
    kind: Literal["learned"] = "learned"
    """`learned`: the compact progress + success model policyforge trains (`rewards.learned`), its best.pt."""
    signal: Literal["dense", "sparse", "both"] = "dense"
    """`dense`: the progress gained since the env's last scored frame (a potential difference: an episode's sum is
    its last progress, so a model cannot be farmed by oscillating); `sparse`: 1 at every scored step whose success
    probability reaches `success_threshold`; `both`: their sum."""
    mode: Literal["replace", "add"] = "replace"
    """`replace`: the model's reward is the env's reward (what a real robot has); `add`: the task's reward plus
    `scale` × the model's."""
    scale: float = 1.0
    """Factor on the model's reward (> 0)."""
    every: int = 1
    """Score the batch every this many control steps (and the last frame of every episode that ends); the reward
    of the steps between is 0, and the next scored step gets the progress made over all of them."""
    asynchronous: bool = False
    """Score step t's frames in a worker thread while the simulator runs step t + 1; step t's reward then comes with
    step t + 1 (one step late; an episode's last reward still comes with its last step, so returns are unchanged)."""
    success_threshold: float = 0.5
    """Success probability at which a frame counts as success (`sparse`, and the logged `model_success_flag`)."""
    device: str = "cpu"
    """Torch device the model runs on."""

    def __post_init__(self) -> None:
        check(self.kind in REWARD_KINDS, "kind", f"give one of {', '.join(REWARD_KINDS)}, got {self.kind!r}")
        check(self.signal in SIGNALS, "signal", f"give one of {', '.join(SIGNALS)}, got {self.signal!r}")
        check(self.mode in MODES, "mode", f"give one of {', '.join(MODES)}, got {self.mode!r}")
        check_in(self.every, "every", f"[1, {MAX_EVERY}]", unit=" control steps")
        check_in(self.success_threshold, "success_threshold", "(0, 1]")
        check_in(self.scale, "scale", "(0, 1e6]", "the factor on the model's reward")

    @property
    def enabled(self) -> bool:
        return bool(self.path)
