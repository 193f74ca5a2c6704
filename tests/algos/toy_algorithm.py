"""An algorithm added the way a user adds one: this module and its one registration line, no edit anywhere else
(tests/algos/test_algorithm_contract.py trains it through `policyforge train`, resumes it, and checks it learns).

Vanilla policy gradient (REINFORCE with reward-to-go, Williams 1992; the baseline is the batch mean): a few lines on
the policy contract only — the policy's input state stacks its histories, `sample` draws chains, `log_prob`
rescores them under the current weights — so it trains any policy class, knowing none.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from policyforge.algos.base import Algorithm, StepCallback
from policyforge.algos.registry import AlgoConfig, AlgorithmEntry, register_algorithm
from policyforge.config import check_in
from policyforge.policies.base import Obs, Policy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


@dataclasses.dataclass
class VanillaPGConfig(AlgoConfig):
    """Vanilla policy gradient (REINFORCE with reward-to-go and a batch-mean baseline)."""

    rollout_steps: int = 32
    """Decisions per environment per iteration (T)."""
    lr: float = 3e-3
    """Adam learning rate; one gradient step per iteration."""
    gamma: float = 0.9
    """Discount per decision of the reward-to-go."""

    def __post_init__(self) -> None:
        check_in(self.rollout_steps, "rollout_steps", "[1, 10000]")
        check_in(self.lr, "lr", "(0, 1)")
        check_in(self.gamma, "gamma", "[0, 1]")


class VanillaPG(Algorithm):
    """∇J ≈ mean over decisions of ∇log π(chain | obs) · (reward-to-go − its batch mean) / its batch std."""

    def __init__(self, policy: Policy, num_envs: int, config: VanillaPGConfig):
        self.policy, self.config = policy, config
        self.inputs = policy.input_state(num_envs)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)

    def steps_per_iteration(self, env: VecEnv) -> int:
        return env.num_envs * self.config.rollout_steps * self.policy.act_steps

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        inputs, chains, rewards, dones = [], [], [], []
        with torch.no_grad():
            for _ in range(self.config.rollout_steps):
                policy_obs = self.inputs.push(obs)
                sample = self.policy.sample(policy_obs)
                reward, done = torch.zeros(env.num_envs), torch.zeros(env.num_envs, dtype=torch.bool)
                for i in range(self.policy.act_steps):  # the executed part of the chunk, up to an episode end
                    obs, step_reward, terminated, truncated, info = env.step(sample.action[:, i])
                    on_step(info)
                    reward += step_reward * ~done
                    done |= terminated | truncated
                    self.inputs.restart(terminated | truncated)
                    if i < self.policy.act_steps - 1:
                        self.inputs.push(obs)
                inputs.append({k: policy_obs[k] for k in self.policy.obs_keys})
                chains.append(sample.chain)
                rewards.append(reward)
                dones.append(done)
        to_go, returns = torch.zeros(env.num_envs), []
        for reward, done in zip(reversed(rewards), reversed(dones), strict=True):  # [T, N], the rollout's end as 0
            to_go = reward + self.config.gamma * to_go * ~done
            returns.insert(0, to_go)
        advantage = torch.stack(returns).flatten()
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        batch = {k: torch.cat([step[k] for step in inputs]) for k in inputs[0]}  # [T·N, ...]
        self.policy.update_normalizer(batch)
        log_prob, _ = self.policy.log_prob(batch, _concat(chains))
        loss = -(log_prob * advantage).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return obs, {
            "loss/policy_gradient": loss.item(),
            "train/reward_per_decision": torch.stack(rewards).mean().item(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "inputs": self.inputs.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.inputs.load_state_dict(state["inputs"])


def _concat(chains: list[Any]) -> Any:
    """The chains of T decisions as one batch [T·N, ...] (a tensor, or a dict of tensors)."""
    if isinstance(chains[0], dict):
        return {k: torch.cat([chain[k] for chain in chains]) for k in chains[0]}
    return torch.cat(chains)


def construct(config: RunConfig, env: VecEnv, policy: Policy) -> VanillaPG:
    return VanillaPG(policy, env.num_envs, config.algo)


register_algorithm("toy-vpg", VanillaPGConfig, AlgorithmEntry(construct))
