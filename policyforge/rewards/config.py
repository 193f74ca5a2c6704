"""`sim.reward_model`: which reward model replaces or adds to a task's reward, and how the wrapper evaluates it."""

from __future__ import annotations

import dataclasses
from typing import Literal

from policyforge.config import check, check_in

REWARD_KINDS = ("learned", "clip", "vlm")
ANSWERS = ("likelihood", "generate")
SIGNALS = ("progress", "progress_success", "dense", "sparse", "both")
MODES = ("replace", "add")
MAX_EVERY = 1000


@dataclasses.dataclass
class ClipRewardConfig:
    """A zero-shot CLIP-style reward (Rocamonde et al. 2024, VLM-RMs): the frame's embedding s, the goal's g (the
    instruction in `goal_template`) and a baseline's b (`baseline`), all unit vectors; reward 1 - ½‖P(s - g)‖² with
    P = α d dᵀ/‖d‖² + (1 - α) I, d = g - b, mapped from [-1, 1] to progress in [0, 1]; success is the zero-shot
    probability of the goal text against the baseline text (softmax of the model's scaled similarities)."""

    goal_template: str = "a robot arm that has done this: {instruction}"
    """The goal prompt; `{instruction}` is replaced by the episode's instruction."""
    baseline: str = "a robot arm on a table with cubes"
    """The baseline prompt: the scene with no task done."""
    alpha: float = 0.5
    """How much of the distance to the goal counts only along the baseline → goal direction (0: plain distance, 1:
    only that direction; VLM-RMs found partial projection best)."""

    def __post_init__(self) -> None:
        check("{instruction}" in self.goal_template, "goal_template", "must contain {instruction}")
        check(bool(self.baseline.strip()), "baseline", "give the prompt of the scene with no task done")
        check_in(self.alpha, "alpha", "[0, 1]")


@dataclasses.dataclass
class VlmJudgeConfig:
    """A generative vision-language judge (RoboReward, Tan et al. 2025: a VLM rating a rollout's progress 1–5 from
    its frames and the instruction). Progress is (score - 1) / 4, success the probability of 5."""

    prompt: str = (
        "These are {frames} frames of a robot arm's camera, oldest first. The robot's task: {instruction}. "
        "Rate the task's progress in the last frame from 1 (not started) to 5 (completed). Answer with one digit."
    )
    """The question after the frames; `{instruction}` and `{frames}` (their number) are filled in."""
    frames: int = 1
    """Frames shown per question: the scored one and those before it, `frame_stride` control steps apart."""
    frame_stride: int = 4
    """Control steps between the frames shown (with frames > 1)."""
    answer: Literal["likelihood", "generate"] = "likelihood"
    """`likelihood`: read the model's next-token probabilities of the digits 1–5 (progress: their expectation;
    deterministic, one forward pass); `generate`: greedy-decode an answer and parse its score (`parse_score`)."""
    max_new_tokens: int = 8
    """Tokens generated per answer (`generate`)."""

    def __post_init__(self) -> None:
        check("{instruction}" in self.prompt, "prompt", "must contain {instruction}")
        check_in(self.frames, "frames", "[1, 32]")
        check_in(self.frame_stride, "frame_stride", "[1, 1000]", unit=" control steps")
        check(self.answer in ANSWERS, "answer", f"give one of {', '.join(ANSWERS)}, got {self.answer!r}")
        check_in(self.max_new_tokens, "max_new_tokens", "[1, 256]")


@dataclasses.dataclass
class RewardModelConfig:
    """A reward model as the env's reward (`rewards.wrapper.RewardWrapper`); off while `path` is empty."""

    path: str = ""
    """What to load: a run directory of `algo: reward_model` (kind learned), or a directory of a transformers
    checkpoint's files (`save_pretrained`, `hf download <repo> --local-dir DIR`; kind clip), read offline; empty: no
    reward model."""
    kind: Literal["learned", "clip", "vlm"] = "learned"
    """`learned`: the compact progress + success model policyforge trains (`rewards.learned`), its best.pt;
    `clip`: zero-shot CLIP / SigLIP similarity with VLM-RMs' goal–baseline projection (`rewards.clip`); `vlm`: a
    vision-language model asked for a 1–5 progress score, RoboReward's question (`rewards.vlm`)."""
    ensemble: list[str] = dataclasses.field(default_factory=list)
    """More runs of kind learned, scored with `path`'s as one ensemble (`rewards.ensemble`): each of progress and
    success is then the models' mean minus `uncertainty_penalty` × their standard deviation, so states where
    models trained from other seeds disagree (where no training rollout went, and a policy can hack the reward)
    pay less. Train them by the same recipe with other seeds: `policyforge train configs/reward-model.yaml seed=1
    name=reward-model-1`; empty: `path`'s model alone."""
    uncertainty_penalty: float = 1.0
    """With an ensemble: standard deviations of the models' scores subtracted from their mean (0: the plain mean)."""
    cameras: list[str] = dataclasses.field(default_factory=list)
    """The cameras a zero-shot model (kind clip) reads, of sim.image.cameras (empty: the first); a learned model
    reads those it was trained on."""
    clip: ClipRewardConfig = dataclasses.field(default_factory=lambda: ClipRewardConfig())
    """Prompts and projection of kind clip."""
    vlm: VlmJudgeConfig = dataclasses.field(default_factory=lambda: VlmJudgeConfig())
    """Prompt, frames and answer reading of kind vlm."""
    signal: Literal["progress", "progress_success", "dense", "sparse", "both"] = "progress"
    """`progress`: the model's progress at every scored step (VLM-RMs' reward: the level, as a task's dense reward
    is); `progress_success`: the progress plus the success probability (in [0, 2]; a success classifier's reward, as
    RoboFuME and HIL-SERL use one, on top of the progress: a progress learned from time ramps saturates over the last
    centimetres, where the classifier still rises: measured in BENCHMARKS.md); `dense`: the progress gained since
    the env's last scored frame (a potential difference: an episode's sum is its last progress, so oscillating earns
    nothing, but the signal is sparser: PPO on touch measured in BENCHMARKS.md); `sparse`: 1 at every scored step
    whose success probability reaches `success_threshold`; `both`: dense plus sparse."""
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
        check_in(self.uncertainty_penalty, "uncertainty_penalty", "[0, 100]", "standard deviations subtracted")
        check(
            not self.ensemble or self.kind == "learned",
            "ensemble",
            f"ensembles are of learned models (kind learned); kind {self.kind} is one pretrained model: leave it empty",
        )
        check(all(bool(run) for run in self.ensemble), "ensemble", "an entry is empty: give each model's run directory")

    @property
    def enabled(self) -> bool:
        return bool(self.path)
