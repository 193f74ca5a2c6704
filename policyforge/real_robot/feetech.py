"""Feetech STS bus-servo arms (SO-100 class) on `feetech-servo-sdk`: positions by sync read, goals by sync write,
joint angles through a calibration (each motor's centre and range, in raw steps) saved as JSON.

Calibration (`record_calibration`): pose the arm in its middle position (all joints centred), then move every
joint through its whole range while the positions are recorded; the centre becomes 0 rad and the range the
spec's joint limits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policyforge.io import atomic_path
from policyforge.real_robot.robot import Command, Robot, RobotSpec, RobotState

SO100_MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
TORQUE_ENABLE, GOAL_POSITION, PRESENT_POSITION = 40, 42, 56
STEPS_PER_TURN = 4096
RAD_PER_STEP = 2 * np.pi / STEPS_PER_TURN
MAX_SPEED = 2 * np.pi * 0.222 / 60 * 60  # STS3215: 0.222 s/60° at 12 V → ~4.7 rad/s
STALL_TORQUE = 2.9  # N·m (30 kg·cm)


@dataclasses.dataclass
class MotorCalibration:
    """One motor's calibration, raw steps (0 … 4095)."""

    id: int
    center: int
    """Position at the arm's middle pose: 0 rad."""
    range_min: int
    range_max: int


def save_calibration(path: Path, motors: dict[str, MotorCalibration]) -> None:
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(json.dumps({name: dataclasses.asdict(m) for name, m in motors.items()}, indent=2) + "\n")


def load_calibration(path: Path) -> dict[str, MotorCalibration]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no calibration at {path}: record one with record_calibration() first")
    return {name: MotorCalibration(**fields) for name, fields in json.loads(path.read_text()).items()}


@dataclasses.dataclass
class FeetechConfig:
    """A Feetech bus arm."""

    port: str = "/dev/ttyACM0"
    """Serial port of the bus adapter."""
    calibration: Path = Path("calibration/so100.json")
    """Calibration file (JSON)."""
    motors: tuple[str, ...] = SO100_MOTORS
    """Motor names, in bus order; their ids are 1, 2, … unless the calibration says otherwise."""
    baudrate: int = 1_000_000
    """Bus speed, baud."""
    rate_hz: float = 30.0
    """Command rate the spec announces."""
    reply_timeout: float | None = None
    """Wait at least this long for a servo's reply, s (None: the SDK's own, 2 ms plus twice the USB adapter's
    16 ms latency timer, ~34 ms at 1 Mbaud). Raise it for a bus emulated on a loaded computer, whose replies
    come when its thread is scheduled."""


class FeetechBus:
    """Sync reads and writes of one 2-byte register over the servos `ids`; `reply_timeout`: see FeetechConfig."""

    def __init__(self, port: str, baudrate: int, ids: list[int], reply_timeout: float | None = None):
        import scservo_sdk as scs

        self.scs, self.ids = scs, ids
        self.port = scs.PortHandler(port)
        if not self.port.openPort() or not self.port.setBaudRate(baudrate):
            raise ConnectionError(f"Feetech: cannot open {port} at {baudrate} baud")
        if reply_timeout is not None:  # the SDK sets its time-out per packet, from the packet's length
            sdk_timeout = self.port.setPacketTimeout

            def packet_timeout(packet_length: int) -> None:
                sdk_timeout(packet_length)
                self.port.packet_timeout = max(self.port.packet_timeout, reply_timeout * 1e3)  # ms

            self.port.setPacketTimeout = packet_timeout
        self.packets = scs.PacketHandler(0)  # STS/SMS: little-endian words
        self.reader = scs.GroupSyncRead(self.port, self.packets, PRESENT_POSITION, 2)
        for servo in ids:
            self.reader.addParam(servo)

    def ping(self, servo: int, attempts: int = 3) -> bool:
        """Whether `servo` answers; a late, short or garbled reply (a loaded host, a noisy bus) is retried
        before giving up."""
        for _ in range(attempts):
            if self._transfer(lambda: self.packets.ping(self.port, servo)[1]) == self.scs.COMM_SUCCESS:
                return True
        return False

    def write_each(self, address: int, values: dict[int, int], size: int = 2) -> None:
        writer = self.scs.GroupSyncWrite(self.port, self.packets, address, size)
        for servo, value in values.items():
            writer.addParam(servo, list(int(value).to_bytes(size, "little")))
        if self._transfer(writer.txPacket) != self.scs.COMM_SUCCESS:
            raise ConnectionError("Feetech: sync write failed")

    def positions(self, attempts: int = 3) -> np.ndarray:
        """Present positions [n] in raw steps; a read that fails (no, a late, a short or a garbled reply) is
        retried."""
        for _ in range(attempts):
            if self._transfer(self.reader.txRxPacket) == self.scs.COMM_SUCCESS and all(
                self.reader.isAvailable(servo, PRESENT_POSITION, 2) for servo in self.ids
            ):  # a short reply is a "success" whose data getData() would read as position 0
                break
        else:
            raise ConnectionError(f"Feetech: sync read of the positions failed {attempts} times")
        return np.array([self.reader.getData(servo, PRESENT_POSITION, 2) for servo in self.ids], dtype=np.int64)

    def close(self) -> None:
        self.port.closePort()

    def _transfer(self, call: Callable[[], int]) -> int:
        """A bus transaction's result code. Replies still in the input buffer (late ones) are dropped first.
        Any exception is a failed transaction: an adapter that vanished raises I/O errors (OSError,
        termios.error, serial.SerialException), and the SDK raises IndexError on a short or garbled reply
        instead of returning an error code."""
        try:
            self.port.ser.reset_input_buffer()
            return call()
        except Exception:
            self.port.is_using = False  # the SDK marks the port busy for the transaction and never released it
            return -1


