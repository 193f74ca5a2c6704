"""sim.corruption: each corruption does what its config says, against a clean twin env stepped with the same
actions (same seed, same physics)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policyforge.config import ConfigError, from_dict
from policyforge.sims.config import CorruptionConfig, SimConfig
from policyforge.sims.make import make_env, make_task
from policyforge.sims.task import NumpySampler

TERMS = make_task("quadruped-walk").observation_terms()
N = 32


def twins(**corruption):
    """A clean quadruped-walk env and a corrupted one, both reset with seed 0."""
    clean, corrupted = (
        make_env(SimConfig(task="quadruped-walk", num_envs=N, num_threads=1, corruption=CorruptionConfig(**c)))
        for c in ({}, corruption)
    )
    return clean, clean.reset(seed=0), corrupted, corrupted.reset(seed=0)


def small_actions(steps: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [0.2 * torch.randn(N, 12, generator=generator).clamp(-2, 2) for _ in range(steps)]


def without(obs: torch.Tensor, *terms: str) -> torch.Tensor:
    keep = torch.ones(obs.shape[1], dtype=torch.bool)
    for term in terms:
        keep[TERMS[term]] = False
    return obs[:, keep]


def test_noise_and_bias_statistics_match_the_config_and_touch_only_their_terms():
    clean, clean_obs, corrupted, seen = twins(noise={"joint_vel": 0.1}, bias={"joint_pos": 0.02})
    errors, critic_equal = [], True
    for _ in range(60):  # standing still: no episode ends
        clean_obs, *_ = clean.step(torch.zeros(N, 12))
        seen, *_, info = corrupted.step(torch.zeros(N, 12))
        assert not info["episode"]["done"].any()
        errors.append(seen["policy"] - clean_obs["policy"])
        critic_equal &= torch.equal(seen["critic"], clean_obs["critic"])
    error = torch.stack(errors)  # [T, N, D]
    assert critic_equal  # the privileged observation stays clean
    assert torch.count_nonzero(without(error.flatten(0, 1), "joint_pos", "joint_vel")) == 0
    velocity_noise = error[..., TERMS["joint_vel"]]
    assert velocity_noise.std().item() == pytest.approx(0.1, rel=0.05) and abs(velocity_noise.mean().item()) < 0.005
    bias = error[..., TERMS["joint_pos"]]
    assert torch.allclose(bias, bias[0].expand_as(bias), atol=1e-6)  # constant over the episode
    assert bias.abs().max().item() <= 0.02  # uniform in [-0.02, 0.02]: std 0.02/√3
    assert bias[0].std().item() == pytest.approx(0.02 / 3**0.5, rel=0.15)


def test_observation_latency_shows_the_reading_of_k_steps_ago_and_the_policys_own_last_action():
    clean, clean_obs, corrupted, seen = twins(obs_latency_steps=(2, 2))
    history = [clean_obs["policy"]] * 3  # a new episode has nothing older than its first reading
    for action in small_actions(20):
        clean_obs, *_ = clean.step(action)
        seen, *_ = corrupted.step(action)
        history.append(clean_obs["policy"])
        assert torch.allclose(without(seen["policy"], "last_action"), without(history[-3], "last_action"), atol=1e-6)
        assert torch.equal(seen["policy"][:, TERMS["last_action"]], action)  # not delayed: the policy's memory


def test_action_latency_applies_the_action_of_k_steps_ago():
    clean, _, corrupted, _ = twins(action_latency_steps=(1, 1))
    actions = small_actions(20)
    for previous, action in zip([torch.zeros(N, 12), *actions[:-1]], actions, strict=True):
        clean_obs, *_ = clean.step(previous)
        seen, *_ = corrupted.step(action)
        assert torch.allclose(seen["critic"], clean_obs["critic"], atol=1e-5)


def test_an_env_reset_to_a_given_state_draws_its_corruption_too():
    """`reset_to` starts new episodes like `reset`: latencies and bias drawn, history forgotten (it once kept the
    latencies of construction, all zero, so bench sim2sim-table's +20 ms column measured no latency)."""
    clean, _, corrupted, _ = twins(action_latency_steps=(2, 2), bias={"joint_pos": 0.05})
    corrupted.step(torch.ones(N, 12))  # history the new episodes must forget
    corrupted.action_latency.zero_()
    corrupted.bias.zero_()
    initial = clean.task.reset(NumpySampler(np.random.default_rng(3)), N, np)
    clean_obs, seen = clean.reset_to(initial), corrupted.reset_to(initial)
    assert torch.all(corrupted.action_latency == 2)
    bias = seen["policy"][:, TERMS["joint_pos"]] - clean_obs["policy"][:, TERMS["joint_pos"]]
    assert bias.abs().max().item() <= 0.05 and bias.std().item() > 0.01
    actions = small_actions(10)
    for step, action in enumerate(actions):
        clean_obs, *_ = clean.step(actions[step - 2] if step >= 2 else torch.zeros(N, 12))
        seen, *_ = corrupted.step(action)
        assert torch.allclose(seen["critic"], clean_obs["critic"], atol=1e-5)


def test_a_dropped_observation_repeats_the_previous_at_the_configured_rate():
    _, _, corrupted, seen = twins(obs_drop_prob=0.3)
    repeats = []
    for action in small_actions(40):
        before = seen["policy"]
        seen, *_ = corrupted.step(action)
        repeats.append(torch.all(without(seen["policy"] == before, "last_action", "command"), dim=1))
    assert torch.stack(repeats).float().mean().item() == pytest.approx(0.3, abs=0.05)


def test_latencies_and_bias_are_drawn_per_env_per_episode():
    _, _, corrupted, _ = twins(obs_latency_steps=(0, 3), action_latency_steps=(1, 2), bias={"all": 0.1})
    wrapper = corrupted
    assert set(wrapper.obs_latency.tolist()) == {0, 1, 2, 3} and set(wrapper.action_latency.tolist()) == {1, 2}
    bias, latency = wrapper.bias.clone(), wrapper.obs_latency.clone()
    corrupted.reset_envs([0, 1, 2])  # new episodes there, and nowhere else
    assert not torch.equal(wrapper.bias[:3], bias[:3]) and torch.equal(wrapper.bias[3:], bias[3:])
    assert torch.equal(wrapper.obs_latency[3:], latency[3:])


def test_bad_corruption_settings_are_refused_naming_the_field():
    with pytest.raises(
        ConfigError, match=r"sim.corruption.noise: unknown observation term 'gyroscope'; known: all, gyro"
    ):
        twins(noise={"gyroscope": 0.1})
    with pytest.raises(ConfigError, match=r"corruption.obs_latency_steps\[1\]: expected an integer, got 1.5"):
        from_dict(SimConfig, {"corruption": {"obs_latency_steps": [0, 1.5]}})
    with pytest.raises(ConfigError, match=r"obs_drop_prob: must be in \[0, 1\), got 1"):
        CorruptionConfig(obs_drop_prob=1.0)
    config = from_dict(SimConfig, {"corruption": {"action_latency_steps": [0, 2], "noise": {"all": 0.01}}})
    assert config.corruption.action_latency_steps == (0, 2) and config.corruption.enabled


def test_a_snapshot_continues_exactly_with_the_corruptions_own_state():
    """get_state / set_state carry every env's latencies, bias, histories and the random stream, so a resumed run
    sees what the uninterrupted one saw (they once held the simulator's state alone)."""
    _, _, corrupted, _ = twins(noise={"all": 0.1}, bias={"all": 0.1}, obs_latency_steps=(0, 2),
                               action_latency_steps=(0, 2))  # fmt: skip
    actions = small_actions(30)
    for action in actions[:10]:
        corrupted.step(action)
    snapshot = corrupted.get_state()
    first = [corrupted.step(action)[0]["policy"] for action in actions[10:]]
    corrupted.reset(seed=5)  # another state entirely, then back
    corrupted.set_state(snapshot)
    again = [corrupted.step(action)[0]["policy"] for action in actions[10:]]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    # the caller's actions are never written to (a new episode once zeroed the last one in place)
    assert all(torch.equal(a, b) for a, b in zip(actions, small_actions(30), strict=True))
