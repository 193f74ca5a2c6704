"""The driver contract every real robot implements.

A driver turns the robot's own protocol into three things: a `RobotSpec` (joints, limits, rate, the safe
command), `observe()` → `RobotState` and `send(Command)` → the command actually sent. It never decides what is
safe — that is the `SafetyFilter`'s job, upstream of `send` — but `disconnect()` always leaves the robot in its
safe mode (damping for legged robots, holding position for arms).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Literal

import numpy as np

SafeMode = Literal["damp", "hold"]


@dataclasses.dataclass(frozen=True)
class RobotSpec:
    """What the safety filter and the control loop need to know about a robot. Arrays are [J] in the driver's
    joint order, SI units (rad, rad/s, N·m, m)."""

    name: str
    """Robot model, e.g. "unitree-go2"."""
    joint_names: tuple[str, ...]
    """Joint (motor) order of every array."""
    position_low: np.ndarray
    """Lowest joint position, rad."""
    position_high: np.ndarray
    """Highest joint position, rad."""
    max_velocity: np.ndarray
    """Largest joint speed a command may ask for, rad/s."""
    max_torque: np.ndarray
    """Largest joint torque a command may produce (feed-forward plus PD), N·m."""
    control_rate_hz: float
    """Rate at which the robot expects commands."""
    safe_mode: SafeMode
    """What "safe" means: "damp" (zero stiffness, damping only: legged robots sink slowly) or "hold" (hold the
    current position: arms)."""
    damping_kd: np.ndarray | None = None
    """Damping gain of the "damp" mode, N·m·s/rad."""
    workspace_low: np.ndarray | None = None
    """Lower corner [3] of the box the end effector must stay in (arms), m, robot base frame."""
    workspace_high: np.ndarray | None = None
    """Upper corner [3] of that box, m."""

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)


@dataclasses.dataclass
class RobotState:
    """One reading of the robot. Arrays [J] in the spec's joint order."""

    stamp: float
    """`time.monotonic()` when the driver received this reading, s."""
    joint_pos: np.ndarray
    """Joint positions, rad."""
    joint_vel: np.ndarray
    """Joint velocities, rad/s."""
    joint_torque: np.ndarray | None = None
    """Measured (estimated) joint torques, N·m."""
    imu_quat: np.ndarray | None = None
    """Base orientation [4] (w, x, y, z), legged robots."""
    gyro: np.ndarray | None = None
    """Base angular velocity [3] in the base frame, rad/s."""
    accelerometer: np.ndarray | None = None
    """Base specific force [3] in the base frame, m/s²."""
    ee_pos: np.ndarray | None = None
    """End-effector position [3] in the base frame (arms), m."""
    sequence: int = 0
    """The robot's own counter of this reading (tick), to tell fresh readings from repeats."""
    robot_time: float | None = None
    """The robot's own time stamp of this reading, s (its clock, not ours)."""


@dataclasses.dataclass
class Command:
    """A joint-space command: the motors track `position` and `velocity` with gains `kp`, `kd` and add `torque`
    (τ = τ_ff + kp (q* − q) + kd (q̇* − q̇)). Drivers of position-controlled arms use `position` only. Arrays [J]."""

    position: np.ndarray
    """Target joint positions q*, rad."""
    velocity: np.ndarray | None = None
    """Target joint velocities q̇*, rad/s (default 0)."""
    torque: np.ndarray | None = None
    """Feed-forward torques τ_ff, N·m (default 0)."""
    kp: np.ndarray | None = None
    """Position gains, N·m/rad (robots with joint-level PD)."""
    kd: np.ndarray | None = None
    """Velocity gains, N·m·s/rad."""
    ee_target: np.ndarray | None = None
    """Cartesian mode (arms): the end-effector position target [3] in the base frame, m; `position` then holds
    the joint solution the driver will reach it with (or the current joints)."""
    ee_orientation: np.ndarray | None = None
    """Cartesian mode: the end-effector orientation target [4] (w, x, y, z)."""
    valid_until: float | None = None
    """`time.monotonic()` after which this command must not reach the motors, s: the safety filter's PD-torque
    bound holds only if it lands by then (the filter's time plus `SafetyConfig.torque_horizon`). A driver of
    PD-controlled motors checks it right before the command leaves and sends its safe command instead when it is
    late (the process was held up in between). None: no deadline."""

    def copy(self) -> Command:
        return Command(**{f.name: _copy(getattr(self, f.name)) for f in dataclasses.fields(self)})