def record_calibration(
    bus: FeetechBus, motors: tuple[str, ...], seconds: float, path: Path, done: threading.Event | None = None
) -> dict:
    """Centre = the positions now (the arm in its middle pose); range = the extremes seen while the joints are
    moved by hand for `seconds`, or until `done` is set (e.g. the operator pressed Enter). Saved to `path`."""
    center = bus.positions()
    low, high = center.copy(), center.copy()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (done is not None and done.is_set()):
        now = bus.positions()
        low, high = np.minimum(low, now), np.maximum(high, now)
        time.sleep(0.01)
    calibration = {
        name: MotorCalibration(servo, int(c), int(lo), int(hi))
        for name, servo, c, lo, hi in zip(motors, bus.ids, center, low, high, strict=True)
    }
    save_calibration(path, calibration)
    return calibration


class FeetechArm(Robot):
    """A calibrated Feetech bus arm; joint angles in rad (0 at the calibration's middle pose)."""

    def __init__(self, config: FeetechConfig | None = None):
        self.config = config or FeetechConfig()
        self.calibration = load_calibration(self.config.calibration)
        missing = [m for m in self.config.motors if m not in self.calibration]
        if missing:
            raise ValueError(f"{self.config.calibration} has no calibration for {missing}: record it again")
        motors = [self.calibration[m] for m in self.config.motors]
        self.ids = [m.id for m in motors]
        self.center = np.array([m.center for m in motors])
        self.raw_low, self.raw_high = np.array([m.range_min for m in motors]), np.array([m.range_max for m in motors])
        n = len(motors)
        self.spec = RobotSpec(
            name="feetech-arm",
            joint_names=tuple(self.config.motors),
            position_low=(self.raw_low - self.center) * RAD_PER_STEP,
            position_high=(self.raw_high - self.center) * RAD_PER_STEP,
            max_velocity=np.full(n, MAX_SPEED),
            max_torque=np.full(n, STALL_TORQUE),
            control_rate_hz=self.config.rate_hz,
            safe_mode="hold",
        )
        self.bus: FeetechBus | None = None
        self._previous: tuple[float, np.ndarray] | None = None
        self._last: RobotState | None = None
        self.stats = {"failed_reads": 0, "failed_writes": 0}

    def connect(self, timeout: float = 5.0) -> None:
        """Ping every servo and read the pose, retrying for up to `timeout` s (a servo that misses a reply is
        asked again); then hold the pose with torque on."""
        self.bus = FeetechBus(self.config.port, self.config.baudrate, self.ids, self.config.reply_timeout)
        deadline = time.monotonic() + timeout
        absent = dict(zip(self.config.motors, self.ids, strict=True))
        while absent:
            absent = {name: servo for name, servo in absent.items() if not self.bus.ping(servo, attempts=1)}
            if absent and time.monotonic() > deadline:
                self.bus.close()
                raise ConnectionError(
                    f"Feetech: no answer from {list(absent)} on {self.config.port} within {timeout} s "
                    "(check power and ids)"
                )
        while (pose := self._read_pose(deadline)) is None:
            pass
        self.bus.write_each(GOAL_POSITION, dict(zip(self.ids, pose, strict=True)))  # hold
        self.bus.write_each(TORQUE_ENABLE, dict.fromkeys(self.ids, 1), size=1)

    def _read_pose(self, deadline: float) -> np.ndarray | None:
        """The present positions (raw), or None to try again; past `deadline` the failure is raised."""
        try:
            return self.bus.positions()
        except ConnectionError:
            if time.monotonic() > deadline:
                self.bus.close()
                raise
            return None

    def observe(self) -> RobotState:
        """The joints now; when the bus does not answer, the last reading (its stamp shows its age)."""
        try:
            raw, now = self.bus.positions(), time.monotonic()
        except ConnectionError:
            self.stats["failed_reads"] += 1
            if self._last is None:
                raise
            return self._last
        position = (raw - self.center) * RAD_PER_STEP
        velocity = np.zeros_like(position)
        if self._previous is not None and now > self._previous[0]:
            velocity = (position - self._previous[1]) / (now - self._previous[0])
        self._previous = (now, position)
        self._last = RobotState(stamp=now, joint_pos=position, joint_vel=velocity)
        return self._last

    def send(self, command: Command) -> Command:
        raw = np.clip(np.round(self.center + command.position / RAD_PER_STEP), self.raw_low, self.raw_high)
        try:
            self.bus.write_each(GOAL_POSITION, dict(zip(self.ids, raw.astype(int), strict=True)))
        except ConnectionError:  # a dead bus: the servos keep their last goal (and torque)
            self.stats["failed_writes"] += 1
        return Command(position=(raw - self.center) * RAD_PER_STEP)

    def disconnect(self) -> None:
        """Hold the present pose (torque stays on: switched off, the arm would fall) and close the port."""
        if self.bus is None:
            return
        try:
            self.bus.write_each(GOAL_POSITION, dict(zip(self.ids, self.bus.positions(), strict=True)))
        except ConnectionError:
            self.stats["failed_writes"] += 1
        with contextlib.suppress(OSError, termios.error):
            self.bus.close()
        self.bus = None
