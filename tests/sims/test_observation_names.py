"""Every task names the features of its policy observation (exported policies' descriptions list them): one
name per feature, in order, checked against what `observe` returns."""

import numpy as np
import pytest

from policyforge.sims import TASKS, SimConfig, make_env


@pytest.mark.parametrize(
    ("task", "options"),
    [(name, {}) for name in TASKS]
    + [("arm-reach", {"control_mode": mode}) for mode in ("joint_delta", "ee_delta_pose")],
)
def test_observation_names_name_every_feature_once(task, options):
    env = make_env(SimConfig(task=task, num_envs=2, task_options=options))
    names = env.task.observation_names()
    assert len(names) == env.obs_shapes["policy"][0] and len(set(names)) == len(names)
    assert all(isinstance(name, str) and name for name in names)
    assert env.task.action_meaning()  # what an action commands, in words
    env.close()


def column(env, obs, name: str) -> np.ndarray:
    return obs["policy"][:, env.task.observation_names().index(name)].numpy()


def test_named_features_hold_what_their_names_say():
    with make_env(SimConfig(task="arm-reach", num_envs=3), seed=1) as env:
        obs = env.reset(1)
        goal, tcp = env.vars["goal"], env.task.tcp_pos(env.state)
        for i, axis in enumerate("xyz"):
            assert np.allclose(column(env, obs, f"goal.{axis}"), goal[:, i], atol=1e-6)
            assert np.allclose(column(env, obs, f"goal-tcp.{axis}"), goal[:, i] - tcp[:, i], atol=1e-6)
    with make_env(SimConfig(task="quadruped-walk", num_envs=3), seed=1) as env:
        obs = env.reset(1)
        command = env.vars["command"]
        for i, name in enumerate(("vx", "vy", "yaw_rate")):
            assert np.allclose(column(env, obs, f"command.{name}"), command[:, i], atol=1e-6)
        action = np.linspace(-1, 1, 12)[None].repeat(3, 0)
        obs = env.step(action)[0]
        assert np.allclose(column(env, obs, "last_action.FL_thigh"), action[:, 4], atol=1e-6)
