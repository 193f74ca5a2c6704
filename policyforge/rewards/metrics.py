"""How well a reward model agrees with ground truth on held-out rollouts (a dataset it did not train on).

figures = reward_accuracy(model, RewardFrames(held_out, ...))
success_accuracy        episodes whose last frame the model calls done (probability ≥ 0.5) exactly when the
                        simulator's success flag says so
success_auc             ROC-AUC of the success probability over every frame
progress_rank_corr      Spearman's ρ between the progress of a successful episode's frames (up to its first
                        success) and their order in time, averaged over episodes: GVL's value-order correlation
progress_kendall        the same with Kendall's τ
counterfactual_accuracy last frames of successful episodes, paired with an instruction naming another task,
                        that the model calls not done
hard_counterfactual_accuracy  the same with an instruction of the same family on another object or target (the
                        words alone do not tell them apart: the model must read which cube the arm is at)
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import optimize, stats
from torch.nn import functional as F

from policyforge.rewards.base import RewardModel
from policyforge.rewards.labels import RewardFrames

BATCH = 256
LOGIT_RANGE = 12.0
"""The success offset is looked for in [-12, 12] (probabilities 6e-6 … 1 - 6e-6)."""


@torch.no_grad()
def frame_scores(
    model: RewardModel, data: RewardFrames, frames: torch.Tensor | None = None, tasks: torch.Tensor | None = None
) -> torch.Tensor:
    """Scores [n, 2] (progress, success probability) of the windows ending at `frames` [n] (default: every frame
    of `data`), each under its own instruction or under `tasks` [n] (indices into the dataset's instructions)."""
    if not hasattr(model, "probabilities"):
        raise TypeError(f"frame_scores reads a learned model's or ensemble's probabilities: {type(model).__name__}")
    was_training = model.training
    model.eval()
    frames = torch.arange(len(data)) if frames is None else frames
    tasks = data.task_index[frames] if tasks is None else tasks
    out = []
    for start in range(0, len(frames), BATCH):
        part = slice(start, start + BATCH)
        window = data.images[data.windows(frames[part])].to(model.device)
        out.append(model.probabilities(window, data.task_ids[tasks[part]].to(model.device)).cpu())
    model.train(was_training)
    return torch.cat(out)


def reward_accuracy(model: RewardModel, data: RewardFrames) -> dict[str, float]:
    """The figures of the module docstring."""
    scores = frame_scores(model, data)
    progress, success = scores[:, 0].numpy(), scores[:, 1].numpy()
    truth = data.success.numpy()
    last = data.bounds[:, 1] - 1
    figures = {"success_accuracy": float(np.mean((success[last] >= 0.5) == (truth[last] >= 0.5)))}
    if 0 < truth.mean() < 1:
        figures["success_auc"] = _auc(success, truth >= 0.5)
    rhos, taus = [], []
    for start, end in data.bounds:
        reached = np.flatnonzero(truth[start:end])
        if len(reached) and reached[0] >= 2:
            ramp = progress[start : start + reached[0] + 1]
            rhos.append(stats.spearmanr(np.arange(len(ramp)), ramp).statistic)
            taus.append(stats.kendalltau(np.arange(len(ramp)), ramp).statistic)
    if rhos:
        figures["progress_rank_corr"] = float(np.nanmean(rhos))
        figures["progress_kendall"] = float(np.nanmean(taus))
    succeeded = last[truth[last] >= 0.5]
    for name, alternatives in (
        ("counterfactual_accuracy", data.others),
        ("hard_counterfactual_accuracy", data.same_kind),
    ):
        pairs = counterfactual_pairs(data, succeeded, alternatives)
        if pairs is not None:
            swapped = frame_scores(model, data, *pairs)[:, 1].numpy()
            figures[name] = float(np.mean(swapped < 0.5))
    return figures


def counterfactual_pairs(
    data: RewardFrames, frames: np.ndarray, alternatives: list[list[int]]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`frames` [n] whose task has an alternative, and the first alternative task of each [n] (None: none has)."""
    pairs = [(frame, alternatives[int(data.task_index[frame])]) for frame in frames]
    pairs = [(frame, others[0]) for frame, others in pairs if others]
    if not pairs:
        return None
    return torch.as_tensor([frame for frame, _ in pairs]), torch.as_tensor([other for _, other in pairs])


def calibration_set(data: RewardFrames) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the success probability is calibrated on: frames [n], task indices [n] and done labels [n] float —
    the episodes' last frames under their own instruction (done as the simulator says) and the successful ones'
    counterfactual pairs of both kinds (not done)."""
    last = data.bounds[:, 1] - 1
    done = data.success.numpy()[last] >= 0.5
    frames, tasks, truth = [torch.as_tensor(last)], [data.task_index[last]], [done]
    for alternatives in (data.others, data.same_kind):
        pairs = counterfactual_pairs(data, last[done], alternatives)
        if pairs is not None:
            frames, tasks, truth = [*frames, pairs[0]], [*tasks, pairs[1]], [*truth, np.zeros(len(pairs[0]), bool)]
    return torch.cat(frames), torch.cat(tasks), torch.as_tensor(np.concatenate(truth), dtype=torch.float64)


@torch.no_grad()
def success_offset(model: RewardModel, data: RewardFrames) -> float:
    """The success-logit offset that best calibrates the model on `data`'s `calibration_set` (Platt scaling's
    bias: the offset of least log-loss), so the operating point moves for the frames that decide an episode without
    calling another task's scene done."""
    frames, tasks, labels = calibration_set(data)
    scores = frame_scores(model, data, frames, tasks)[:, 1].double().clamp(1e-6, 1 - 1e-6)
    logits = torch.logit(scores) + float(model.success_offset)  # the model's own, before any offset

    def log_loss(offset: float) -> float:
        return float(F.binary_cross_entropy_with_logits(logits - offset, labels))

    return float(optimize.minimize_scalar(log_loss, bounds=(-LOGIT_RANGE, LOGIT_RANGE), method="bounded").x)


def _auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC-AUC: the probability that a positive scores above a negative (Mann-Whitney U, ties counted half)."""
    ranks = stats.rankdata(scores)
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
