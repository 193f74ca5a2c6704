"""Unitree Go2 low-level driver over DDS: `rt/lowcmd` out, `rt/lowstate` in, with Unitree's own message types
(`unitree_sdk2py`, wire-compatible with the official SDK) and its CRC32 on every LowCmd.

On a real Go2 the sport (motion) mode must be released first (Unitree app or `MotionSwitcherClient`), or the
robot's own controller fights these commands; the driver refuses to connect without `motion_mode_released=True`
as a reminder. Motors 12–19 of the 20-slot message are unused on the Go2 and are sent Unitree's "stop" values.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import mujoco
import numpy as np
from cyclonedds.core import Policy, Qos
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowCmd_, unitree_go_msg_dds__LowState_
from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_, LowState_
from unitree_sdk2py.utils.crc import CRC

from policyforge.config import check
from policyforge.real_robot import dds
from policyforge.real_robot.robot import Command, Robot, RobotClock, RobotSpec, RobotState
from policyforge.sims.task import asset_path
from policyforge.sims.tasks.quadruped import JOINT_NAMES

NUM_MOTORS = 12
LOWCMD_TOPIC, LOWSTATE_TOPIC = "rt/lowcmd", "rt/lowstate"
HEAD = (0xFE, 0xEF)
LOW_LEVEL = 0xFF
SERVO_MODE = 0x01
POS_STOP, VEL_STOP = 2.146e9, 16000.0
"""Unitree's "no position / velocity target" values for unused motor slots."""
MAX_JOINT_SPEED = 30.0
"""Go2 motor no-load speed bound used as the velocity limit, rad/s."""
DAMPING_KD = 3.0
"""Damping gain of the safe mode, N·m·s/rad."""


@functools.cache
def go2_spec() -> RobotSpec:
    """Joint order, limits and rates of the Go2, read from the simulator's model (go2.xml) so that sim and
    deployment share one source."""
    model = mujoco.MjModel.from_xml_path(str(asset_path("go2.xml")))
    joints = [model.joint(name).id for name in JOINT_NAMES]
    return RobotSpec(
        name="unitree-go2",
        joint_names=JOINT_NAMES,
        position_low=model.jnt_range[joints, 0].copy(),
        position_high=model.jnt_range[joints, 1].copy(),
        max_velocity=np.full(NUM_MOTORS, MAX_JOINT_SPEED),
        max_torque=model.actuator_forcerange[:NUM_MOTORS, 1].copy(),
        control_rate_hz=500.0,
        safe_mode="damp",
        damping_kd=np.full(NUM_MOTORS, DAMPING_KD),
    )


# -- messages (shared with the simulated peer) -------------------------------------------------------------


def lowcmd_message(command: Command, sequence: int = 0) -> LowCmd_:
    """A LowCmd_ with CRC for `command` (arrays [12]; missing velocity/torque/gains are 0). The unused `reserve`
    word carries `sequence` (the robot ignores it; our peer counts lost commands with it)."""
    msg = unitree_go_msg_dds__LowCmd_()
    msg.head, msg.level_flag, msg.reserve = list(HEAD), LOW_LEVEL, sequence & 0xFFFFFFFF
    zeros = np.zeros(NUM_MOTORS)
    fields = [command.position, command.velocity, command.torque, command.kp, command.kd]
    q, dq, tau, kp, kd = (zeros if a is None else np.asarray(a, dtype=np.float32) for a in fields)
    for i, motor in enumerate(msg.motor_cmd):
        if i < NUM_MOTORS:
            motor.mode, motor.q, motor.dq, motor.tau = SERVO_MODE, float(q[i]), float(dq[i]), float(tau[i])
            motor.kp, motor.kd = float(kp[i]), float(kd[i])
        else:
            motor.q, motor.dq = POS_STOP, VEL_STOP
    msg.crc = CRC().Crc(msg)
    return msg


def lowcmd_command(msg: LowCmd_) -> Command:
    """The joint command [12] a LowCmd_ carries (what the motors will track)."""
    motors = msg.motor_cmd[:NUM_MOTORS]
    column = lambda name: np.array([getattr(m, name) for m in motors], dtype=np.float64)  # noqa: E731
    return Command(column("q"), column("dq"), column("tau"), column("kp"), column("kd"))


