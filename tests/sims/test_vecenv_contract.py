"""The VecEnv contract, checked on every task and on the gymnasium backend."""

import numpy as np
import pytest
import torch

from policyforge.sims import TASKS, SimConfig, make_env
from policyforge.sims.vec_env import OBS_DTYPES

N = 4
ALL_TASKS = [*TASKS, "gym:InvertedPendulum-v5"]


def short_episodes(task: str, steps: int = 6) -> dict:
    """task_options that end episodes after `steps` control steps."""
    if task.startswith("gym:"):
        return {"max_episode_steps": steps}
    control_dt = TASKS[task].config_class().control_dt
    return {"episode_seconds": steps * control_dt}


def make(task: str, num_envs: int = N, seed: int = 0, **options):
    return make_env(SimConfig(task=task, num_envs=num_envs, task_options=options), seed=seed)


def zero_action(env) -> torch.Tensor:
    return torch.zeros(env.num_envs, env.action_dim)


@pytest.mark.parametrize("task", ALL_TASKS)
def test_shapes_and_dtypes(task):
    env = make(task)
    obs = env.reset(seed=1)
    assert set(obs) >= {"policy", "critic"}
    for key, value in obs.items():
        assert value.dtype == OBS_DTYPES.get(key, torch.float32) and tuple(value.shape) == (N, *env.obs_shapes[key])
    obs, reward, terminated, truncated, info = env.step(torch.rand(N, env.action_dim) * 2 - 1)
    assert reward.shape == (N,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
    assert terminated.shape == truncated.shape == (N,)
    assert {k: tuple(v.shape) for k, v in info["final_obs"].items()} == {k: tuple(v.shape) for k, v in obs.items()}
    assert set(info["episode"]) == {"done", "return", "length", "success", "success_once"}
    assert torch.isfinite(reward).all()


@pytest.mark.parametrize("task", ALL_TASKS)
def test_final_observation_is_the_true_last_one(task):
    """At a time-out, info["final_obs"] equals what a longer episode observes at that step; obs is a new episode."""
    steps = 5
    short, long = make(task, seed=3, **short_episodes(task, steps)), make(task, seed=3, **short_episodes(task, 50))
    short.reset(seed=3), long.reset(seed=3)
    generator = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        action = 0.3 * (torch.rand(N, short.action_dim, generator=generator) * 2 - 1)
        obs_s, _, term_s, trunc_s, info_s = short.step(action)
        obs_l, _, term_l, _, _ = long.step(action)
        if term_l.any():
            pytest.skip(f"{task} terminated early under small random actions")
        if step < steps:
            assert not trunc_s.any() and torch.equal(obs_s["policy"], obs_l["policy"])
    assert trunc_s.all() and not term_s.any(), "a time-out is truncation, not termination"
    assert info_s["episode"]["done"].all() and (info_s["episode"]["length"] == steps).all()
    for key in obs_l:
        assert torch.allclose(info_s["final_obs"][key], obs_l[key]), key
    assert not torch.allclose(obs_s["policy"], obs_l["policy"]), "the returned obs must start the next episode"


@pytest.mark.parametrize("task", ALL_TASKS)
def test_same_seed_same_trajectory(task):
    def rollout(seed):
        env = make(task, seed=seed)
        obs = env.reset(seed=seed)
        generator = torch.Generator().manual_seed(7)
        trace = [obs["policy"]]
        for _ in range(10):
            obs, reward, *_ = env.step(torch.rand(N, env.action_dim, generator=generator) * 2 - 1)
            trace += [obs["policy"], reward[:, None]]
        return torch.cat(trace, dim=1)

    first, again, other = rollout(11), rollout(11), rollout(12)
    assert torch.equal(first, again)
    assert not torch.allclose(first, other)


@pytest.mark.parametrize("task", ALL_TASKS)
def test_reset_envs_starts_new_episodes_in_those_envs_only(task):
    env = make(task, **short_episodes(task, 6))
    env.reset(seed=0)
    for _ in range(3):
        before, _, terminated, *_ = env.step(0.1 * torch.ones(N, env.action_dim))
    if terminated.any():
        pytest.skip(f"{task} terminated early under small actions")
    obs = env.reset_envs([1, 3])
    assert {k: tuple(v.shape) for k, v in obs.items()} == {k: tuple(v.shape) for k, v in before.items()}
    kept, fresh = [0, 2], [1, 3]
    assert torch.equal(obs["policy"][kept], before["policy"][kept]), "the other envs continue untouched"
    assert not torch.allclose(obs["policy"][fresh], before["policy"][fresh])
    ended = []
    for _ in range(6):  # the episodes of envs 0 and 2 end at step 6, the restarted ones 3 steps later
        *_, info = env.step(0.1 * torch.ones(N, env.action_dim))
        ended.append(info["episode"]["done"].tolist())
    assert ended[2] == [True, False, True, False]
    assert ended[5] == [False, True, False, True] and info["episode"]["length"][fresh].tolist() == [6, 6]
    with pytest.raises(ValueError, match=r"env ids \[4\] are out of range"):
        env.reset_envs([0, 4])


@pytest.mark.parametrize("task", list(TASKS))
def test_episode_statistics(task):
    env = make(task, **short_episodes(task, 4))
    env.reset(seed=0)
    total = torch.zeros(N)
    for _ in range(4):
        _, reward, terminated, _, info = env.step(zero_action(env))
        total += reward
        if terminated.any():
            pytest.skip("terminated under zero actions")
    episode = info["episode"]
    assert episode["done"].all()
    torch.testing.assert_close(episode["return"], total)
    assert (episode["length"] == 4).all()


def test_quadruped_fall_is_termination_not_truncation():
    env = make("quadruped-walk", num_envs=2, min_height=0.25)
    env.reset(seed=0)
    collapse = torch.tensor([[0.0, 1.0, -1.0] * 4, [0.0] * 12])  # env 0 folds its legs, env 1 stands
    for _ in range(100):
        _, _, terminated, truncated, info = env.step(collapse)
        if terminated[0]:
            break
    assert terminated[0] and not truncated[0] and not terminated[1], "the folded robot must count as fallen"
    assert info["episode"]["done"][0] and not info["episode"]["done"][1]
    final_height = info["final_obs"]["critic"][0, 48]
    assert final_height < 0.25, "final_obs is the fallen state, before the reset"


def test_actions_are_clipped_not_rejected():
    env = make("pendulum-swingup", num_envs=2)
    env.reset(seed=0)
    env.step(torch.tensor([[5.0], [-5.0]]))
    np.testing.assert_allclose(env.phys["qpos"].shape, (2, 1))
    np.testing.assert_allclose(env.batch.bind("ctrl")[:, 0], [1.0, -1.0])


def test_observations_reach_torch_without_copies():
    from policyforge.sims.vec_env import to_torch

    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = to_torch(array, torch.device("cpu"))
    assert tensor.data_ptr() == array.ctypes.data, "numpy -> torch on the CPU must share memory"


def test_every_way_of_starting_episodes_goes_through_a_wrappers_started_hook():
    """A wrapper's per-episode state is reset in one place (`VecEnvWrapper.started`): `reset`, `reset_to` and
    `reset_envs` all call it, naming the envs that start (the bug class behind wrappers that forgot `reset_to`)."""
    from policyforge.sims.task import NumpySampler
    from policyforge.sims.wrapper import VecEnvWrapper

    class Recording(VecEnvWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.calls: list = []

        def started(self, obs, env_ids):
            self.calls.append(None if env_ids is None else env_ids.tolist())
            return {**obs, "policy": obs["policy"] + 1.0}

    inner = make_env(SimConfig(task="pendulum-swingup", num_envs=3, num_threads=1), seed=0)
    env = Recording(inner)
    obs = env.reset(seed=0)
    initial = inner.task.reset(NumpySampler(np.random.default_rng(1)), 3, np)
    env.reset_to(initial)
    env.reset_envs([2, 0])
    assert env.calls == [None, None, [2, 0]]
    assert torch.equal(obs["policy"], inner.reset(seed=0)["policy"] + 1.0)  # what the hook returns is the obs
