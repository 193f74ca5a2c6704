"""bench bc-failures' sampler rows: a flow policy's chain tried from each x_0 std and within a ReinFlow bound."""

import pytest

from policyforge.bench.bc_failures import sampler_variants
from policyforge.policies.base import EnvSpec
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.flow import FlowConfig
from policyforge.sims import make_env
from policyforge.sims.config import SimConfig


def _env_and_flow(chain_noise: str):
    env = make_env(SimConfig(task="pendulum-swingup", num_envs=3, task_options={"episode_seconds": 0.3}), seed=0)
    config = FlowConfig(chunk=ChunkConfig(horizon=2, act_steps=2), steps=3, chain_noise=chain_noise)
    policy = config.build(EnvSpec(env.obs_shapes, env.action_dim))
    policy.act = lambda obs: policy.sample(obs).action
    return env, policy


def test_each_start_std_is_tried_within_the_reinflow_bound():
    env, policy = _env_and_flow("reinflow")
    rows = sampler_variants(env, policy, seed=0, initial_noises=[1.0, 0.0], reinflow_std=[0.01, 0.02])
    assert list(rows) == [
        "sample, x_0 ~ N(0, 1²), ReinFlow std [0.01, 0.02]",
        "sample, x_0 ~ N(0, 0²), ReinFlow std [0.01, 0.02]",
    ]
    assert all(0.0 <= rate <= 1.0 for rate in rows.values())
    assert policy.config.initial_noise == 0.0 and (policy.noise_net.low, policy.noise_net.high) == (0.01, 0.02)
    assert sampler_variants(env, policy, seed=0, initial_noises=[], reinflow_std=None) == {}


def test_a_reinflow_bound_on_a_flow_sde_chain_is_refused():
    env, policy = _env_and_flow("sde")
    with pytest.raises(SystemExit, match="Flow-SDE"):
        sampler_variants(env, policy, seed=0, initial_noises=[0.0], reinflow_std=[0.01, 0.02])