def _copy(value: np.ndarray | float | None) -> np.ndarray | float | None:
    if value is None or isinstance(value, float):
        return value
    return np.array(value, dtype=np.float64)


def safe_command(spec: RobotSpec, state: RobotState) -> Command:
    """The command of the robot's safe mode at `state`: hold the measured position (zero velocity), or damp
    (no stiffness, damping only, no feed-forward); the position within the joint limits either way."""
    zeros = np.zeros(spec.num_joints)
    state = dataclasses.replace(state, joint_pos=np.clip(state.joint_pos, spec.position_low, spec.position_high))
    if spec.safe_mode == "damp":
        kd = spec.damping_kd if spec.damping_kd is not None else np.ones(spec.num_joints)
        return Command(position=state.joint_pos.copy(), velocity=zeros, torque=zeros.copy(), kp=zeros.copy(), kd=kd)
    return Command(position=state.joint_pos.copy(), velocity=zeros, torque=zeros.copy())


MAX_CLOCK_DRIFT = 1e-4
"""How fast the robot's clock may fall behind this computer's, s per s: 100 ppm, twice what two ordinary
quartz clocks drift apart (±50 ppm each)."""


class RobotClock:
    """Maps the robot's own time stamps (the LowState tick, ms) onto this computer's monotonic clock, so that a
    state delayed in transit is seen as old, not fresh. The offset between the clocks is the smallest seen
    (the fastest delivery), allowed to creep up by `drift` s per s so that a robot clock running slow does not
    make every state look older and older.

    `drift` bounds what sustained latency can hide: a delay that persists is mistaken for clock drift at that
    rate. At the former 2 %/s a loaded computer's 20–45 ms of delivery delay was absorbed within 1–2 s; states
    that old then looked fresh, the PD-torque bound allowed for too little joint motion, and the Go2 peer
    counted torque_limit commands (tests/real_robot/test_latency.py). At 100 ppm it takes 100 s to hide 10 ms."""

    def __init__(self, drift: float = MAX_CLOCK_DRIFT):
        self.drift = drift
        self.offset: float | None = None
        self.last_now = 0.0

    def stamp(self, robot_time: float, now: float) -> float:
        """When a state stamped `robot_time` (s) by the robot was measured, in `time.monotonic()` seconds."""
        offset = now - robot_time
        if self.offset is None or offset < self.offset:
            self.offset = offset
        else:
            self.offset = min(offset, self.offset + self.drift * (now - self.last_now))
        self.last_now = now
        return robot_time + self.offset


class Robot(abc.ABC):
    """A connection to one robot. Use as a context manager: leaving the block (normally, by an exception or a
    signal) puts the robot in its safe mode and disconnects."""

    spec: RobotSpec

    @abc.abstractmethod
    def connect(self, timeout: float = 5.0) -> None:
        """Open the connection and wait (≤ timeout s) for the first state; raise ConnectionError if none comes."""

    @abc.abstractmethod
    def observe(self) -> RobotState:
        """The latest state (non-blocking; its `stamp` tells how old it is)."""

    @abc.abstractmethod
    def send(self, command: Command) -> Command:
        """Send one command (already filtered); returns what was actually sent, after the driver's own
        conversions (e.g. float32 rounding, a gripper's discrete states)."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Put the robot in its safe mode, then close the connection. Idempotent."""

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc_info) -> None:
        self.disconnect()
