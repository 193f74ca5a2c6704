"""Training the compact reward model (`algo: {class: reward_model, ...}`, `rewards/learned.py`) from LeRobot datasets
of rendered rollouts: progress (a ramp over successful episodes) and success, with counterfactual-instruction and
reversed-window negatives (`rewards/labels.py`). The runner drives it like behaviour cloning (its steps are gradient
steps, checkpoints and resume are the runner's); its evaluation is offline, on a held-out dataset
(`rewards/metrics.py`: success accuracy, value-order correlation …), and best.pt keeps the model whose held-out
success accuracy, then progress rank correlation, was highest. The run's `sim` section says which cameras, at which
size, the model reads (the dataset's videos must have them), and the env it will score.

    policyforge collect arm-instructed --episodes 400 --cameras task --image-size 64 --noise 0.6 --out data/rm-train
    policyforge collect arm-instructed instructions=heldout_combination --episodes 64 ... --out data/rm-heldout
    policyforge train configs/reward-model.yaml
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from diffusers.optimization import get_cosine_schedule_with_warmup
from torch.nn import functional as F

from policyforge.algos.base import Algorithm, StepCallback
from policyforge.algos.bc import load_demonstrations
from policyforge.algos.registry import AlgoConfig, AlgorithmEntry, register_algorithm
from policyforge.config import ConfigError, check, check_in
from policyforge.data.dataset import DatasetError
from policyforge.policies.base import Obs, Policy
from policyforge.rewards.labels import FrameMix, RewardFrames
from policyforge.rewards.learned import LearnedReward, LearnedRewardConfig, build_learned
from policyforge.rewards.metrics import reward_accuracy, success_offset
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


@dataclasses.dataclass
class RewardModelAlgoConfig(AlgoConfig):
    """Training a reward model (`algo: {class: reward_model, ...}`)."""

    reads_images = True

    dataset: str = ""
    """Rollouts to learn from: a LeRobot dataset with videos of sim.image.cameras, `next.success` and instructions
    (`policyforge collect`; noisy experts give failures as well as successes)."""
    extra_datasets: list[str] = dataclasses.field(default_factory=list)
    """More rollouts to learn from beside `dataset`, e.g. a policy's own (`policyforge collect --policy RUN`): the
    states an RL policy reaches on the model's reward, which the model must judge right (success from the
    simulator's flag) so that the policy cannot keep exploiting its mistakes."""
    rejected_datasets: list[str] = dataclasses.field(default_factory=list)
    """Rollouts of a policy that fooled the model (success and progress high with the arm away from the cubes,
    seen in its videos): every frame of an episode that fails is labelled progress 0 and not done, so that neither
    head keeps the mistake (in `extra_datasets` a failed episode teaches only success); its successful episodes are
    labelled as any dataset's."""
    eval_dataset: str = ""
    """Held-out rollouts the evaluation scores (other instructions, colours or seeds than `dataset`'s); empty: the
    training dataset itself (then the figures say how well it fits, not how well it generalises)."""
    max_episodes: int = 0
    """Use only the first this many episodes of `dataset` (0: all)."""
    model: LearnedRewardConfig = dataclasses.field(default_factory=LearnedRewardConfig)
    """The network."""
    gradient_steps: int = 3000
    """Gradient steps to train for (the run's length)."""
    steps_per_iteration: int = 250
    """Gradient steps between logging points."""
    batch_size: int = 64
    """Samples per gradient step."""
    lr: float = 3e-4
    """Peak AdamW learning rate."""
    warmup_steps: int = 100
    """Linear learning-rate warm-up, then cosine decay to 0 at gradient_steps (as BC's): the last checkpoints settle
    instead of swinging from one evaluation to the next."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    counterfactual: float = 0.3
    """Fraction of each batch paired with an instruction naming another task (RoboReward's counterfactual negatives)."""
    hard_counterfactual: float = 0.0
    """Fraction of the counterfactual negatives whose instruction names the same family on another object or target
    (labels.py: the model must then read which cube the arm is at; for arm-instructed's instructions only)."""
    reversal: float = 0.2
    """Fraction of each batch played backwards (windows of model.window ≥ 2 only)."""
    success_weight: float = 1.0
    """Weight of the success loss beside the progress loss."""
    calibrate_success: bool = True
    """At each evaluation, calibrate the model's success probability on the held-out dataset before measuring
    (`metrics.success_offset`: Platt scaling's bias over the episodes' last frames and their counterfactual pairs):
    the model trains on every frame, this sets it where an episode is decided, on rollouts it did not train on
    (its figures on that dataset are then fitted: report another held-out set beside them)."""
    balance_success: bool = True
    """Weigh the success loss's positive frames by negatives / positives of the dataset, so that a task whose
    success lasts a few frames (lift: the cube held up) is not called failed for being rare (measured: held-out
    success accuracy on last frames at best 0.64 unweighted, 0.69 weighted; BENCHMARKS.md, "Reward models")."""

    def __post_init__(self) -> None:
        check_in(self.max_episodes, "max_episodes", "[0, inf)", "0: all")
        check_in(self.gradient_steps, "gradient_steps", "[1, inf)")
        check_in(self.steps_per_iteration, "steps_per_iteration", f"[1, gradient_steps={self.gradient_steps}]")
        check_in(self.batch_size, "batch_size", "[1, 65536]")
        check_in(self.lr, "lr", "(0, 1)")
        check_in(self.warmup_steps, "warmup_steps", "[0, inf)")
        check_in(self.weight_decay, "weight_decay", "[0, 1]")
        check_in(self.counterfactual, "counterfactual", "[0, 1)")
        check_in(self.hard_counterfactual, "hard_counterfactual", "[0, 1]")
        check_in(self.reversal, "reversal", "[0, 1)")
        check_in(self.success_weight, "success_weight", "[0, 1000]")


class RewardModelTraining(Algorithm):
    """Supervised progress + success training of a `LearnedReward` (module docstring)."""

    step_unit = "gradient_steps"
    ranked_by = ("eval/success_accuracy", "eval/progress_rank_corr")

    def __init__(
        self,
        model: LearnedReward,
        train: RewardFrames | FrameMix,
        held_out: RewardFrames,
        config: RewardModelAlgoConfig,
    ):
        self.model, self.train_data, self.held_out, self.config = model, train, held_out, config
        self.policy = model  # type: ignore[assignment]  # what the runner checkpoints as best.pt: the reward model
        positives = float(train.success.mean())
        self.pos_weight = torch.tensor((1 - positives) / max(positives, 1e-3) if config.balance_success else 1.0)
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=config.weight_decay
        )
        self.schedule = get_cosine_schedule_with_warmup(self.optimizer, config.warmup_steps, config.gradient_steps)

    def total_steps(self, default: int) -> int:
        return self.config.gradient_steps

    def steps_per_iteration(self, env: VecEnv) -> int:
        return self.config.steps_per_iteration

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        cfg = self.config
        self.model.train()
        totals = np.zeros(3)
        for _ in range(cfg.steps_per_iteration):
            frames, ids, progress, success = self.train_data.sample(
                cfg.batch_size, cfg.counterfactual, cfg.reversal, hard=cfg.hard_counterfactual
            )
            progress_loss, success_loss = self.losses(frames, ids, progress, success)
            loss = progress_loss + cfg.success_weight * success_loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.schedule.step()
            totals += [float(progress_loss.detach()), float(success_loss.detach()), float(norm)]
        mean = totals / cfg.steps_per_iteration
        lr = self.schedule.get_last_lr()[0]
        return obs, {"loss/progress": mean[0], "loss/success": mean[1], "loss/grad_norm": mean[2], "loss/lr": lr}

    def losses(
        self, frames: torch.Tensor, ids: torch.Tensor, progress: torch.Tensor, success: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(progress loss, success loss): binary cross-entropies on the sigmoid outputs, progress's on soft targets
        over the samples whose progress is known."""
        logits = self.model.logits(frames, ids)
        known = ~torch.isnan(progress)
        progress_loss = (
            F.binary_cross_entropy_with_logits(logits[known, 0], progress[known]) if known.any() else logits.sum() * 0
        )
        return progress_loss, F.binary_cross_entropy_with_logits(logits[:, 1], success, pos_weight=self.pos_weight)

    def evaluation(self) -> dict[str, float]:
        if self.config.calibrate_success:
            self.model.success_offset.fill_(success_offset(self.model, self.held_out))
        figures = {f"eval/{key}": value for key, value in reward_accuracy(self.model, self.held_out).items()}
        return {**figures, "eval/success_threshold": float(torch.sigmoid(self.model.success_offset))}

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])


def reward_frames(config: RunConfig, env: VecEnv, field: str, index: int | None = None) -> RewardFrames:
    """The labelled frames of the dataset `algo.<field>` (`[index]` of a list) names, read for the model's cameras
    and window (`rejected_datasets`: progress 0 in failed episodes)."""
    cameras = list(config.sim.image.cameras)
    demos = load_demonstrations(config.algo, config.sim.task, env, cameras, field, index)
    model = config.algo.model
    first = config.algo.max_episodes if field == "dataset" else 0
    try:
        episodes = range(first or demos.num_episodes)
        data = RewardFrames(demos, cameras, model.window, model.frame_stride, episodes, field == "rejected_datasets")
    except DatasetError as err:
        raise ConfigError(f"algo.{field}" + ("" if index is None else f"[{index}]"), str(err)) from None
    height, width = data.images.shape[2:4]
    image = config.sim.image
    check(
        (height, width) == (image.height, image.width),
        "sim.image.width",
        f"{demos.root} holds {width} x {height} frames; the model reads sim.image {image.width} x "
        f"{image.height}: set sim.image.width={width} sim.image.height={height}",
    )
    return data


def construct_reward_model(config: RunConfig, env: VecEnv, policy: Policy) -> RewardModelTraining:
    """A reward model for the run's cameras, and its training and held-out data (the run's policy is unused)."""
    check(
        bool(config.sim.image.cameras),
        "sim.image.cameras",
        "a reward model reads camera frames: name the cameras, e.g. sim.image.cameras=[task]",
    )
    train = reward_frames(config, env, "dataset")
    fields = ("extra_datasets", "rejected_datasets")
    extra = [reward_frames(config, env, f, i) for f in fields for i in range(len(getattr(config.algo, f)))]
    if extra:
        train = FrameMix([train, *extra])
    held_out = reward_frames(config, env, "eval_dataset") if config.algo.eval_dataset else train
    return RewardModelTraining(build_learned(config), train, held_out, config.algo)


register_algorithm("reward_model", RewardModelAlgoConfig, AlgorithmEntry(construct_reward_model))
