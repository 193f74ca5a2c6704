"""Fault injection on the Go2 driver + DDS peer: no unsafe command reaches the peer, every fault ends in the
safe mode or an e-stop, and `policyforge deploy` stops safely on SIGTERM."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time

import pytest

from policyforge.real_robot.robot import RobotClock
from policyforge.real_robot.testing.faults import (
    PREPARE_S,
    RUN_S,
    feetech_scenarios,
    franka_scenarios,
    go2_scenarios,
    run_feetech_scenario,
    run_franka_scenario,
    run_scenario,
    run_ur_scenario,
    ur_scenarios,
)
from tests.real_robot.conftest import ASSETS, GO2_POLICY


@pytest.mark.parametrize("scenario", go2_scenarios(), ids=lambda s: s.name)
def test_every_fault_is_handled_and_nothing_unsafe_reaches_the_robot(scenario, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="policyforge.safety")
    result = run_scenario(scenario, GO2_POLICY, tmp_path)
    assert result["unsafe_at_peer"] == 0, result["first_unsafe"]
    assert result["handled"], result
    # the loop kept commanding (safe commands) through the fault, to its last tick
    assert result["commanded_until_s"] >= PREPARE_S + RUN_S - 0.1 and result["commands_sent"] > 0


@pytest.mark.parametrize("scenario", feetech_scenarios(), ids=lambda s: s.name)
def test_every_fault_on_a_feetech_bus_arm_is_handled(scenario, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="policyforge.safety")
    result = run_feetech_scenario(scenario, tmp_path)
    assert result["unsafe_at_peer"] == 0 and result["handled"], result


@pytest.mark.parametrize("scenario", ur_scenarios(), ids=lambda s: s.name)
def test_every_fault_on_the_ur_is_handled(scenario, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="policyforge.safety")
    result = run_ur_scenario(scenario, tmp_path)
    assert result["unsafe_at_peer"] == 0, result["first_unsafe"]
    assert result["handled"] and result["commands_sent"] > 100, result


@pytest.mark.parametrize("scenario", franka_scenarios(), ids=lambda s: s.name)
def test_every_fault_on_the_franka_is_handled(scenario, caplog, peers_on_their_own_computer):
    """The simulated controller gets the robot's own computer (a real Franka's runs apart from ours): starved on a
    loaded machine, its arm descended too slowly in "actions dive through the table" to reach the box floor and
    be e-stopped within the run (ci-under-load, 2026-12-04; nothing unsafe reached it)."""
    caplog.set_level(logging.ERROR, logger="policyforge.safety")
    result = run_franka_scenario(scenario, ASSETS / "arm-reach-policy.onnx")
    assert result["unsafe_at_peer"] == 0 and result["handled"], result


def test_robot_clock_sees_delayed_states_as_old_and_tolerates_a_slow_robot_clock():
    clock = RobotClock(drift=0.02)
    for k in range(100):  # 2 ms transport delay, robot clock 1000 s behind ours
        assert clock.stamp(k * 0.01, 1000.002 + k * 0.01) == pytest.approx(1000.002 + k * 0.01)
    age = 1001.152 - clock.stamp(1.0, 1001.152)  # delivered 150 ms late
    assert 0.14 < age <= 0.15  # (the offset may creep by 2% of the 0.16 s since the last state)
    slow = RobotClock(drift=0.02)
    ages = [t - slow.stamp(0.99 * t, t) for t in (0.1 * k for k in range(1, 200))]  # robot clock 1% slow
    assert max(ages) < 0.01  # no growing age


def test_deploy_stops_on_sigterm_and_leaves_the_robot_damped(go2_peer):
    command = [sys.executable, "-m", "policyforge.cli", "deploy", str(GO2_POLICY), "--robot", "go2"]
    command += ["--domain-id", str(go2_peer.domain_id), "--seconds", "60"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # stiff: on a loaded machine the filter (stale state) or the driver (a late command) damps at times
        standing = go2_peer.wait_for(
            lambda f: f["commands"] > 1500 and f["base_height"] > 0.2 and f["last_command_stiff"], timeout=60
        )
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, output
    assert "final mode" in output and "normal" in output
    sunk = go2_peer.wait_for(lambda f: f["base_height"] < 0.15, timeout=5)
    assert standing["last_command_stiff"] and not sunk["last_command_stiff"]  # the driver's last word: damping
    assert sum(sunk["unsafe"].values()) == 0
    time.sleep(0.1)