def lowstate_state(msg: LowState_, stamp: float) -> RobotState:
    """The RobotState a LowState_ carries, received at `stamp` (monotonic s)."""
    motors = msg.motor_state[:NUM_MOTORS]
    column = lambda name: np.array([getattr(m, name) for m in motors], dtype=np.float64)  # noqa: E731
    imu = msg.imu_state
    return RobotState(
        stamp=stamp,
        joint_pos=column("q"),
        joint_vel=column("dq"),
        joint_torque=column("tau_est"),
        imu_quat=np.array(imu.quaternion, dtype=np.float64),
        gyro=np.array(imu.gyroscope, dtype=np.float64),
        accelerometer=np.array(imu.accelerometer, dtype=np.float64),
        sequence=int(msg.tick),
    )


def crc_ok(msg: LowCmd_ | LowState_) -> bool:
    return CRC().Crc(msg) == msg.crc


QUATERNION_TOLERANCE = 0.05
"""How far from 1 the length of a state's IMU quaternion may be before the state is refused as invalid."""


def state_invalid(msg: LowState_) -> str | None:
    """Why a LowState cannot be a measurement (a non-finite value, an IMU quaternion that is not a rotation: a
    simulator bridge publishes all zeros before its first physics step), or None if it can."""
    motors = msg.motor_state[:NUM_MOTORS]
    values = [m.q for m in motors] + [m.dq for m in motors] + [*msg.imu_state.quaternion, *msg.imu_state.gyroscope]
    if not np.all(np.isfinite(values)):
        return "non-finite joint or IMU value"
    norm = float(np.linalg.norm(msg.imu_state.quaternion))
    if abs(norm - 1.0) > QUATERNION_TOLERANCE:
        return f"IMU quaternion of length {norm:.3g}"
    return None


def empty_lowstate() -> LowState_:
    return unitree_go_msg_dds__LowState_()


# -- driver ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Go2Config:
    """Connection to a Go2 (or its simulated peer)."""

    interface: str = "lo"
    """Network interface of the robot's Ethernet link (e.g. "eth0"); "lo" for the simulated peer."""
    domain_id: int = 0
    """DDS domain (the Go2 uses 0)."""
    motion_mode_released: bool = False
    """Set once the Go2's sport mode is released (required on hardware; the simulated peer has none)."""
    simulator_bridge: bool = False
    """The LowStates come from a simulator bridge that leaves `crc` and `tick` empty (Unitree's unitree_mujoco):
    accept `crc` 0 (a wrong non-zero CRC is still refused) and stamp each state with the time the bridge wrote it
    (its DDS source time stamp: `tick` never advances there). Loopback only: on a robot's link the CRC is what keeps
    a corrupt state out of the loop."""

    def __post_init__(self) -> None:
        check(
            not self.simulator_bridge or self.interface == "lo",
            "simulator_bridge",
            f"only on the loopback ('lo'), where a simulator bridge runs, not on {self.interface!r}: a real Go2 fills "
            "`crc` and `tick`, and a state that fails its CRC must not reach the loop",
        )


