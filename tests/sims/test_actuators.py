"""Actuator models (sims/actuators.py): the DC motor's curve caps torque and speed, a command delay shifts the
response by exactly its physics steps, motor strength scales the torque, both backends agree, bad options are
refused naming the field."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims.actuators import Actuators
from policyforge.sims.config import ActuatorConfig, RandomizationConfig, SimConfig
from policyforge.sims.make import make_env, make_task
from policyforge.sims.parity import oscillating_actions, paired_rollout

DC_MOTOR = ActuatorConfig(model="dc_motor")


def test_the_curve_gives_stall_torque_at_rest_and_nothing_more_at_the_no_load_speed():
    task = make_task("quadruped-walk", {})
    actuators = Actuators(DC_MOTOR, task.model, task.motor_curve(), task.name, None, task.control_decimation)
    stall, no_load = task.motor_curve()
    qvel = np.zeros((3, task.model.nv))
    calf = 2  # FR_calf: actuator 2
    qvel[1, actuators.joint_dofs[calf]] = no_load[calf] / 2
    qvel[2, actuators.joint_dofs[calf]] = -no_load[calf]
    limits = actuators.torque_range(qvel, np.ones(3), np)
    np.testing.assert_allclose(limits[0, calf], [-stall[calf], stall[calf]])
    np.testing.assert_allclose(limits[1, calf], [-stall[calf], stall[calf] / 2])  # half speed: half the torque on
    np.testing.assert_allclose(limits[2, calf], [0.0, stall[calf]])  # at −ω₀ nothing more along the motion
    np.testing.assert_allclose(
        actuators.torque_range(qvel, np.full(3, 0.5), np)[0, calf], [-stall[calf] / 2, stall[calf] / 2]
    )


def peak_leg_speed(actuator: ActuatorConfig) -> float:
    """Largest leg joint speed (rad/s) of quadrupeds swinging their legs hard for a second."""
    env = make_env(SimConfig(task="quadruped-walk", num_envs=4, actuator=actuator))
    env.reset(seed=0)
    actions = np.sign(oscillating_actions(50, 4, 12, 1.0, seed=2))
    speeds = []
    for action in actions:
        env.step(torch.as_tensor(action))
        speeds.append(np.abs(env.state.phys["qvel"][:, 6:]).max())
    return float(max(speeds))


def test_a_slow_dc_motor_caps_the_joint_speed_and_the_ideal_pd_does_not():
    """Measured: 10.7 rad/s with ω₀ = 10 (past it on the legs' momentum and impacts, braking), 29 with the ideal PD.
    (A much slower motor at the same stall torque is a curve too steep for 5 ms steps: the limit, set before each
    step from the speed, then lags the speed and the joint oscillates: ω₀ ≥ τ_s·dt / inertia keeps it stable.)"""
    slow = ActuatorConfig(model="dc_motor", no_load_speed=[10.0])
    capped, ideal = peak_leg_speed(slow), peak_leg_speed(ActuatorConfig())
    assert capped < 10.0 * 1.15, capped
    assert ideal > 2 * 10.0, ideal


def test_a_command_delay_holds_the_previous_command_for_exactly_its_physics_steps():
    """One control step with a 2-step delay is 2 physics steps on the old controls, then the rest on the new."""
    delay = RandomizationConfig(command_delay_steps=(2, 2))
    env = make_env(SimConfig(task="quadruped-walk", num_envs=1, randomization=delay))
    env.reset(seed=0)
    env.step(torch.zeros(1, 12))  # the previous command: the standing pose
    model, data, ctrl = env.task.model, mujoco.MjData(env.task.model), env.batch.bind("ctrl")
    data.qpos[:], data.qvel[:], data.ctrl[:] = env.phys["qpos"][0], env.phys["qvel"][0], ctrl[0]
    env.step(torch.full((1, 12), 0.8))
    new_ctrl = ctrl[0].copy()
    for step in range(env.task.control_decimation):
        if step == 2:
            data.ctrl[:] = new_ctrl
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(env.phys["qpos"][0], data.qpos, atol=1e-9)
    assert np.abs(new_ctrl - data.qpos[7:]).max() > 0.1  # the command did change


def test_delays_are_drawn_per_env_within_the_range():
    delay = RandomizationConfig(command_delay_steps=(1, 3))
    env = make_env(SimConfig(task="quadruped-walk", num_envs=64, randomization=delay))
    env.reset(seed=3)
    drawn = env.vars["dr_delay"]
    assert set(np.unique(drawn)) == {1.0, 2.0, 3.0}


@pytest.mark.parametrize("actuator", [ActuatorConfig(), DC_MOTOR], ids=["pd", "dc_motor"])
def test_weak_motors_cannot_hold_the_robot_up(actuator):
    def trunk_height(strength: float) -> float:
        randomization = RandomizationConfig(motor_strength=(strength, strength))
        env = make_env(SimConfig(task="quadruped-walk", num_envs=2, randomization=randomization, actuator=actuator))
        env.reset(seed=0)
        for _ in range(50):  # a second, commanding the standing pose
            env.step(torch.zeros(2, 12))
        return float(env.phys["qpos"][:, 2].mean())

    assert trunk_height(0.1) < trunk_height(1.0) - 0.05


@pytest.mark.slow
def test_the_actuator_model_runs_the_same_on_mjx():
    options = {
        "actuator": ActuatorConfig(model="dc_motor", no_load_speed=[8.0]),
        "randomization": RandomizationConfig(command_delay_steps=(0, 3), motor_strength=(0.7, 1.0)),
    }
    native = make_env(SimConfig(task="quadruped-walk", num_envs=4, **options), seed=0)
    mjx = make_env(SimConfig(task="quadruped-walk", num_envs=4, backend="mjx", **options), seed=0)
    actions = oscillating_actions(40, 4, 12, 0.5)
    result = paired_rollout(native, mjx, actions, options["randomization"])
    assert result.flags_equal and result.qpos_error.max() < 1e-3, result.qpos_error.max()


@pytest.mark.parametrize(
    ("sim", "field"),
    [
        ({"randomization": RandomizationConfig(command_delay_steps=(0, 4))}, "command_delay_steps"),
        ({"task": "arm-reach", "actuator": DC_MOTOR}, "saturation_torque"),
        ({"actuator": ActuatorConfig(model="dc_motor", no_load_speed=[1.0, 2.0])}, "no_load_speed"),
        (
            {"task": "pendulum-swingup", "actuator": ActuatorConfig("dc_motor", [1.0], [5.0])},
            "dc_motor needs force-limited actuators",
        ),
    ],
)
def test_bad_actuator_options_are_refused_naming_the_field(sim, field):
    with pytest.raises(ConfigError, match=field):
        make_env(SimConfig(**{"task": "quadruped-walk", "num_envs": 1, **sim}))


def test_config_values_are_checked():
    with pytest.raises(ConfigError, match="model"):
        ActuatorConfig(model="actuator_net")
    with pytest.raises(ConfigError, match="command_delay_steps"):
        RandomizationConfig(command_delay_steps=(0.5, 1))
