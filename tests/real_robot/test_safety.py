"""The safety filter: what reaches `Robot.send` stays within the spec, and every fault ends in the safe mode."""

from __future__ import annotations

import math

import numpy as np
import pytest

from policyforge.config import ConfigError
from policyforge.real_robot.robot import Command, RobotSpec, RobotState
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter

J = 3


def arm_spec(**changes) -> RobotSpec:
    fields = dict(
        name="test-arm",
        joint_names=("a", "b", "c"),
        position_low=np.full(J, -1.0),
        position_high=np.full(J, 1.0),
        max_velocity=np.full(J, 2.0),
        max_torque=np.full(J, 10.0),
        control_rate_hz=100.0,
        safe_mode="hold",
    )
    return RobotSpec(**(fields | changes))


def state(now: float, q=None, dq=None) -> RobotState:
    return RobotState(
        stamp=now,
        joint_pos=np.zeros(J) if q is None else np.asarray(q, float),
        joint_vel=np.zeros(J) if dq is None else dq,
    )


def test_nonfinite_commands_are_rejected_and_the_last_good_one_stays():
    safety = SafetyFilter(arm_spec())
    good = safety(Command(position=np.full(J, 0.05)), state(0.0), 0.0)
    assert good.mode == "normal" and good.reasons == ()
    for bad in (np.array([np.nan, 0, 0]), np.array([0, np.inf, 0]), np.array([0, 0, -np.inf])):
        out = safety(Command(position=bad), state(0.01), 0.01)
        assert "nonfinite" in out.reasons
        np.testing.assert_allclose(out.command.position, 0.05)
    out = safety(Command(position=np.zeros(J), torque=np.array([0, np.nan, 0])), state(0.02), 0.02)
    assert "nonfinite" in out.reasons and np.all(np.isfinite(out.command.position))
    assert safety.counts["nonfinite"] == 4


def test_limits_clamp_position_velocity_torque_and_step():
    safety = SafetyFilter(arm_spec(), SafetyConfig(max_step=0.1))
    out = safety(Command(position=np.array([5.0, -5.0, 0.0]), velocity=np.array([9.0, -9.0, 1.0]),
                         torque=np.array([50.0, 0.0, -50.0])), state(0.0), 0.0)  # fmt: skip
    assert {"position_limit", "velocity_limit", "torque_limit", "step_limit"} <= set(out.reasons)
    np.testing.assert_allclose(out.command.position, [0.1, -0.1, 0.0])  # a step of 0.1 from the measured pose
    np.testing.assert_allclose(out.command.velocity, [2.0, -2.0, 1.0])
    np.testing.assert_allclose(out.command.torque, [10.0, 0.0, -10.0])
    positions = [safety(Command(position=np.full(J, 5.0)), state(0.01 * k), 0.01 * k).command.position[0]
                 for k in range(1, 15)]  # fmt: skip
    assert np.all(np.diff(positions) <= 0.1 + 1e-12)
    assert positions[-1] == pytest.approx(1.0)  # reaches the joint limit, never beyond


def test_pd_targets_stay_within_the_torque_limit():
    safety = SafetyFilter(arm_spec(), SafetyConfig(max_step=10.0))
    command = Command(position=np.full(J, 0.9), kp=np.full(J, 100.0), kd=np.ones(J), torque=np.array([0.0, 4.0, -4.0]))
    out = safety(command, state(0.0), 0.0)
    implied = np.abs(out.command.kp * (out.command.position - 0.0)) + np.abs(out.command.torque)
    assert np.all(implied <= 10.0 + 1e-9) and "torque_limit" in out.reasons


