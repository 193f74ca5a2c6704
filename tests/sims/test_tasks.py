"""Robot models match their real robots' public specifications, and every task can be solved."""

import mujoco
import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims import SimConfig, make_env, make_task
from policyforge.sims.tasks.arm_base import HOME_QPOS
from policyforge.sims.tasks.quadruped import JOINT_NAMES

# Franka Emika Panda: modified-DH rows (a, d, alpha) and joint limits from Franka's documentation
PANDA_DH = [(0, 0.333, 0), (0, 0, -np.pi / 2), (0, 0.316, np.pi / 2), (0.0825, 0, np.pi / 2),
            (-0.0825, 0.384, -np.pi / 2), (0, 0, np.pi / 2), (0.088, 0, np.pi / 2), (0, 0.107, 0)]  # fmt: skip
PANDA_LIMITS = [(-2.8973, 2.8973), (-1.7628, 1.7628), (-2.8973, 2.8973), (-3.0718, -0.0698),
                (-2.8973, 2.8973), (-0.0175, 3.7525), (-2.8973, 2.8973)]  # fmt: skip


def craig_dh(a, d, alpha, q):
    ca, sa, cq, sq = np.cos(alpha), np.sin(alpha), np.cos(q), np.sin(q)
    return np.array([[cq, -sq, 0, a], [sq * ca, cq * ca, -sa, -d * sa], [sq * sa, cq * sa, ca, d * ca], [0, 0, 0, 1]])


def test_panda_kinematics_match_the_published_dh_table():
    model = make_task("arm-reach").model
    data = mujoco.MjData(model)
    np.testing.assert_allclose(model.jnt_range[:7], PANDA_LIMITS)
    for q in np.random.default_rng(0).uniform(*np.array(PANDA_LIMITS).T, size=(20, 7)):
        data.qpos[:7] = q
        mujoco.mj_kinematics(model, data)
        flange = np.eye(4)
        for row, angle in zip(PANDA_DH, [*q, 0.0], strict=True):
            flange = flange @ craig_dh(*row, angle)
        np.testing.assert_allclose(data.body("hand").xpos, flange[:3, 3], atol=1e-9)


def test_go2_dimensions_masses_and_motor_order():
    model = make_task("quadruped-walk").model
    assert [model.actuator(i).name + "_joint" for i in range(model.nu)] == list(JOINT_NAMES)
    assert [model.joint(i).name for i in range(1, model.njnt)] == list(JOINT_NAMES)
    assert model.body_subtreemass[model.body("trunk").id] == pytest.approx(15.0, abs=0.1)
    assert model.body("FR_hip").pos == pytest.approx([0.1934, -0.0465, 0])
    assert model.body("FR_calf").pos == pytest.approx([0, 0, -0.213])
    np.testing.assert_allclose(model.actuator_forcerange[:3, 1], [23.7, 23.7, 45.43])
    task = make_task("quadruped-walk")
    assert task.control_decimation * model.opt.timestep == pytest.approx(0.02)  # 50 Hz policy
    assert 1 / model.opt.timestep >= 200  # ≥ 200 Hz physics


def test_quadruped_stands_on_its_pd_servos():
    env = make_env(SimConfig(task="quadruped-walk", num_envs=2))
    for _ in range(100):  # two seconds
        _, _, terminated, _, _ = env.step(torch.zeros(2, 12))
        assert not terminated.any()
    height = env.task.sensor(env.phys["sensordata"], "position")[:, 2]
    assert np.all(height > 0.22)


def test_pendulum_swings_up_with_an_energy_controller():
    """The torque limit forces several pumps, but an energy-shaping controller succeeds within the episode."""
    env = make_env(SimConfig(task="pendulum-swingup", num_envs=8))
    obs = env.reset(seed=0)
    for _ in range(env.episode_steps):
        cos, sin, speed = obs["policy"].T.double()
        speed = speed * env.task.config.max_speed
        energy = 0.5 * speed**2 + 9.81 * (cos - 1.0)  # 0 at rest upright; dE/dt = 2·u·speed
        pump = torch.sign(speed) * torch.sign(-energy)
        balance = -10.0 * torch.atan2(sin, cos) - 2.0 * speed
        action = torch.where(cos > 0.9, balance, pump).clamp(-1, 1)
        obs, _, _, _, info = env.step(action[:, None])
    assert info["episode"]["done"].all() and info["episode"]["success"].float().mean() >= 0.75


