"""Adapters out pass gymnasium's and Stable-Baselines3's own checkers, and SB3 trains on them unchanged."""

import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from policyforge.sims import SimConfig, make_env
from policyforge.sims.adapters import GymnasiumEnv, GymnasiumVectorEnv, SB3VecEnv


@pytest.mark.parametrize("task", ["pendulum-swingup", "arm-push-cube", "quadruped-walk", "gym:HalfCheetah-v5"])
def test_single_env_passes_gymnasium_and_sb3_checkers(task):
    env = GymnasiumEnv(make_env(SimConfig(task=task, num_envs=1)), render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(infinity|spec).*")
        gymnasium_check_env(env, skip_render_check=False)
        sb3_check_env(env)
    env.close()


def test_vector_env_reports_final_observations_same_step():
    vec = GymnasiumVectorEnv(
        make_env(SimConfig(task="pendulum-swingup", num_envs=3, task_options={"episode_seconds": 0.1}))
    )
    obs, _ = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)
    _, _, terminated, truncated, infos = vec.step(vec.action_space.sample())
    assert not truncated.any() and "final_obs" not in infos
    obs, _, terminated, truncated, infos = vec.step(np.zeros((3, 1), np.float32))
    assert truncated.all() and not terminated.any()
    assert infos["_final_obs"].all() and all(o.shape == (3,) for o in infos["final_obs"])
    assert not np.allclose(np.stack(infos["final_obs"]), obs)
    assert (infos["episode"]["l"] == 2).all()
    vec.close()


def test_sb3_ppo_trains_through_the_adapter():
    torch.manual_seed(0)
    venv = SB3VecEnv(make_env(SimConfig(task="pendulum-swingup", num_envs=8, task_options={"episode_seconds": 2.0})))
    model = PPO("MlpPolicy", venv, n_steps=40, batch_size=80, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=960)
    assert model.num_timesteps >= 960
    assert len(model.ep_info_buffer) >= 16, "SB3 read the episode statistics of finished episodes"
    assert all(info["l"] == 40 for info in model.ep_info_buffer)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_sb3_infos_carry_terminal_observation_and_truncation_flag():
    venv = SB3VecEnv(make_env(SimConfig(task="arm-reach", num_envs=2, task_options={"episode_seconds": 0.08})))
    venv.reset()
    venv.step(np.zeros((2, 5)))
    obs, _, dones, infos = venv.step(np.zeros((2, 5)))
    assert dones.all()
    for info in infos:
        assert info["TimeLimit.truncated"] and info["terminal_observation"].shape == obs.shape[1:]
        assert "is_success" in info and info["episode"]["l"] == 2
