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