@pytest.mark.parametrize("mode,dim", [("joint_delta", 8), ("ee_delta_pose", 7), ("ee_delta_topdown", 5)])
def test_arm_control_modes_move_the_tcp_as_commanded(mode, dim):
    env = make_env(SimConfig(task="arm-reach", num_envs=1, task_options={"control_mode": mode, "init_joint_noise": 0}))
    start = env.task.tcp_pos(env.state).copy()
    joints = [f"q{i}" for i in range(1, 8)]
    start_q = env.task.sensor.group(env.phys["sensordata"], joints, np).copy()
    action = torch.zeros(1, dim)
    if mode == "joint_delta":
        action[0, 1] = 1.0  # shoulder forward: the TCP moves out and down
    else:
        action[0, 0] = 1.0  # +x in the world
    for _ in range(10):
        env.step(action)
    for _ in range(15):  # let the arm settle on its target
        env.step(torch.zeros(1, dim) + torch.nn.functional.pad(torch.ones(1, 1), (dim - 1, 0)))
    moved = env.task.tcp_pos(env.state)[0] - start[0]
    if mode == "joint_delta":  # 10 steps at half the 2.175 rad/s limit, less the PD lag
        turned = env.task.sensor.group(env.phys["sensordata"], joints, np)[0] - start_q[0]
        assert 0.3 < turned[1] < 0.45 and np.abs(np.delete(turned, 1)).max() < 0.01
        assert moved[2] < -0.1
    else:
        commanded = 10 * env.task.config.ee_step
        assert abs(moved[0] - commanded) < 0.01 and np.abs(moved[1:]).max() < 0.01, moved
    tcp_z = env.task.sensor(env.phys["sensordata"], "tcp_quat")
    if mode == "ee_delta_topdown":
        assert abs(abs(tcp_z[0, 1]) - 1) < 0.05, "the TCP keeps pointing down"


def test_the_action_rate_penalty_charges_chatter_not_steady_actions():
    def rewards(penalty: float, actions: list[float]) -> np.ndarray:
        options = {"init_joint_noise": 0, "action_rate_penalty": penalty}
        env = make_env(SimConfig(task="arm-reach", num_envs=1, task_options=options))
        return np.array([float(env.step(torch.tensor([[0.0, a, 0.0, 0.0, 0.0]]))[1][0]) for a in actions])

    chatter, steady = [1.0, -1.0] * 5, [1.0] * 10
    # after the first step (from rest), steady actions cost nothing; each ±1 flip costs penalty · 2² / 5
    np.testing.assert_allclose(rewards(0.1, steady)[1:], rewards(0.0, steady)[1:], atol=1e-6)
    np.testing.assert_allclose(rewards(0.0, chatter)[1:] - rewards(0.1, chatter)[1:], 0.1 * 4 / 5, atol=1e-6)


def test_arm_starts_near_the_ready_pose():
    env = make_env(SimConfig(task="arm-push-cube", num_envs=16))
    q = env.task.sensor.group(env.phys["sensordata"], [f"q{i}" for i in range(1, 8)], np)
    assert np.abs(q - HOME_QPOS).max() <= env.task.config.init_joint_noise + 1e-9
    cube = env.task.cube_pos(env.state)
    assert np.all(cube[:, 0] >= 0.4) and np.all(cube[:, 0] <= 0.6) and np.allclose(cube[:, 2], 0.02, atol=1e-3)


def test_unknown_task_option_names_its_path():
    with pytest.raises(ConfigError, match=r"sim.task_options.control: unknown key \(did you mean 'control_dt'\?\)"):
        make_task("arm-reach", {"control": "joint_delta"})
    with pytest.raises(ConfigError, match=r"sim.task_options.control_mode: got 'torque'; allowed: 'joint_delta'"):
        make_task("arm-reach", {"control_mode": "torque"})
    with pytest.raises(ConfigError, match="not a multiple of the physics timestep"):
        make_task("quadruped-walk", {"control_dt": 0.013})


def test_projected_gravity_matches_the_rotation():
    from policyforge.sims.xmath import projected_gravity, quat_rotate_inverse

    quats = np.random.default_rng(0).standard_normal((50, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    down = np.broadcast_to([0.0, 0.0, -1.0], (50, 3))
    np.testing.assert_allclose(projected_gravity(quats, np), quat_rotate_inverse(quats, down, np), atol=1e-12)