def test_the_torque_bound_holds_while_a_moving_joint_keeps_moving():
    """A joint moving away from its target at 5 rad/s with a 10 ms old state: the PD torque must stay within
    the limit where the joint will be when the command lands (state age + torque_horizon later)."""
    config = SafetyConfig(max_step=10.0, torque_horizon=0.005)
    safety = SafetyFilter(arm_spec(), config)
    velocity = np.array([-5.0, 0.0, 5.0])
    out = safety(Command(position=np.full(J, 0.9), kp=np.full(J, 100.0)), state(0.0, dq=velocity), 0.01)
    landed = 0.0 + velocity * (0.01 + config.torque_horizon)
    assert np.all(out.command.kp * np.abs(out.command.position - landed) <= 10.0 + 1e-9)
    assert out.command.position[1] == pytest.approx(0.1)  # a still joint keeps the whole reach


def test_workspace_box_clamps_cartesian_targets_and_rejects_joint_targets_outside():
    spec = arm_spec(workspace_low=np.array([-0.5, -0.5, 0.0]), workspace_high=np.array([0.5, 0.5, 0.8]))
    safety = SafetyFilter(spec, forward_kinematics=lambda q: np.array([q[0], q[1], 0.5 + q[2]]))
    out = safety(Command(position=np.zeros(J), ee_target=np.array([0.2, 0.9, -0.3])), state(0.0), 0.0)
    np.testing.assert_allclose(out.command.ee_target, [0.2, 0.5, 0.0])
    assert "workspace" in out.reasons
    safety(Command(position=np.zeros(J)), state(0.01), 0.01)
    out = safety(Command(position=np.array([0.0, 0.0, -0.6])), state(0.02), 0.02)  # FK z = -0.1: below the table
    assert "workspace" in out.reasons and out.command.position[2] == pytest.approx(0.0)


def test_steps_towards_a_target_inside_the_box_stay_inside_it():
    """FK z = 0.5 + q2 − 2·q0: the target (0.4, 0, 0.8) is at z = 0.5, but moving every joint 0.1 rad a tick
    dips to z = 0.1 on the way (q0 arrives first). Every command sent must keep z ≥ 0.2, and still arrive."""
    spec = arm_spec(
        position_high=np.full(J, 1.0),
        workspace_low=np.array([-1.0, -1.0, 0.2]),
        workspace_high=np.array([1.0, 1.0, 1.0]),
    )
    fk = lambda q: np.array([q[0], q[1], 0.5 + q[2] - 2 * q[0]])  # noqa: E731
    safety = SafetyFilter(spec, SafetyConfig(max_step=0.1, command_timeout=1.0), fk)
    sent = [safety(Command(position=np.array([0.4, 0.0, 0.8])), state(0.01 * k), 0.01 * k).command.position
            for k in range(20)]  # fmt: skip
    assert min(fk(q)[2] for q in sent) >= 0.2 - 1e-9
    np.testing.assert_allclose(sent[-1], [0.4, 0.0, 0.8], atol=1e-9)
    assert np.max(np.abs(np.diff(sent, axis=0))) <= 0.1 + 1e-9


def test_stale_state_holds_then_recovers_and_a_long_fault_latches_the_estop():
    safety = SafetyFilter(arm_spec(), SafetyConfig(state_timeout=0.05, command_timeout=1.0, estop_after=0.3))
    safety(Command(position=np.full(J, 0.05)), state(0.0), 0.0)
    old = state(0.0, q=np.full(J, 0.04))
    out = safety(Command(position=np.full(J, 0.1)), old, 0.1)  # state 0.1 s old
    assert out.mode == "safe" and "stale_state" in out.reasons
    np.testing.assert_allclose(out.command.position, 0.05)  # holds the last sent target, no jump
    np.testing.assert_allclose(out.command.velocity, 0.0)
    out = safety(Command(position=np.full(J, 0.1)), state(0.15), 0.15)
    assert out.mode == "normal"  # a short fault recovers by itself
    for k in range(40):
        out = safety(None, old, 0.2 + 0.01 * k)
    assert out.mode == "estop" and safety.estopped
    out = safety(Command(position=np.full(J, 0.1)), state(0.7), 0.7)  # fresh again: still latched
    assert out.mode == "estop" and "estop" in out.reasons
    safety.reset(state(0.71), 0.71)
    assert safety(Command(position=np.full(J, 0.1)), state(0.72), 0.72).mode == "normal"


