"""Learning tests with small budgets and thresholds that a broken algorithm (or a random policy) cannot pass."""

import dataclasses

import pytest
import torch

from policyforge.algos.evaluate import evaluate
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import load
from policyforge.policies.base import Policy, Sample
from policyforge.sims import make_env

pytestmark = pytest.mark.slow


def train(tmp_path, recipe: str, *overrides: str) -> Runner:
    quiet = ["runner.video=none", "runner.tensorboard=false", "runner.eval_every_steps=0"]
    config = load(RunConfig, f"configs/{recipe}", [f"out_dir={tmp_path}", *quiet, *overrides])
    runner = Runner.start(config)
    runner.summary = runner.train()
    return runner


class RandomPolicy(Policy):
    """Uniform random actions: the score a trained policy must beat (evaluation only)."""

    def __init__(self, action_dim):
        super().__init__()
        self.action_dim = action_dim

    def sample(self, obs, noise_scale=1.0):
        action = torch.rand(len(obs["policy"]), 1, self.action_dim) * 2 - 1
        return Sample(action, action, torch.zeros(len(action)))

    def step_log_probs(self, obs, chain):
        raise NotImplementedError("a random policy is only evaluated")

    def bc_loss(self, obs, actions):
        raise NotImplementedError("a random policy is only evaluated")

    def example_obs(self, batch):
        raise NotImplementedError("a random policy is only evaluated")


def random_policy_score(config: RunConfig) -> dict:
    env = make_env(dataclasses.replace(config.sim, num_envs=16), seed=123)
    return evaluate(RandomPolicy(env.action_dim), env, seed=123)


def test_ppo_swings_the_pendulum_up(tmp_path):
    runner = train(tmp_path, "pendulum-swingup-ppo.yaml", "runner.total_env_steps=220000")
    assert runner.summary["eval/success"] >= 0.8 and runner.summary["eval/return"] > 140
    random = random_policy_score(runner.config)
    assert random["eval/success"] < 0.2 and random["eval/return"] < 100


def test_ppo_reaches_arm_goals(tmp_path):
    runner = train(tmp_path, "arm-reach-ppo.yaml", "runner.total_env_steps=120000")
    assert runner.summary["eval/success"] >= 0.9
    random = random_policy_score(runner.config)
    assert random["eval/success"] < 0.2
    # evaluation reports each reward term averaged over episode steps: the trained arm is much nearer its goals
    assert runner.summary["eval/terms/distance"] < 0.5 * random["eval/terms/distance"]


def test_sac_swings_the_pendulum_up(tmp_path):
    runner = train(tmp_path, "pendulum-swingup-sac.yaml", "runner.total_env_steps=30000")
    assert runner.summary["eval/success"] >= 0.75 and runner.summary["eval/return"] > 140
