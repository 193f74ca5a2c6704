"""The UR driver, through the real ur-rtde 1.6.5 client, against our simulated UR controller on 127.0.0.1
(RTDE, dashboard server, script port and an emulation of the program ur-rtde uploads): states are read exactly
as the controller streams them; servoJ targets streamed through the safety filter move the arm to a goal; no
unsafe target reaches the controller; disconnecting leaves the arm stopped and the program ended."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from policyforge.real_robot.loop import ControlLoop, LoopConfig
from policyforge.real_robot.peers.process import simulated_peer
from policyforge.real_robot.peers.rtde_sim import HOME, joints, tcp_pose
from policyforge.real_robot.robot import Command, RobotState
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter
from policyforge.real_robot.ur import UR, URConfig
from tests.real_robot.conftest import Peer

RATE = 125.0
"""Control loop and RTDE rate of these tests, Hz (a loaded 2-core machine keeps up with it)."""
GOAL = HOME + np.array([0.4, -0.3, 0.3, 0.2, -0.25, 0.5])
"""A joint pose the arm is sent to, rad."""
SAFETY = SafetyConfig(state_timeout=0.2, command_timeout=0.5)
"""Timeouts a loaded test machine meets; the step and joint limits are the defaults."""


@pytest.fixture
def ur_peer(tmp_path):
    """A fresh simulated controller per test (it binds the UR's fixed ports), so no motion leaks between tests."""
    with simulated_peer("ur", 0, tmp_path / "ur.json") as facts_path:
        peer = Peer(0, facts_path)
        peer.wait_for(lambda facts: True, timeout=20)  # the first facts are written once every port listens
        yield peer


class GoalAdapter:
    """Joint targets as they are: the loop's prepare phase ramps to `default_pose`, then every action holds it."""

    action_dim = 1

    def __init__(self, goal: np.ndarray):
        self.default_pose = goal

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        return state.joint_pos

    def command(self, action: np.ndarray) -> Command:
        return Command(position=self.default_pose.copy())

    def pose_command(self, position: np.ndarray) -> Command:
        return Command(position=np.array(position, dtype=np.float64))


def test_states_stream_exactly_what_the_controller_sends(ur_peer):
    with UR(URConfig(control=False)) as ur:
        times, ages, began = [], [], time.monotonic()
        for _ in range(20):
            state = ur.observe()
            ages.append(time.monotonic() - state.stamp)
            q, qd = joints(state.robot_time)
            np.testing.assert_allclose(state.joint_pos, q, atol=1e-12)
            np.testing.assert_allclose(state.joint_vel, qd, atol=1e-12)
            np.testing.assert_allclose(state.ee_pos, tcp_pose(q)[:3], atol=1e-12)
            times.append(state.robot_time)
            time.sleep(0.01)
        # the controller's clock runs with ours and its states are fresh: a 500 Hz stream (a loaded machine may
        # stall its 2 ms tick for a read or two, so the median age is what is bounded; a driver that kept one
        # state would age 0.2 s over these reads)
        assert np.all(np.diff(times) >= 0) and times[-1] - times[0] > 0.5 * (time.monotonic() - began)
        assert np.median(ages) < 0.01 and np.mean(np.array(ages) < SafetyConfig().state_timeout) >= 0.8, ages
        with pytest.raises(RuntimeError, match="read-only"):
            ur.send(Command(position=np.zeros(6)))


def test_servoj_through_the_safety_filter_reaches_a_goal(ur_peer):
    with UR(URConfig(frequency=RATE)) as ur:
        start = ur.observe().joint_pos
        assert np.max(np.abs(start - GOAL)) > 0.2
        loop = LoopConfig(rate_hz=RATE, policy_rate_hz=25.0, seconds=1.0, prepare_seconds=2.0)
        report = ControlLoop(ur, SafetyFilter(ur.spec, SAFETY), lambda obs: np.zeros(1), GoalAdapter(GOAL), loop).run()
        reached = ur.observe()
        facts = ur_peer.wait_for(lambda f: f["servo_targets"] >= ur.stats["commands"] and f["motion"] == "servo")
    assert report.final_mode == "normal" and report.policy_steps >= 15
    np.testing.assert_allclose(reached.joint_pos, GOAL, atol=1e-3)  # what the driver reads ...
    np.testing.assert_allclose(facts["joint_pos"], GOAL, atol=1e-3)  # ... and where the controller has the arm
    assert facts["servo_targets"] == ur.stats["commands"] > 200  # every target sent arrived, once
    assert facts["unsafe"] == {}, facts["first_unsafe"]
    assert facts["script_error"] is None and facts["dashboard"] == ["PolyscopeVersion", "get serial number"]


def test_the_safety_filter_keeps_bad_targets_from_the_controller(ur_peer):
    with UR(URConfig(frequency=RATE)) as ur:
        safety = SafetyFilter(ur.spec, SAFETY)
        here = ur.observe().joint_pos
        for position in [here] * 3 + [np.full(6, np.nan)] * 3 + [here + 1.0] * 3:
            ur.send(safety(Command(position=position), ur.observe(), time.monotonic()).command)
            time.sleep(1 / RATE)
        assert safety.counts["nonfinite"] == 3 and safety.counts["step_limit"] == 3  # the filter saw them
        filtered = ur_peer.wait_for(lambda f: f["servo_targets"] == 9)
        # the audit does catch them when they bypass the filter: a far jump, then a NaN that ends the program
        ur.send(Command(position=ur.observe().joint_pos + 1.0))
        ur.send(Command(position=np.full(6, np.nan)))
        unfiltered = ur_peer.wait_for(lambda f: f["servo_targets"] == 11 and f["runtime_state"] == 1)
    assert filtered["unsafe"] == {}, filtered["first_unsafe"]
    assert unfiltered["unsafe"] == {"step_limit": 1, "nonfinite": 1}
    assert unfiltered["script_error"] == "command 11: a non-finite argument"


def test_disconnect_leaves_the_arm_stopped_and_the_program_ended(ur_peer):
    with UR(URConfig(frequency=RATE)) as ur:
        start = ur.observe().joint_pos
        for tick in range(1, 61):  # every joint sweeps at 0.5 rad/s
            ur.send(Command(position=start + 0.5 * tick / RATE))
            time.sleep(1 / RATE)
        moving = ur.observe()
        assert np.all(np.abs(moving.joint_vel) > 0.2)
    facts = ur_peer.wait_for(lambda f: f["runtime_state"] == 1 and f["motion"] == "still")
    assert facts["commands"]["16"] == 1 and facts["commands"]["255"] == 1  # servoStop, then stopScript
    assert facts["joint_vel"] == [0.0] * 6
    # it braked where it was: at most the servo lag and braking distance of a 0.5 rad/s joint further
    assert np.all(np.abs(np.subtract(facts["joint_pos"], moving.joint_pos)) < 0.1)
    with UR(URConfig(control=False)) as ur:  # and it stays there
        still = ur.observe()
        np.testing.assert_allclose(still.joint_pos, facts["joint_pos"], atol=1e-12)


def test_a_program_stopped_on_the_controller_refuses_servoj_clearly(ur_peer):
    with UR(URConfig(frequency=RATE)) as ur:
        ur.send(Command(position=ur.observe().joint_pos))
        with socket.create_connection(("127.0.0.1", 29999), timeout=2) as dashboard, dashboard.makefile("rb") as lines:
            assert lines.readline().startswith(b"Connected: Universal Robots Dashboard Server")
            dashboard.sendall(b"stop\n")
            assert lines.readline() == b"Stopped\n"
        ur_peer.wait_for(lambda f: f["runtime_state"] == 1)
        deadline = time.monotonic() + 2.0
        with pytest.raises(RuntimeError, match="servoJ was refused"):
            while time.monotonic() < deadline:  # the client learns of the stop from its next data package
                ur.send(Command(position=ur.observe().joint_pos))
                time.sleep(1 / RATE)


def test_the_script_port_runs_only_ur_rtdes_control_program(ur_peer):
    with socket.create_connection(("127.0.0.1", 30003), timeout=2) as script:
        script.sendall(b'def hello():\n  textmsg("hi")\nend\n')
    facts = ur_peer.wait_for(lambda f: f["ignored_programs"])
    assert facts["ignored_programs"] == ["def hello():"] and facts["programs"] == 0 and facts["runtime_state"] == 1


def test_no_controller_is_a_clear_connection_error():
    with pytest.raises(ConnectionError, match=r"no RTDE interface at 127\.0\.0\.2:30004"):
        UR(URConfig(host="127.0.0.2", control=False)).connect(timeout=0.5)
