"""Reward models scored together, pessimistic where they disagree: a reward a policy cannot raise by going where
the training rollouts never went.

    model = RewardEnsemble([load_learned(run) for run in runs], uncertainty_penalty=1.0)
    scores = model.score(frames, instructions)   # each of progress and success: the members' mean - 1.0 × their std

A learned reward is right where its training rollouts went and arbitrary elsewhere, and RL goes elsewhere: on touch,
policies trained on one model's reward found states it scored half or fully done with the arm turned away or far from
the cube (BENCHMARKS.md, "Reward models"). Members trained from different seeds agree on what they learnt and drift
apart on what none of them saw (deep ensembles, Lakshminarayanan et al. 2017), so their spread marks the states where
the reward is a guess, and subtracting it (a lower confidence bound, as uncertainty-penalised reward models against
over-optimisation do: Coste et al. 2024, "Reward Model Ensembles Help Mitigate Overoptimization") takes away what a
policy would gain there. `sim.reward_model.ensemble` puts one in the env.
"""

from __future__ import annotations

import torch
from torch import nn

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardModel, RewardScores


class RewardEnsemble(RewardModel):
    """`members` (same inputs: cameras, size, window) scored as one model (module docstring). Its progress and
    success are each the members' mean minus `uncertainty_penalty` × their standard deviation, clamped to [0, 1];
    `disagreement` is the standard deviation of their progress."""

    reports_disagreement = True

    def __init__(self, members: list[RewardModel], uncertainty_penalty: float):
        super().__init__()
        if len(members) < 2:
            raise ConfigError("sim.reward_model.ensemble", "an ensemble needs another model beside path: name one")
        for index, member in enumerate(members[1:]):
            if member.inputs != members[0].inputs:
                raise ConfigError(
                    f"sim.reward_model.ensemble[{index}]",
                    f"reads {member.inputs}, the ensemble's first model (path) {members[0].inputs}: train every "
                    "member on the same cameras, frame size and window",
                )
        self.members = nn.ModuleList(members)
        self.inputs = members[0].inputs
        self.uncertainty_penalty = uncertainty_penalty

    def combine(self, per_member: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Members' outputs [K, B, ...] → (pessimistic value: mean - penalty × std, clamped to [0, 1]; std)."""
        spread = per_member.std(dim=0, unbiased=False)
        return (per_member.mean(dim=0) - self.uncertainty_penalty * spread).clamp(0, 1), spread

    def probabilities(self, frames: torch.Tensor, instruction_ids: torch.Tensor) -> torch.Tensor:
        """Progress and success [B, 2] of learned members (`LearnedReward.probabilities`), combined: what the
        offline accuracy (`rewards.metrics`) reads."""
        return self.combine(torch.stack([m.probabilities(frames, instruction_ids) for m in self.members]))[0]

    def _score(self, frames: torch.Tensor, instructions: list[str]) -> RewardScores:
        scores = [member._score(frames, instructions) for member in self.members]
        progress, spread = self.combine(torch.stack([s.progress for s in scores]))
        success, _ = self.combine(torch.stack([s.success for s in scores]))
        return RewardScores(progress, success, disagreement=spread)
