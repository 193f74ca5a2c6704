"""Universal Robots (e-Series) driver on `ur-rtde`: state through RTDE outputs (`RTDEReceiveInterface`), joint
targets streamed with `servoJ` (`RTDEControlInterface`).

Both paths are tested with the real ur-rtde 1.6.5 client against our simulated controller on 127.0.0.1
(`peers/rtde_sim.py`, `peers/ur_script.py`, `peers/ur_motion.py`): RTDE negotiation and streaming (readings
checked exactly), the dashboard server's answers, the upload of ur-rtde's URScript program to the script port,
the register handshake with an emulation of that program's main loop, servoJ targets streamed through the
safety filter moving a joint model to a goal with no unsafe target reaching the controller, `disconnect()`
stopping the arm (servoStop, stopScript), and `send` failing clearly once the program was stopped.
Not tested: real URScript execution (the peer emulates the program's command loop; its servoj is first-order
tracking in joint space and its stopl a joint-space ramp, not UR's interpolator), the robot's dynamics and
payload, protective and emergency stops and their recovery, the pendant's remote-control mode (ur-rtde checks it
only for hosts other than 127.0.0.1), the state stream on the script port, and ur-rtde's reconnect after a lost
connection.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from policyforge.real_robot.robot import Command, Robot, RobotClock, RobotSpec, RobotState

UR5E_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3")
OUTPUTS = ["timestamp", "actual_q", "actual_qd", "actual_current", "actual_TCP_pose", "robot_mode", "safety_mode"]
"""The RTDE outputs the driver subscribes to."""
ROBOT_MODE_RUNNING, SAFETY_MODE_NORMAL = 7, 1


def ur5e_spec(rate_hz: float = 500.0) -> RobotSpec:
    """UR5e limits (datasheet): ±360° per joint (elbow ±180° in practice), 180°/s, 150/150/150/28/28/28 N·m."""
    two_pi = 2 * np.pi
    return RobotSpec(
        name="ur5e",
        joint_names=UR5E_JOINTS,
        position_low=np.array([-two_pi, -two_pi, -np.pi, -two_pi, -two_pi, -two_pi]),
        position_high=np.array([two_pi, two_pi, np.pi, two_pi, two_pi, two_pi]),
        max_velocity=np.full(6, np.pi),
        max_torque=np.array([150.0, 150.0, 150.0, 28.0, 28.0, 28.0]),
        control_rate_hz=rate_hz,
        safe_mode="hold",
    )


@dataclasses.dataclass
class URConfig:
    """Connection to a UR controller."""

    host: str = "127.0.0.1"
    """The controller's IP address."""
    frequency: float = 500.0
    """RTDE output frequency and servoJ rate, Hz (e-Series: up to 500); each servoJ controls the arm for
    1/frequency s, so run the control loop at this rate."""
    control: bool = True
    """Open the control interface (servoJ); False: read-only, e.g. to monitor a robot another program drives."""
    servo_lookahead: float = 0.1
    """servoJ lookahead time, s (0.03 … 0.2: smaller follows the targets more tightly)."""
    servo_gain: float = 300.0
    """servoJ proportional gain (100 … 2000)."""


class UR(Robot):
    """A UR arm through ur-rtde."""

    def __init__(self, config: URConfig | None = None):
        self.config = config or URConfig()
        self.spec = ur5e_spec(self.config.frequency)
        self.receive = self.control = None
        self._clock = RobotClock()
        self.stats = {"commands": 0}

    def connect(self, timeout: float = 5.0) -> None:
        import rtde_receive

        deadline = time.monotonic() + timeout
        while self.receive is None:  # a controller that is still booting refuses connections for a while
            try:
                self.receive = rtde_receive.RTDEReceiveInterface(self.config.host, self.config.frequency, OUTPUTS)
            except RuntimeError as err:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"UR: no RTDE interface at {self.config.host}:30004 within {timeout} s ({err})"
                    ) from err
                time.sleep(0.2)
        if self.config.control:
            import rtde_control

            try:
                self.control = rtde_control.RTDEControlInterface(self.config.host, self.config.frequency)
            except RuntimeError as err:
                self.receive.disconnect()
                self.receive = None
                raise ConnectionError(
                    f"UR: the control interface at {self.config.host} did not start ({err}); it needs the dashboard "
                    "server (29999), the script port (30003) and a controller in remote control that runs the "
                    "uploaded URScript"
                ) from err

    def observe(self) -> RobotState:
        if self.receive is None:
            raise RuntimeError("UR: not connected (call connect() or use `with UR(...) as robot`)")
        # ur-rtde updates each output in a background thread: read until one data package's values were read
        # together (the controller's timestamp unchanged across the reads)
        for _ in range(5):
            robot_time = self.receive.getTimestamp()
            q, qd, pose = self.receive.getActualQ(), self.receive.getActualQd(), self.receive.getActualTCPPose()
            if self.receive.getTimestamp() == robot_time:
                break
        state = RobotState(
            stamp=self._clock.stamp(robot_time, time.monotonic()),
            joint_pos=np.array(q),
            joint_vel=np.array(qd),
            ee_pos=np.array(pose[:3]),
            robot_time=robot_time,
        )
        running = self.receive.getRobotMode() == ROBOT_MODE_RUNNING
        if not running or self.receive.getSafetyMode() != SAFETY_MODE_NORMAL:
            state.stamp = -np.inf  # not accepting motion (stopped, protective stop): the filter holds
        return state

    def send(self, command: Command) -> Command:
        if self.control is None:
            raise RuntimeError("UR: connected read-only (URConfig.control=False); cannot send commands")
        period = 1.0 / self.config.frequency
        velocity = acceleration = 0.0  # servoJ ignores them in this controller version
        sent = self.control.servoJ(
            list(map(float, command.position)), velocity, acceleration, period,
            self.config.servo_lookahead, self.config.servo_gain,
        )  # fmt: skip
        if not sent:
            raise RuntimeError(
                "UR: servoJ was refused: the control script is not running (stopped on the pendant or by a runtime "
                "error) or the robot is in a protective or emergency stop; clear it, then reconnect"
            )
        self.stats["commands"] += 1
        return command

    def disconnect(self) -> None:
        """Stop servoing (the arm decelerates and holds), end the control script and close both interfaces."""
        try:
            if self.control is not None:
                self.control.servoStop()
                self.control.stopScript()
                self.control.disconnect()
        finally:
            self.control = None
            if self.receive is not None:
                self.receive.disconnect()
                self.receive = None
