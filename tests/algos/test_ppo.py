"""PPO details: time-outs are bootstrapped from the true final observation, terminations are not."""

import torch

from policyforge.algos.ppo import PPO, PPOConfig
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy
from policyforge.sims import SimConfig, make_env


class RecordingEnv:
    """A real VecEnv, recording the rewards it returns."""

    def __init__(self, env):
        self.env, self.rewards, self.truncated = env, [], []

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, action):
        result = self.env.step(action)
        self.rewards.append(result[1])
        self.truncated.append(result[3])
        return result


def test_time_outs_bootstrap_from_the_final_observation_value():
    env = RecordingEnv(make_env(SimConfig(task="pendulum-swingup", num_envs=4, task_options={"episode_seconds": 0.25})))
    policy = GaussianPolicy(3, 1, GaussianConfig(hidden=[8]))
    ppo = PPO(policy, 3, 4, PPOConfig(rollout_steps=12, scale_rewards=False, gamma=0.9), total_iterations=1)
    with torch.no_grad():  # a critic worth exactly 5 everywhere
        ppo.critic.net[-1].weight.zero_()
        ppo.critic.net[-1].bias.fill_(5.0)
    batch, _ = ppo._collect(env, env.reset(seed=0), lambda info: None)
    truncated = torch.stack(env.truncated)
    assert truncated.any() and batch["done"][truncated].all()
    expected = torch.stack(env.rewards) + 0.9 * 5.0 * truncated
    torch.testing.assert_close(batch["reward"], expected)


def test_probability_ratios_that_overflow_leave_the_policy_finite():
    """A narrow Gaussian whose std collapses within one update (RPD's distillation term as a log-likelihood, λ 5, std
    0.1, no KL stop: 2026-12-06) rescores its rollout's actions hundreds of nats likelier than when it sampled them:
    exp(log-ratio) overflows float32 and the update wrote NaN into the policy. The log-ratio is bounded before the
    exponential, so the update stays finite."""
    env = make_env(SimConfig(task="pendulum-swingup", num_envs=4))
    policy = GaussianPolicy(3, 1, GaussianConfig(hidden=[8]))
    ppo = PPO(policy, 3, 4, PPOConfig(rollout_steps=8, epochs=2, minibatches=1, target_kl=None), total_iterations=1)
    score = ppo._score

    def sharper(obs, chain):  # rescored inside the update (with gradients): 200 nats above the rollout's
        log_prob, entropy = score(obs, chain)
        return (log_prob + 200.0 if torch.is_grad_enabled() else log_prob), entropy

    ppo._score = sharper
    _, metrics = ppo.iterate(env, env.reset(seed=0), lambda info: None)
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    assert metrics["loss/clip_fraction"] == 1.0  # every ratio far outside the trust region, in both epochs
