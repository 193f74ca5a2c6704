"""Scripted experts solve the arm tasks: proof the tasks are feasible, and a source of demonstrations."""

import numpy as np
import pytest

from policyforge.data.experts import EXPERTS
from policyforge.sims import SimConfig, make_env


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


def test_action_noise_degrades_the_expert():
    clean, _ = run_expert("arm-lift-cube", 32)
    noisy, _ = run_expert("arm-lift-cube", 32, action_noise=1.0)
    assert noisy < clean - 0.2
