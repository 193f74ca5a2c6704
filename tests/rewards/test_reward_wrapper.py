"""The VecEnv reward wrapper (`rewards/wrapper.py`) on arm-instructed with a (randomly initialised) learned reward
model: dense progress differences that sum to an episode's last progress, scoring every k steps, asynchronous
scoring that returns the same episode returns one step late, ground truth logged beside, frames rendered on request
scored as the observed ones, exact snapshots, and envs that do not render what the model reads refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from policyforge.config import ConfigError
from policyforge.rewards.config import RewardModelConfig
from policyforge.rewards.learned import LearnedReward, LearnedRewardConfig
from policyforge.rewards.wrapper import RewardWrapper
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import ImageConfig

SIM = SimConfig(
    task="arm-instructed", num_envs=4, num_threads=1,
    task_options={"families": ["touch"], "episode_seconds": 0.4},  # 10-step episodes: several end in a test
    image=ImageConfig(cameras=["task"], width=24, height=24),
)  # fmt: skip
STEPS = 25


def model(window: int = 1, stride: int = 1) -> LearnedReward:
    torch.manual_seed(0)
    config = LearnedRewardConfig(window=window, frame_stride=stride, image_channels=8, image_features=16, hidden=32)
    model = LearnedReward(config, ["task"], 24, 24)
    for parameter in model.parameters():
        parameter.data.add_(0.3 * torch.randn_like(parameter))
    return model


def wrapped(sim: SimConfig = SIM, reward_model: LearnedReward | None = None, **options) -> RewardWrapper:
    options = {"signal": "dense", **options}
    return RewardWrapper(make_env(sim, seed=3), reward_model or model(), RewardModelConfig(path="x", **options),
                         sim.image)  # fmt: skip


def actions(steps: int = STEPS) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.rand(SIM.num_envs, 5, generator=generator) * 2 - 1 for _ in range(steps)]


def roll(env, steps: int = STEPS) -> list[tuple]:
    env.reset(seed=3)
    return [env.step(action)[1:] for action in actions(steps)]


def episode_returns(trace) -> list[float]:
    return [float(r) for _, _, _, info in trace for r in info["episode"]["return"][info["episode"]["done"]]]


def test_dense_rewards_sum_to_the_last_progress_of_each_episode():
    trace = roll(wrapped(every=1))
    returns = episode_returns(trace)
    last_progress = [
        float(p) for _, _, _, info in trace for p in info["reward_terms"]["model_progress"][info["episode"]["done"]]
    ]
    assert len(returns) == 8  # 4 envs × 2 episodes of 10 steps
    torch.testing.assert_close(torch.tensor(returns), torch.tensor(last_progress), rtol=0, atol=1e-5)
    assert max(float(reward.abs().max()) for reward, *_ in trace) > 1e-3


def test_the_progress_signal_is_the_models_progress_at_each_scored_step():
    for step, (reward, terminated, truncated, info) in enumerate(roll(wrapped(every=2, signal="progress")), start=1):
        scored = torch.ones(4, dtype=torch.bool) if step % 2 == 0 else terminated | truncated
        assert torch.equal(reward[scored], info["reward_terms"]["model_progress"][scored])
        assert (reward[~scored] == 0).all()


def test_the_progress_success_signal_adds_the_success_probability_to_the_progress():
    trace = roll(wrapped(every=2, signal="progress_success"))
    for step, (reward, terminated, truncated, info) in enumerate(trace, start=1):
        scored = torch.ones(4, dtype=torch.bool) if step % 2 == 0 else terminated | truncated
        terms = info["reward_terms"]
        torch.testing.assert_close(reward[scored], (terms["model_progress"] + terms["model_success"])[scored])
        assert (reward[~scored] == 0).all()
    assert max(float(info["reward_terms"]["model_success"].max()) for *_, info in trace) > 1e-3


def test_scoring_every_k_steps_rewards_those_steps_and_every_episode_end():
    trace = roll(wrapped(every=3))
    for step, (reward, terminated, truncated, _) in enumerate(trace, start=1):
        scored = torch.ones(4, dtype=torch.bool) if step % 3 == 0 else terminated | truncated
        assert (reward[~scored] == 0).all(), f"step {step}"
    every_step = episode_returns(roll(wrapped(every=1)))
    torch.testing.assert_close(torch.tensor(episode_returns(trace)), torch.tensor(every_step), rtol=0, atol=1e-5)


def test_asynchronous_scoring_returns_the_same_episode_returns_one_step_late():
    synchronous, asynchronous = roll(wrapped(every=1)), roll(wrapped(every=1, asynchronous=True))
    torch.testing.assert_close(torch.tensor(episode_returns(asynchronous)), torch.tensor(episode_returns(synchronous)),
                               rtol=0, atol=1e-5)  # fmt: skip
    assert (asynchronous[0][0] == 0).all() and (synchronous[0][0] != 0).any(), "step 1's reward comes with step 2"
    torch.testing.assert_close(asynchronous[1][0], synchronous[0][0], rtol=0, atol=1e-6)


def test_ground_truth_reward_and_success_are_logged_beside():
    plain = make_env(SIM, seed=3)
    plain.reset(seed=3)
    truth = [plain.step(action) for action in actions(12)]
    trace = roll(wrapped(), 12)
    for (_, reward, _, _, info), (model_reward, _, _, wrapped_info) in zip(truth, trace, strict=True):
        assert torch.equal(wrapped_info["reward_terms"]["gt_reward"], reward)
        assert torch.equal(wrapped_info["success"], info["success"])
        assert torch.equal(model_reward, wrapped_info["reward_terms"]["model_reward"])


def test_frames_rendered_on_request_score_as_the_observed_frames():
    on_request = dataclasses.replace(SIM, image=dataclasses.replace(SIM.image, render="on_request"))
    observed, requested = roll(wrapped(every=2)), roll(wrapped(on_request, every=2))
    for (a, *_), (b, *_) in zip(observed, requested, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-3)  # the tiled renderer: a level apart in a few pixels


def test_a_snapshot_continues_exactly_with_the_wrappers_own_state():
    env = wrapped(reward_model=model(window=2, stride=2), every=2, asynchronous=True)
    env.reset(seed=3)
    steps = actions(20)
    for action in steps[:7]:
        env.step(action)
    state = env.get_state()
    first = [env.step(action)[1] for action in steps[7:]]
    env.set_state(state)
    again = [env.step(action)[1] for action in steps[7:]]
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_an_env_that_does_not_render_what_the_model_reads_is_refused_naming_the_field():
    wrist = dataclasses.replace(SIM, image=ImageConfig(cameras=["wrist"], width=24, height=24))
    with pytest.raises(ConfigError, match=r"^sim.image.cameras: the reward model reads cameras \['task'\]"):
        wrapped(wrist)
    small = dataclasses.replace(SIM, image=ImageConfig(cameras=["task"], width=16, height=16))
    with pytest.raises(ConfigError, match=r"^sim.image.width: .*set sim.image.width=24 sim.image.height=24"):
        wrapped(small)
    with pytest.raises(ConfigError, match=r"^sim.reward_model.every: .*score every 2 steps \(got 1\)"):
        wrapped(reward_model=model(window=2, stride=2), every=1)


def test_reset_to_a_given_state_starts_every_episode_afresh_like_reset():
    """After `reset_to`, a dense reward is a progress difference from zero again, and an episode's return starts
    from zero (it once kept the previous episodes' progress and returns)."""
    import numpy as np

    from policyforge.sims.task import NumpySampler

    env = wrapped(every=1)
    roll(env, 7)  # part-way through the first episodes: progress and returns carried
    env.reset_to(env.task.reset(NumpySampler(np.random.default_rng(5)), SIM.num_envs, np))
    _, reward, *_, info = env.step(actions(1)[0])
    torch.testing.assert_close(reward, info["reward_terms"]["model_progress"], rtol=0, atol=1e-6)
