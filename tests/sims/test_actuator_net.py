"""Actuator networks (sims/actuator_net.py, real_robot/actuator_fit.py, `sim.actuator.model: network`): fitted to
a drive's log they predict its torques better than the PD law; in the simulator the motors give the network's
torque (a network that is the PD law reproduces the `pd` model exactly, one of half the PD law moves as half the
gains do); both backends agree; bad files are refused naming the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims.actuator_net import FEATURES, ActuatorNet
from policyforge.sims.actuators import Actuators
from policyforge.sims.config import ActuatorConfig, RandomizationConfig, SimConfig
from policyforge.sims.make import make_env, make_task
from policyforge.sims.parity import oscillating_actions, paired_rollout

FITTED = Path(__file__).parent / "assets" / "go2-actuator-net.npz"
"""Fitted (`policyforge sysid actuator-net`, 100 epochs) to 4 s of the hanging Go2 peer with bench.sysid.KNOWN's
drive: 85 % of the commanded torque, 10 ms late. Held-out error 0.073 N·m RMS against the PD law's 0.44."""


def linear_net(path: Path, gain: float, lag: int = 0) -> Path:
    """A network without hidden layer that gives `gain` × the PD law's torque as it was `lag` physics steps ago."""
    forcerange = make_task("quadruped-walk").model.actuator_forcerange[:, 1]
    weight = np.zeros(((lag + 1) * FEATURES, 1))
    weight[lag * FEATURES : lag * FEATURES + 2] = gain  # the stiffness and damping terms
    ActuatorNet([weight], [np.zeros(1)], np.arange(lag + 1), 0.005, forcerange).save(path)
    return path


def trajectory(actuator: ActuatorConfig, randomization: RandomizationConfig | None = None, steps: int = 50):
    """Joint positions [T, N, 12] of quadrupeds under the same oscillating actions."""
    config = SimConfig(task="quadruped-walk", num_envs=3, actuator=actuator)
    if randomization is not None:
        config = SimConfig(task="quadruped-walk", num_envs=3, actuator=actuator, randomization=randomization)
    env = make_env(config, seed=0)
    env.reset(seed=0)
    positions = []
    for action in oscillating_actions(steps, 3, 12, 0.6, seed=1):
        env.step(torch.as_tensor(action))
        positions.append(env.state.phys["qpos"][:, 7:].copy())
    return np.array(positions)


def test_a_network_that_is_the_pd_law_reproduces_the_pd_model_exactly(tmp_path):
    gains = RandomizationConfig(kp_scale=(0.6, 1.4), kd_scale=(0.6, 1.4))  # the network reads each env's gains
    net = ActuatorConfig(model="network", network=str(linear_net(tmp_path / "pd.npz", 1.0)))
    np.testing.assert_allclose(trajectory(net, gains), trajectory(ActuatorConfig(), gains), atol=1e-9)


def test_the_motors_give_the_networks_torque(tmp_path):
    """Half the PD law's torque moves the legs as halved gains do (the servo's damping stays implicit at its full
    kd, hence not exactly), and far from the full gains."""
    half = ActuatorConfig(model="network", network=str(linear_net(tmp_path / "half.npz", 0.5)))
    halved = RandomizationConfig(kp_scale=(0.5, 0.5), kd_scale=(0.5, 0.5))
    by_network, by_gains, full = trajectory(half), trajectory(ActuatorConfig(), halved), trajectory(ActuatorConfig())
    gap, effect = np.abs(by_network - by_gains).max(), np.abs(full - by_gains).max()
    assert gap < effect / 10, (gap, effect)


def test_a_lagged_network_responds_its_lag_later(tmp_path):
    """The PD law as it was 3 physics steps ago: a target step at physics step 5 moves the torque at step 8."""
    task = make_task("quadruped-walk")
    late = ActuatorConfig(model="network", network=str(linear_net(tmp_path / "late.npz", 1.0, lag=3)))
    actuators = Actuators(late, task.model, None, task.name, None, task.control_decimation)
    qpos, qvel = task.model.qpos0[None].copy(), np.zeros((1, task.model.nv))
    still = qpos[:, actuators.joint_qpos]
    history, torques = actuators.reset_vars(1, np)["actuator_history"], []
    for step in range(12):
        target = still + (0.1 if step >= 5 else 0.0)
        ctrl, history = actuators.network_ctrl(target, qpos, qvel, history, (np.ones(1), np.ones(1)), np)
        torques.append((actuators.kp * (ctrl - still))[0])  # the servo's torque at rest
    torques = np.array(torques)
    np.testing.assert_allclose(torques[:8], 0.0, atol=1e-9)
    np.testing.assert_allclose(torques[8:], 0.1 * np.broadcast_to(actuators.kp, (4, 12)), rtol=1e-9)


def test_the_fitted_network_runs_in_the_simulator_and_weakens_the_stance():
    """The peer's drive gives 85 % of the PD torque, late: with its network the standing Go2 sags lower."""
    fitted = ActuatorConfig(model="network", network=str(FITTED))
    height = {}
    for name, actuator in (("network", fitted), ("pd", ActuatorConfig())):
        env = make_env(SimConfig(task="quadruped-walk", num_envs=2, actuator=actuator), seed=0)
        env.reset(seed=0)
        for _ in range(50):
            env.step(torch.zeros(2, 12))
        height[name] = float(env.state.phys["qpos"][:, 2].mean())
    assert height["network"] < height["pd"] - 0.005, height


@pytest.mark.slow
def test_the_network_runs_the_same_on_mjx():
    options = {
        "actuator": ActuatorConfig(model="network", network=str(FITTED)),
        "randomization": RandomizationConfig(kp_scale=(0.8, 1.2), motor_strength=(0.8, 1.0)),
    }
    native = make_env(SimConfig(task="quadruped-walk", num_envs=4, **options), seed=0)
    mjx = make_env(SimConfig(task="quadruped-walk", num_envs=4, backend="mjx", **options), seed=0)
    result = paired_rollout(native, mjx, oscillating_actions(40, 4, 12, 0.5), options["randomization"])
    assert result.flags_equal and result.qpos_error.max() < 1e-3, result.qpos_error.max()


def test_bad_networks_are_refused_naming_the_field(tmp_path):
    def make(path, task="quadruped-walk"):
        make_env(SimConfig(task=task, num_envs=1, actuator=ActuatorConfig(model="network", network=str(path))))

    with pytest.raises(ConfigError, match=r"sim.actuator.network: .*missing.npz does not exist; fit one"):
        make(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(ConfigError, match=r"sim.actuator.network: .*is not an actuator network: it lacks"):
        make(tmp_path / "other.npz")
    net = ActuatorNet.load(FITTED)
    net.step_seconds = 0.002
    net.save(tmp_path / "fast.npz")
    with pytest.raises(ConfigError, match=r"0.002 s physics steps; task quadruped-walk steps 0.005 s: fit it with"):
        make(tmp_path / "fast.npz")
    with pytest.raises(ConfigError, match=r"was fitted to motors of τ_max"):
        make(FITTED, task="arm-reach")
    with pytest.raises(ConfigError, match="network"):
        ActuatorConfig(model="network")
    with pytest.raises(ConfigError, match="network"):
        ActuatorConfig(model="pd", network=str(FITTED))
