"""The Feetech bus-arm driver (feetech-servo-sdk) against servos emulated behind a pseudo-terminal."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from policyforge.real_robot.feetech import (
    RAD_PER_STEP,
    SO100_MOTORS,
    FeetechArm,
    FeetechBus,
    FeetechConfig,
    load_calibration,
    record_calibration,
)
from policyforge.real_robot.peers.feetech_sim import FeetechBusPeer
from policyforge.real_robot.robot import Command
from policyforge.real_robot.safety import SafetyFilter

IDS = [1, 2, 3, 4, 5, 6]
CENTER = np.array([2048, 2000, 2100, 2048, 1900, 2048])
LOW, HIGH = CENTER - np.array([900, 700, 800, 600, 1500, 300]), CENTER + np.array([900, 800, 700, 600, 1500, 600])


REPLY_TIMEOUT = 0.5
"""The servos are a thread of the test process: on a loaded machine their replies come when it is scheduled."""


def arm_config(port: str, calibration) -> FeetechConfig:
    return FeetechConfig(port=port, calibration=calibration, reply_timeout=REPLY_TIMEOUT)


def wait_until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll `condition()` until it holds; fail after `timeout` s (generous: the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.005)


class CountingBus(FeetechBus):
    """Counts the sync reads of the positions that succeeded."""

    reads = 0

    def positions(self, attempts: int = 3) -> np.ndarray:
        raw = super().positions(attempts)
        self.reads += 1
        return raw


@pytest.fixture
def bus_peer():
    peer = FeetechBusPeer(IDS)
    yield peer
    peer.close()


@pytest.fixture
def calibrated(bus_peer, tmp_path):
    """A calibration recorded while 'a person' poses the arm centred, then sweeps each joint end to end; each
    pose is held until the recorder has read it (twice: the first read may have begun before the move)."""
    for servo, raw in zip(IDS, CENTER, strict=True):
        bus_peer.set_position(servo, int(raw))
    bus = CountingBus(bus_peer.port, 1_000_000, IDS, REPLY_TIMEOUT)
    done = threading.Event()

    def sweep():
        wait_until(lambda: bus.reads >= 1, what="the centre reading")
        for servo, low, high in zip(IDS, LOW, HIGH, strict=True):
            for raw in (low, high, (low + high) // 2):
                bus_peer.set_position(servo, int(raw))
                seen = bus.reads
                wait_until(lambda seen=seen: bus.reads >= seen + 2, what="a reading of the pose")
        done.set()

    path = tmp_path / "so100.json"
    mover = threading.Thread(target=sweep)
    mover.start()
    record_calibration(bus, SO100_MOTORS, 120.0, path, done)
    bus.close()
    mover.join()
    assert done.is_set()
    for servo, raw in zip(IDS, CENTER, strict=True):  # back to the middle pose
        bus_peer.set_position(servo, int(raw))
    return path


def test_calibration_records_centres_and_ranges_as_json(calibrated):
    saved = json.loads(calibrated.read_text())
    assert list(saved) == list(SO100_MOTORS)
    motors = load_calibration(calibrated)
    assert [m.center for m in motors.values()] == CENTER.tolist()
    assert [m.range_min for m in motors.values()] == LOW.tolist()
    assert [m.range_max for m in motors.values()] == HIGH.tolist()


def test_joint_angles_round_trip_through_the_bus(bus_peer, calibrated):
    with FeetechArm(arm_config(bus_peer.port, calibrated)) as arm:
        np.testing.assert_allclose(arm.observe().joint_pos, 0.0, atol=RAD_PER_STEP)  # the middle pose is 0 rad
        target = np.array([0.3, -0.2, 0.4, -0.5, 1.0, 0.2])
        sent = arm.send(Command(position=target))
        np.testing.assert_allclose(sent.position, target, atol=RAD_PER_STEP)
        expected_raw = np.round(CENTER + target / RAD_PER_STEP).astype(int).tolist()
        goals = lambda: [bus_peer.word(s, 42) for s in IDS]  # noqa: E731
        wait_until(lambda: goals() == expected_raw, what="the goals to land")
        wait_until(lambda: np.abs(arm.observe().joint_pos - target).max() <= 2 * RAD_PER_STEP, what="the move")
        np.testing.assert_allclose(arm.observe().joint_pos, target, atol=2 * RAD_PER_STEP)


def test_commands_beyond_the_calibrated_range_never_reach_the_servos(bus_peer, calibrated):
    with FeetechArm(arm_config(bus_peer.port, calibrated)) as arm:
        safety = SafetyFilter(arm.spec)
        state = arm.observe()
        for k in range(60):  # a policy asking for +3 rad everywhere
            out = safety(Command(position=np.full(6, 3.0)), arm.observe(), state.stamp + 0.001 * k)
            arm.send(out.command)
        assert safety.counts["position_limit"] == 60
    goals = np.array([goal for _, goal in bus_peer.goals_written])
    servos = np.array([servo for servo, _ in bus_peer.goals_written])
    for i, servo in enumerate(IDS):
        assert goals[servos == servo].max() <= HIGH[i] and goals[servos == servo].min() >= LOW[i]


def test_a_missing_servo_is_named(bus_peer, calibrated, tmp_path):
    motors = json.loads(calibrated.read_text())
    motors["gripper"]["id"] = 9  # not on the bus
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(motors))
    with pytest.raises(ConnectionError, match=r"no answer from \['gripper'\]"):
        FeetechArm(arm_config(bus_peer.port, moved)).connect(timeout=1.0)
    with pytest.raises(FileNotFoundError, match="record_calibration"):
        FeetechArm(arm_config(bus_peer.port, tmp_path / "none.json"))


def test_a_late_first_answer_is_retried_not_reported_missing(bus_peer, calibrated):
    bus_peer.silence(0.04)  # the first ping's reply is lost (a glitch on the bus), the next is answered
    arm = FeetechArm(arm_config(bus_peer.port, calibrated))
    arm.connect()
    assert np.allclose(arm.observe().joint_pos, 0.0, atol=0.01)  # the centred pose
    arm.disconnect()


@pytest.mark.parametrize(
    "faults", [("short",), ("short", "short"), ("garbled",), ("garbled", "short", "garbled")], ids=lambda f: "+".join(f)
)
def test_short_or_garbled_replies_are_failed_transactions_that_are_retried(bus_peer, calibrated, faults):
    """The SDK raises IndexError from ping on a short or garbled reply (a glitch on a real bus does the same);
    a short reply to a sync read parses as position 0. Either is a failed transaction, retried."""
    arm = FeetechArm(arm_config(bus_peer.port, calibrated))
    bus_peer.corrupt_replies(*faults)
    arm.connect()
    try:
        for _ in range(3):
            bus_peer.corrupt_replies(*faults)
            assert np.allclose(arm.observe().joint_pos, 0.0, atol=0.01)  # the centred pose, never raw 0
        assert arm.stats["failed_reads"] == 0
    finally:
        arm.disconnect()
