"""Broken inputs and broken simulations raise clear errors naming the env and the cause."""

import mujoco
import numpy as np
import pytest
import torch

from policyforge.sims import SimConfig, SimulationError, make_env
from policyforge.sims.mujoco_env import MujocoVecEnv
from policyforge.sims.tasks.pendulum import PendulumConfig, PendulumSwingup


def test_nan_action_names_the_env():
    env = make_env(SimConfig(task="arm-reach", num_envs=4))
    action = torch.zeros(4, env.action_dim)
    action[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf in env 2"):
        env.step(action)


def test_wrong_action_shape_is_explained():
    env = make_env(SimConfig(task="pendulum-swingup", num_envs=3))
    with pytest.raises(ValueError, match=r"\[3, 1\], got \[3, 2\]"):
        env.step(torch.zeros(3, 2))


def test_nan_state_raises_with_env_index():
    env = make_env(SimConfig(task="quadruped-walk", num_envs=4))
    env.batch.bind("qvel")[1, 8] = np.nan
    with pytest.raises(SimulationError, match=r"env 1: non-finite or huge joint") as err:
        env.step(torch.zeros(4, 12))
    assert list(err.value.env_ids) == [1]


class BallPile(PendulumSwingup):
    """Fifty balls dropped on a floor with far too little arena memory for their contacts."""

    name = "ball-pile"

    @classmethod
    def load_model(cls, config):
        balls = "".join(
            f'<body pos="{0.05 * (i % 5)} {0.05 * (i // 5 % 5)} {0.1 + 0.05 * (i // 25)}"><freejoint/>'
            f'<geom type="sphere" size="0.03"/></body>'
            for i in range(50)
        )
        pendulum = '<body name="pole" pos="0 0 3"><joint name="hinge" axis="0 1 0"/><geom size=".1" mass="1"/></body>'
        return mujoco.MjModel.from_xml_string(
            f'<mujoco><size memory="50K"/><worldbody><geom type="plane" size="1 1 .1"/>{balls}{pendulum}'
            '</worldbody><actuator><motor joint="hinge"/></actuator>'
            '<sensor><jointpos name="angle" joint="hinge"/><jointvel name="angvel" joint="hinge"/></sensor></mujoco>'
        )

    def reset(self, sampler, n, xp):
        initial = super().reset(sampler, n, xp)
        qpos = xp.broadcast_to(self.model.qpos0, (n, self.model.nq)).copy()
        return initial._replace(qpos=qpos, qvel=xp.zeros((n, self.model.nv)))


def test_contact_buffer_overflow_raises():
    config = PendulumConfig()
    with pytest.raises(SimulationError, match="contact buffer overflow") as err:
        env = MujocoVecEnv(BallPile(BallPile.load_model(config), config), num_envs=2)
        for _ in range(50):
            env.step(torch.zeros(2, 1))
    assert list(err.value.env_ids) == [0, 1]
