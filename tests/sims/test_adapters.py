"""Adapters out: the single-env adapter passes gymnasium's and Stable-Baselines3's environment checkers (SB3
has none for VecEnvs), `SB3VecEnv` behaves as SB3's DummyVecEnv over Monitor-wrapped envs (`indices`,
`get_attr`/`set_attr`, rendering, `evaluate_policy`), and SB3 trains on them unchanged, with an asymmetric
critic too."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from policyforge.sims import TASKS, SimConfig, make_env
from policyforge.sims.adapters import AsymmetricActorCriticPolicy, GymnasiumEnv, GymnasiumVectorEnv, SB3VecEnv


def sb3_env(task="pendulum-swingup", num_envs=4, episode_seconds=2.0, **adapter_options):
    return SB3VecEnv(
        make_env(SimConfig(task=task, num_envs=num_envs, task_options={"episode_seconds": episode_seconds})),
        **adapter_options,
    )


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


def test_env_method_reset_and_render_act_on_the_selected_envs_only():
    venv = sb3_env()
    venv.reset()
    for _ in range(3):
        obs, *_ = venv.step(np.full((4, 1), 0.5, np.float32))
    out = venv.env_method("reset", indices=[0])
    assert len(out) == 1 and out[0][1] == {} and out[0][0].shape == venv.observation_space.shape
    assert venv.env.episodes.lengths.tolist() == [0, 3, 3, 3], "only env 0 starts a new episode"
    assert not np.allclose(out[0][0], obs[0])
    assert [o.shape for o, _ in venv.env_method("reset", indices=2)] == [(3,)]
    frames = venv.env_method("render", indices=[1, 3])
    assert len(frames) == 2 and all(f.shape == (240, 320, 3) and f.dtype == np.uint8 for f in frames)
    assert not np.array_equal(frames[0], frames[1])
    with pytest.raises(ValueError, match=r"env ids \[7\] are out of range"):
        venv.env_method("reset", indices=[7])


def test_attributes_are_per_env_where_they_are_and_batch_level_ones_refuse_a_subset():
    venv = sb3_env(num_envs=3, episode_seconds=5 * TASKS["pendulum-swingup"].config_class().control_dt)
    venv.reset()
    for _ in range(7):
        venv.step(np.zeros((3, 1), np.float32))
    venv.env_method("reset", indices=[1])
    for _ in range(3):
        venv.step(np.zeros((3, 1), np.float32))
    assert venv.get_attr("episode_lengths") == [[5, 5], [5], [5, 5]]  # env 1 restarted at step 7
    assert venv.env_method("get_total_steps", indices=[0, 2]) == [10, 10]
    assert venv.get_attr("render_mode", indices=[0, 2]) == ["rgb_array", "rgb_array"]
    with pytest.raises(ValueError, match="share it, so it applies to all envs"):
        venv.set_attr("render_mode", None, indices=[1])
    with pytest.raises(ValueError, match="per env are the methods reset, render"):
        venv.env_method("get_state", indices=0)
    venv.set_attr("gain", 2.5)
    assert venv.get_attr("gain", indices=[1, 2]) == [2.5, 2.5] and venv.env.gain == 2.5


def test_render_tiles_a_chosen_subset_at_the_control_rate():
    venv = sb3_env(num_envs=6)
    venv.reset()
    assert venv.metadata["render_fps"] == round(1 / venv.env.control_dt)
    assert len(venv.get_images()) == 4 and venv.render().shape == (480, 640, 3), "the first 4 envs, 2 x 2"
    assert venv.render(indices=[5]).shape == (240, 320, 3) and venv.render_indices == [0, 1, 2, 3]
    vector = GymnasiumVectorEnv(venv.env, render_envs=2)
    assert len(vector.render()) == 2 and vector.metadata["render_fps"] == venv.metadata["render_fps"]


def test_evaluate_policy_reads_the_monitor_statistics_without_warning():
    venv = sb3_env(num_envs=2, episode_seconds=0.2)
    assert venv.env_is_wrapped(Monitor) == [True, True] and venv.env_is_wrapped(gym.Wrapper, indices=0) == [True]
    assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [False, False]
    model = PPO("MlpPolicy", venv, n_steps=8, seed=0, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returns, lengths = evaluate_policy(model, venv, n_eval_episodes=4, return_episode_rewards=True)
    assert not [w for w in caught if "Monitor" in str(w.message)], [str(w.message) for w in caught]
    assert lengths == [venv.env.episode_steps] * 4 and len(returns) == 4
    assert sorted(returns) == sorted(r for history in venv.get_attr("episode_returns") for r in history)


def test_asymmetric_critic_reads_the_privileged_observation_and_the_actor_does_not(tmp_path):
    venv = sb3_env("arm-push-cube", num_envs=4, critic_key="critic")
    policy_dim, critic_dim = venv.env.obs_shapes["policy"][0], venv.env.obs_shapes["critic"][0]
    assert critic_dim > policy_dim and set(venv.observation_space.spaces) == {"policy", "critic"}
    model = PPO(AsymmetricActorCriticPolicy, venv, n_steps=16, batch_size=32, n_epochs=2, seed=0, device="cpu")
    policy = model.policy
    assert policy.mlp_extractor.policy_net[0].in_features == policy_dim
    assert policy.mlp_extractor.value_net[0].in_features == critic_dim
    before = [p.detach().clone() for p in policy.parameters()]
    model.learn(total_timesteps=128)  # two rollouts, two updates
    assert model.num_timesteps == 128
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    obs = policy.obs_to_tensor(venv.reset())[0]
    shifted_critic = {**obs, "critic": obs["critic"] + 1.0}
    shifted_policy = {**obs, "policy": obs["policy"] + 1.0}
    with torch.no_grad():
        mean = policy.get_distribution(obs).distribution.mean
        value = policy.predict_values(obs)
        torch.testing.assert_close(policy.get_distribution(shifted_critic).distribution.mean, mean, rtol=0, atol=0)
        torch.testing.assert_close(policy.predict_values(shifted_policy), value, rtol=0, atol=0)
        assert not torch.allclose(policy.predict_values(shifted_critic), value)
        assert not torch.allclose(policy.get_distribution(shifted_policy).distribution.mean, mean)
    model.save(tmp_path / "model.zip")
    loaded = PPO.load(tmp_path / "model.zip", env=venv, device="cpu")
    assert isinstance(loaded.policy, AsymmetricActorCriticPolicy)
    torch.testing.assert_close(loaded.policy.predict_values(obs), value)


def test_asymmetric_policy_names_the_adapter_option_on_a_plain_box_observation():
    with pytest.raises(ValueError, match=r"SB3VecEnv\(env, critic_key='critic'\)"):
        PPO(AsymmetricActorCriticPolicy, sb3_env(num_envs=2), n_steps=8, device="cpu")
