"""The UR driver's receive path (ur-rtde's RTDEReceiveInterface) against our RTDE protocol-v2 peer, and the
control path's clear failure where only a real controller can answer (dashboard server, URScript)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from policyforge.real_robot.launch import simulated_peer
from policyforge.real_robot.peers.rtde_sim import joints, tcp_pose
from policyforge.real_robot.robot import Command
from policyforge.real_robot.ur import UR, URConfig


@pytest.fixture(scope="module")
def rtde_peer(tmp_path_factory):
    with simulated_peer("ur", 0, tmp_path_factory.mktemp("ur") / "unused"):
        deadline = time.monotonic() + 20
        while True:  # the peer process needs a moment to listen on 30004
            try:
                UR(URConfig(control=False)).connect()
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield


def test_states_stream_exactly_what_the_controller_sends(rtde_peer):
    with UR(URConfig(control=False)) as ur:
        times = []
        for _ in range(20):
            state = ur.observe()
            q, qd = joints(state.robot_time)
            np.testing.assert_allclose(state.joint_pos, q, atol=1e-12)
            np.testing.assert_allclose(state.joint_vel, qd, atol=1e-12)
            np.testing.assert_allclose(state.ee_pos, tcp_pose(q)[:3], atol=1e-12)
            assert time.monotonic() - state.stamp < 0.05  # fresh: a 500 Hz stream
            times.append(state.robot_time)
            time.sleep(0.01)
        assert np.all(np.diff(times) > 0)  # the controller's clock advances between reads
        with pytest.raises(RuntimeError, match="read-only"):
            ur.send(Command(position=np.zeros(6)))


def test_the_control_path_says_what_it_needs(rtde_peer):
    with pytest.raises(ConnectionError, match="dashboard server"):
        UR(URConfig(control=True)).connect()


def test_no_controller_is_a_clear_connection_error():
    with pytest.raises(ConnectionError, match=r"no RTDE interface at 127\.0\.0\.2:30004"):
        UR(URConfig(host="127.0.0.2", control=False)).connect()