def test_stale_commands_damp_a_legged_robot():
    spec = arm_spec(safe_mode="damp", damping_kd=np.full(J, 2.0))
    safety = SafetyFilter(spec, SafetyConfig(command_timeout=0.1, estop_after=1.0))
    safety(Command(position=np.full(J, 0.05), kp=np.full(J, 30.0), kd=np.ones(J)), state(0.0), 0.0)
    assert safety(None, state(0.05), 0.05).mode == "normal"  # the policy may run slower than the robot
    out = safety(None, state(0.2), 0.2)
    assert out.mode == "safe" and out.reasons == ("stale_command",)
    np.testing.assert_allclose(out.command.kp, 0.0)
    np.testing.assert_allclose(out.command.kd, 2.0)
    np.testing.assert_allclose(out.command.torque, 0.0)


def test_reset_needs_a_fresh_state_and_counts_each_tick():
    safety = SafetyFilter(arm_spec())
    safety.trigger_estop("operator", 0.0)
    with pytest.raises(RuntimeError, match="state_timeout"):
        safety.reset(state(0.0), 1.0)
    for k in range(5):
        assert safety(Command(position=np.zeros(J)), state(0.01 * k), 0.01 * k).mode == "estop"
    assert safety.counts["estop"] == 5 and [r for _, r in safety.events] == ["estop"]


def test_bad_thresholds_are_refused():
    with pytest.raises(ConfigError, match="max_step"):
        SafetyConfig(max_step=0.0)
    with pytest.raises(ConfigError, match="state_timeout"):
        SafetyConfig(state_timeout=-math.inf)


def test_after_damping_targets_step_from_the_measured_joints():
    spec = arm_spec(safe_mode="damp", damping_kd=np.full(J, 2.0))
    safety = SafetyFilter(spec, SafetyConfig(command_timeout=0.1, estop_after=5.0, max_step=0.1))
    pd = dict(kp=np.full(J, 30.0), kd=np.ones(J))
    safety(Command(position=np.zeros(J), **pd), state(0.0), 0.0)
    assert safety(None, state(0.2), 0.2).mode == "safe"  # damping: the joints sag to -0.5
    out = safety(Command(position=np.full(J, -0.5), **pd), state(0.3, q=np.full(J, -0.5)), 0.3)
    assert out.mode == "normal" and "step_limit" not in out.reasons
    np.testing.assert_allclose(out.command.position, -0.5)  # no jump back to the old target 0


def test_an_arm_outside_the_box_may_step_back_in_but_not_further_out():
    """FK z = 0.5 + q2, floor 0.2 (+0.05 margin): with the arm at z = 0.1 (overshot, or started there) a target at
    z = 0.15 is the way back and goes through, z = 0.05 is refused; before, both were, and the e-stop latched."""
    spec = arm_spec(workspace_low=np.array([-1.0, -1.0, 0.2]), workspace_high=np.array([1.0, 1.0, 1.0]))
    fk = lambda q: np.array([q[0], q[1], 0.5 + q[2]])  # noqa: E731
    safety = SafetyFilter(spec, SafetyConfig(max_step=0.1, workspace_margin=0.05, command_timeout=1.0), fk)
    low = [0.0, 0.0, -0.4]  # z = 0.1
    safety(Command(position=np.array(low)), state(0.0, q=low), 0.0)  # refused: outside, and no closer
    out = safety(Command(position=np.array([0.0, 0.0, -0.35])), state(0.01, q=low), 0.01)
    assert "workspace" not in out.reasons and out.command.position[2] == pytest.approx(-0.35)
    out = safety(Command(position=np.array([0.0, 0.0, -0.45])), state(0.02, q=low), 0.02)
    assert "workspace" in out.reasons and out.command.position[2] == pytest.approx(-0.35)  # the last accepted
    inside = np.array([0.0, 0.0, 0.0])  # z = 0.5
    out = safety(Command(position=np.array([0.0, 0.0, -0.3])), state(0.03, q=inside), 0.03)  # z 0.2: leaves it
    assert "workspace" in out.reasons
