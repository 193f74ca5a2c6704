"""The Franka's digital twin of a task with objects (`arm-instructed`): the scene drawn from a seed, observed as
the simulator observes it (the privileged `critic` observation a distilled student reads), and refused for the
families whose cubes move."""

from __future__ import annotations

import numpy as np
import pytest

from policyforge.real_robot.arm_adapter import ArmAdapter
from policyforge.real_robot.deploy import DeployError
from policyforge.real_robot.robot import RobotState
from policyforge.sims import SimConfig, make_env
from policyforge.sims.task import NumpySampler
from policyforge.sims.tasks import instructions as language

TOUCH = {"families": ["touch"], "instructions": "train"}


def test_the_twin_observes_the_scene_as_the_simulator_does():
    adapter = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=7)
    env = make_env(SimConfig(task="arm-instructed", num_envs=1, task_options=TOUCH))
    initial = adapter.task.reset(NumpySampler(np.random.default_rng(7)), 1, np)  # the same draw
    expected = env.reset_to(initial)["critic"][0].numpy()
    arm = initial.qpos[0, adapter.task.arm_qpos]
    obs = adapter.observation(RobotState(0.0, arm, np.zeros(7)), np.zeros(adapter.action_dim))
    assert obs.shape == (env.obs_shapes["critic"][0],) == (adapter.obs_dim,)
    np.testing.assert_allclose(obs, expected, atol=1e-5)
    cubes = obs[22:31].reshape(3, 3)
    instructed = cubes[int(initial.vars["object"][0])]
    np.testing.assert_allclose(adapter.goal, instructed + [0, 0, 0.01], atol=1e-6)  # the touch point
    assert adapter.success_distance == 0.03
    lines = adapter.scene_lines()
    text = lines[0].removeprefix("instruction: ").strip("'")
    assert language.parse(text)[:2] == (language.FAMILIES.index("touch"), int(initial.vars["object"][0]))
    assert "({:.3f}, {:.3f}, {:.3f})".format(*instructed) in lines[1]
    other = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=8)
    assert not np.allclose(other.goal, adapter.goal)  # another seed, another scene
    env.close()


def test_families_that_move_the_cubes_are_refused_naming_them():
    with pytest.raises(DeployError, match=r"families \['lift', 'push'\] move the cubes.*\['touch'\]"):
        ArmAdapter("arm-instructed", {"families": ["lift", "push", "touch"]}, np.zeros(3), obs_key="critic")


def test_a_reach_twin_is_unchanged_by_scenes():
    adapter = ArmAdapter("arm-reach", {}, np.array([0.5, 0.1, 0.3]))
    assert not adapter.has_scene and adapter.scene_lines() == []
    np.testing.assert_allclose(adapter.goal, [0.5, 0.1, 0.3])