class Go2(Robot):
    """Unitree Go2 in low-level mode. `observe()` returns the newest LowState with a valid CRC that is a
    measurement (corrupt and invalid ones are counted in `stats`); `send()` publishes one LowCmd."""

    def __init__(self, config: Go2Config | None = None):
        self.config = config or Go2Config()
        self.spec = go2_spec()
        self.stats = {"states": 0, "bad_crc_states": 0, "invalid_states": 0, "commands": 0, "late_commands": 0}
        self.stats["max_state_gap_ms"] = 0.0
        self.first_invalid: str | None = None
        """Why the first refused state was invalid (`state_invalid`)."""
        self._latest: RobotState | None = None
        self._clock = RobotClock()
        self._participant = self._writer = self._reader = None

    def connect(self, timeout: float = 5.0) -> None:
        if self.config.interface != "lo" and not self.config.motion_mode_released:
            raise RuntimeError(
                "Go2: release the sport (motion) mode first (Unitree app or MotionSwitcherClient.ReleaseMode()), "
                "then pass motion_mode_released=True; otherwise the robot's controller fights the low-level commands"
            )
        self._participant = dds.participant(self.config.domain_id, self.config.interface)
        self._writer = DataWriter(self._participant, Topic(self._participant, LOWCMD_TOPIC, LowCmd_))
        newest_only = Qos(Policy.History.KeepLast(1), Policy.Reliability.BestEffort)
        self._reader = DataReader(
            self._participant, Topic(self._participant, LOWSTATE_TOPIC, LowState_), qos=newest_only
        )
        deadline = time.monotonic() + timeout
        # both directions: a state came, and the robot's rt/lowcmd reader has matched this writer (until it has,
        # DDS drops the commands written, which on a loaded computer can be the first ones of the prepare ramp)
        while self._poll() is None or self._writer.get_publication_matched_status().current_count == 0:
            if time.monotonic() > deadline:
                message = self._no_connection(timeout)
                self.disconnect()
                raise ConnectionError(message)
            time.sleep(0.002)

    def _no_connection(self, timeout: float) -> str:
        """Why `connect` gave up: what was missing, and the states that came but were refused, by cause."""
        where = f"within {timeout} s on interface {self.config.interface!r}, DDS domain {self.config.domain_id}"
        if self._latest is not None:
            return f"Go2: no subscriber of rt/lowcmd {where}: is the robot's low-level controller running?"
        stats = self.stats
        received = stats["bad_crc_states"] + stats["invalid_states"]
        if received == 0:
            return f"Go2: no rt/lowstate {where}: is the robot (or `policyforge deploy --peer sim`) running there?"
        causes = [f"{stats['bad_crc_states']} for a wrong CRC"] if stats["bad_crc_states"] else []
        if stats["invalid_states"]:
            causes.append(f"{stats['invalid_states']} as no measurement ({self.first_invalid})")
        hint = (
            "; a simulator bridge that leaves crc 0 (Unitree's unitree_mujoco): pass simulator_bridge=True "
            "(`deploy --simulator-bridge`)"
            if stats["bad_crc_states"] and not self.config.simulator_bridge
            else ""
        )
        return f"Go2: no valid rt/lowstate {where}: {received} received, refused {' and '.join(causes)}{hint}"

    def _poll(self) -> RobotState | None:
        """Take the newest LowState, if one came since the last poll (the reader keeps only the newest, so a
        500 Hz stream costs one deserialisation per poll, not per message)."""
        for msg in self._reader.take(N=1):
            if not isinstance(msg, LowState_):  # a disposed instance (the peer left)
                continue
            bridge = self.config.simulator_bridge
            if not (crc_ok(msg) or (bridge and msg.crc == 0)):
                self.stats["bad_crc_states"] += 1
                continue
            invalid = state_invalid(msg)
            if invalid is not None:
                self.stats["invalid_states"] += 1
                self.first_invalid = self.first_invalid or invalid
                continue
            now = time.monotonic()
            if bridge:  # written when, on this computer's clocks (loopback: the bridge shares them)
                state = lowstate_state(msg, now - max(time.time() - msg.sample_info.source_timestamp * 1e-9, 0.0))
            else:
                state = lowstate_state(msg, self._clock.stamp(msg.tick * 1e-3, now))
                state.robot_time = msg.tick * 1e-3
            self.stats["states"] += 1
            if self._latest is not None:
                gap_ms = (state.stamp - self._latest.stamp) * 1e3
                self.stats["max_state_gap_ms"] = max(self.stats["max_state_gap_ms"], gap_ms)
            self._latest = state
        return self._latest

    def observe(self) -> RobotState:
        """The newest state; its `stamp` is when the robot measured it, on this computer's clock (`RobotClock`):
        a delayed message looks as old as it is, and a repeat keeps its old stamp."""
        if self._reader is None:
            raise RuntimeError("Go2: not connected (call connect() or use `with Go2(...) as robot`)")
        return self._poll()

    def send(self, command: Command) -> Command:
        """Publish one LowCmd; returns the command sent: `command`, or damping when it missed its deadline
        (`Command.valid_until`: this process was held up since the filter checked it against a state the joints
        have since left; counted in `stats["late_commands"]`)."""
        self.stats["commands"] += 1
        msg = lowcmd_message(command, self.stats["commands"])
        if command.valid_until is not None and time.monotonic() > command.valid_until:  # checked last thing
            self.stats["late_commands"] += 1
            msg = lowcmd_message(self._damping(), self.stats["commands"])
        self._writer.write(msg)
        return lowcmd_command(msg)

    def _damping(self) -> Command:
        """The safe mode at the newest state: no stiffness, damping only."""
        zeros = np.zeros(NUM_MOTORS)
        position = self._latest.joint_pos if self._latest is not None else zeros
        return Command(position, zeros, zeros, zeros, self.spec.damping_kd)

    def disconnect(self) -> None:
        if self._writer is None:
            return
        if self._latest is not None:  # the motors keep the last command: make it damping
            for _ in range(3):
                self.send(self._damping())
        self._writer = self._reader = self._participant = None
