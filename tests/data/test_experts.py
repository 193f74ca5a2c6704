"""Scripted experts solve the arm tasks: proof the tasks are feasible, and a source of demonstrations."""

import numpy as np
import pytest

from policyforge.data.experts import CLOSED, EXPERTS, OPEN, ActionNoise
from policyforge.sims import SimConfig, make_env
from policyforge.sims.tasks.arm_tasks import ArmReach


def run_expert(task: str, num_envs: int, seed: int = 0, **expert_options) -> tuple[float, float]:
    env = make_env(SimConfig(task=task, num_envs=num_envs), seed=seed)
    expert = EXPERTS[type(env.task)](env.task, num_envs, **expert_options)
    at_end, once = [], []
    while len(at_end) < num_envs:
        _, _, _, _, info = env.step(expert.act(env.state))
        done = info["episode"]["done"].numpy()
        if done.any():
            at_end += list(info["episode"]["success"].numpy()[done])
            once += list(info["episode"]["success_once"].numpy()[done])
            expert.reset(np.flatnonzero(done))
    return float(np.mean(at_end)), float(np.mean(once))


@pytest.mark.parametrize("task,threshold", [("arm-reach", 1.0), ("arm-push-cube", 0.9), ("arm-lift-cube", 0.9)])
def test_expert_succeeds(task, threshold):
    at_end, _ = run_expert(task, 32)
    assert at_end >= threshold


@pytest.mark.parametrize("family", ["lift", "push", "place", "touch"])
def test_instructed_expert_follows_every_family(family):
    """Measured (`policyforge collect arm-instructed families=[F] instructions=all --episodes 256 --envs 64`):
    256/256 episodes of every family succeed at their last step; with `--noise 0.3 --hesitation 0.2` (64
    episodes each) lift 98%, push 94%, place 97%, touch 100%."""
    options = {"families": [family], "instructions": "all"}
    env = make_env(SimConfig(task="arm-instructed", num_envs=16, task_options=options), seed=0)
    expert = EXPERTS[type(env.task)](env.task, 16)
    for _ in range(env.episode_steps):
        _, _, _, _, info = env.step(expert.act(env.state))
    assert info["episode"]["done"].all() and info["episode"]["success"].float().mean() >= 0.9


def test_action_noise_degrades_the_expert():
    clean, _ = run_expert("arm-lift-cube", 32)
    noisy, _ = run_expert("arm-lift-cube", 32, action_noise=1.0)
    assert noisy < clean - 0.2


def test_uncorrelated_noise_is_a_fresh_draw_each_step():
    noise, rng = ActionNoise(0.5, 0.0, 3, np.random.default_rng(4)), np.random.default_rng(4)
    for _ in range(5):
        np.testing.assert_array_equal(noise(np.zeros((3, 5))), 0.5 * rng.standard_normal((3, 5)))


def test_correlated_noise_keeps_its_spread_pushes_one_way_and_restarts_per_episode():
    noise = ActionNoise(2.0, 0.9, 4000, np.random.default_rng(0))
    draws = np.stack([noise(np.zeros((4000, 1)))[:, 0] for _ in range(30)])  # [T, N]
    assert abs(draws.std() - 2.0) < 0.05
    lag_one = np.mean(draws[1:] * draws[:-1]) / draws.var()
    assert abs(lag_one - 0.9) < 0.02
    noise.reset(np.arange(2000))
    step = noise(np.zeros((4000, 1)))[:, 0]
    restarted = np.mean(step[:2000] * draws[-1, :2000]) / draws.var()
    carried = np.mean(step[2000:] * draws[-1, 2000:]) / draws.var()
    assert abs(restarted) < 0.1 and abs(carried - 0.9) < 0.05


def test_correlated_noise_takes_the_arm_away_from_the_task_where_jitter_of_the_same_spread_does_not():
    """Measured (16 envs, std 2): the TCP's median distance from the instructed cube over an episode is 0.53 m with
    correlation 0.95 (90th percentile 0.87), 0.15 m with independent noise (std 3; 0.07 m with 0.6 and no noise)."""

    def distance(correlation: float) -> float:
        env = make_env(SimConfig(task="arm-instructed", num_envs=16), seed=0)
        expert = EXPERTS[type(env.task)](env.task, 16, action_noise=2.0, noise_correlation=correlation)
        distances = []
        for _ in range(env.episode_steps):
            env.step(expert.act(env.state))
            distances.append(np.linalg.norm(env.task.tcp_pos(env.state) - env.task.cube_pos(env.state), axis=1))
        return float(np.median(distances))

    jitter, wander = distance(0.0), distance(0.95)
    assert wander > 0.4 and wander > 2 * jitter, (jitter, wander)


def rollout(task: str, num_envs: int, **expert_options) -> tuple[np.ndarray, np.ndarray]:
    """One episode of every env: actions [T, N, 5] and the step at which each env first succeeded [N]."""
    env = make_env(SimConfig(task=task, num_envs=num_envs), seed=0)
    expert = EXPERTS[type(env.task)](env.task, num_envs, **expert_options)
    actions, first_success = [], np.full(num_envs, env.episode_steps + 1)
    for step in range(env.episode_steps):
        actions.append(expert.act(env.state))
        _, _, _, _, info = env.step(actions[-1])
        first_success = np.where(info["success"].numpy(), np.minimum(first_success, step + 1), first_success)
    return np.stack(actions), first_success


def test_hesitation_pauses_and_slows_the_expert():
    hesitation, (shortest, longest) = 0.3, EXPERTS[ArmReach].PAUSE_STEPS
    clean_actions, clean_steps = rollout("arm-reach", 16)
    actions, steps = rollout("arm-reach", 16, hesitation=hesitation)
    paused = np.all(actions[..., :4] == 0, axis=-1)  # [T, N]
    assert not np.all(clean_actions[..., :4] == 0, axis=-1).any()
    # a pause starts with probability p on each unpaused step and lasts (2 + 6) / 2 steps on average
    mean_pause = (shortest + longest) / 2
    expected = hesitation * mean_pause / (hesitation * mean_pause + 1 - hesitation)
    assert abs(paused.mean() - expected) < 0.08
    assert steps.mean() > 1.3 * clean_steps.mean()


def test_a_pause_holds_the_gripper_and_reset_ends_it():
    env = make_env(SimConfig(task="arm-lift-cube", num_envs=8), seed=0)
    expert = EXPERTS[type(env.task)](env.task, 8, hesitation=0.5, seed=1)
    previous, paused_steps = None, 0
    for _ in range(env.episode_steps):
        action = expert.act(env.state)
        paused = np.all(action[:, :4] == 0, axis=1)
        if previous is not None:
            assert np.array_equal(action[paused, 4], previous[paused, 4])
        previous, paused_steps = action, paused_steps + paused.sum()
        env.step(action)
    assert paused_steps > 0 and (previous[:, 4] == CLOSED).any()  # episodes end holding the cube
    expert.reset(np.arange(8))
    env.reset(seed=0)
    assert not expert.pause_left.any()
    assert np.all(expert.act(env.state)[:, 4] == OPEN)  # a new episode's first pause holds nothing from the last


def test_hesitation_is_a_probability():
    env = make_env(SimConfig(task="arm-reach", num_envs=1))
    with pytest.raises(ValueError, match="hesitation"):
        EXPERTS[type(env.task)](env.task, 1, hesitation=1.0)
