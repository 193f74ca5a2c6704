"""Reward-model ensembles (`rewards/ensemble.py`): each score the members' mean minus the penalty × their spread,
so a sample the members disagree on scores lower than one they agree on at the same mean; members reading other
inputs and ensembles of zero-shot models refused naming the field; `sim.reward_model.ensemble` loading trained
runs into the env, which logs the spread beside the reward."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardInputs, RewardModel, RewardScores
from policyforge.rewards.config import RewardModelConfig
from policyforge.rewards.ensemble import RewardEnsemble
from policyforge.rewards.learned import LearnedReward, LearnedRewardConfig
from policyforge.rewards.wrapper import RewardWrapper
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import ImageConfig

INPUTS = (["task"], 24, 24)
TEXTS = ["touch the red cube", "touch the blue cube", "lift the red cube"]


def member(seed: int, inputs: tuple = INPUTS) -> LearnedReward:
    torch.manual_seed(seed)
    model = LearnedReward(LearnedRewardConfig(image_channels=8, image_features=16, hidden=32), *inputs)
    for parameter in model.parameters():  # off the near-constant initialisation, as after training
        parameter.data.add_(0.3 * torch.randn_like(parameter))
    return model.eval()


def frames(batch: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randint(0, 256, (batch, 1, 1, 24, 24, 3), dtype=torch.uint8, generator=generator)


def test_each_score_is_the_members_mean_minus_the_penalty_times_their_spread():
    members = [member(seed) for seed in range(3)]
    each = [m.score(frames(), TEXTS) for m in members]
    for penalty in (0.0, 1.0, 2.5):
        scores = RewardEnsemble(members, penalty).score(frames(), TEXTS)
        for name in ("progress", "success"):
            stacked = torch.stack([getattr(s, name) for s in each])
            expected = (stacked.mean(0) - penalty * stacked.std(0, unbiased=False)).clamp(0, 1)
            torch.testing.assert_close(getattr(scores, name), expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(scores.disagreement, torch.stack([s.progress for s in each]).std(0, unbiased=False))


def test_a_state_the_members_disagree_on_pays_less_than_one_they_agree_on_at_the_same_mean():
    class Fixed(RewardModel):
        """Progress given per sample."""

        def __init__(self, progress: list[float]):
            super().__init__()
            self.inputs = RewardInputs(("task",), 24, 24)
            self.progress = torch.tensor(progress)

        def _score(self, frames, instructions):
            return RewardScores(self.progress, self.progress)

    # sample 0: all say 0.6; sample 1: 0.2, 0.6, 1.0 (same mean, a guess)
    ensemble = RewardEnsemble([Fixed([0.6, 0.2]), Fixed([0.6, 0.6]), Fixed([0.6, 1.0])], uncertainty_penalty=1.0)
    scores = ensemble.score(frames(2), TEXTS[:2])
    assert scores.progress[0] == pytest.approx(0.6) and scores.progress[1] == pytest.approx(0.6 - (0.32 / 3) ** 0.5)
    assert scores.disagreement[0] == 0 and scores.disagreement[1] > 0.3


def test_identical_members_score_as_one():
    one = member(0)
    alone = one.score(frames(), TEXTS)
    together = RewardEnsemble([one, member(0)], uncertainty_penalty=3.0).score(frames(), TEXTS)
    torch.testing.assert_close(together.progress, alone.progress, rtol=0, atol=1e-6)
    torch.testing.assert_close(together.success, alone.success, rtol=0, atol=1e-6)


def test_members_that_read_other_inputs_and_ensembles_of_one_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"sim\.reward_model\.ensemble\[0\].*same cameras"):
        RewardEnsemble([member(0), member(1, (["wrist"], 24, 24))], 1.0)
    with pytest.raises(ConfigError, match=r"sim\.reward_model\.ensemble.*another model"):
        RewardEnsemble([member(0)], 1.0)
    with pytest.raises(ConfigError, match=r"ensemble: .*kind learned"):
        RewardModelConfig(path="dir", kind="clip", ensemble=["other"])
    with pytest.raises(ConfigError, match=r"uncertainty_penalty"):
        RewardModelConfig(path="run", ensemble=["other"], uncertainty_penalty=-1.0)


def test_the_env_scores_with_the_ensemble_and_logs_its_spread():
    sim = SimConfig(task="arm-instructed", num_envs=3, num_threads=1,
                    task_options={"families": ["touch"], "episode_seconds": 0.4},
                    image=ImageConfig(cameras=["task"], width=24, height=24))  # fmt: skip
    ensemble = RewardEnsemble([member(0), member(1)], uncertainty_penalty=1.0)
    config = RewardModelConfig(path="x", signal="progress_success", ensemble=["y"])
    env = RewardWrapper(make_env(sim, seed=0), ensemble, config, sim.image)
    env.reset(seed=0)
    _, reward, *_, info = env.step(torch.zeros(3, 5))
    terms = info["reward_terms"]
    torch.testing.assert_close(reward, terms["model_progress"] + terms["model_success"])
    assert (terms["model_disagreement"] > 0).all()
    plain = RewardWrapper(make_env(sim, seed=0), member(0), dataclasses.replace(config, ensemble=[]), sim.image)
    plain.reset(seed=0)
    assert "model_disagreement" not in plain.step(torch.zeros(3, 5))[-1]["reward_terms"]
