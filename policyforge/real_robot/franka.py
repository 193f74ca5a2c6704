"""Franka Research 3 / Panda driver on `franky-control` (libfranka's protocol), in joint-position or Cartesian
mode. Each `send` replaces the running motion asynchronously (franky plans a smooth, limit-respecting
trajectory to the new target inside libfranka's 1 kHz loop), so a 25 Hz policy drives the arm directly.

Tested against `franky-sim` (a MuJoCo Franka speaking the libfranka protocol on 127.0.0.1). On hardware use
a real-time kernel (`realtime=True`) and the robot's IP address.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import threading
import time
from typing import Literal

import numpy as np

from policyforge.config import check
from policyforge.real_robot import netbind
from policyforge.real_robot.realtime import scheduling_kept
from policyforge.real_robot.robot import Command, Robot, RobotSpec, RobotState
from policyforge.sims.tasks.arm_base import ARM_JOINTS, VELOCITY_LIMITS
from policyforge.sims.tasks.arm_tasks import ArmReach

FR3_LOW = np.array([-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159])
FR3_HIGH = np.array([2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159])
"""Franka Research 3 joint limits, rad (datasheet); the spec uses their intersection with the Panda's."""
MAX_TORQUE = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
"""Joint torque limits, N·m."""
WORKSPACE = (np.array([0.2, -0.5, 0.05]), np.array([0.8, 0.5, 0.8]))
"""Default end-effector box in the base frame, m: in front of the robot, above the table."""
FRANKA_SAFETY = {"max_step": 0.2, "state_timeout": 0.2, "command_timeout": 0.5, "workspace_margin": 0.05}
"""SafetyConfig fields of a Franka deployment: 25 Hz targets lead the joints by up to two control steps, and
targets stay 5 cm inside the workspace box, for the arm overshoots a target by its stopping distance."""
MOTION_WAIT_S = 10.0
"""Longest wait for a motion to end (before switching between joint and Cartesian motions, or stopping), s: at
half the dynamics limits the arm crosses its workspace in ~3 s, so a motion still running after this will not end
(a stalled connection or controller); the driver stops it and raises instead of blocking the control loop."""
RELEASE_WAIT_S = 5.0
"""Longest wait for franky to close the connection on disconnect, s. franky's destructor stops a running motion and
joins its control thread with no time limit; past this the release finishes in a background thread and disconnect
returns (ci-under-load 2026-12-05: a destructor blocked 15 min after a NaN-actions fault, the arm already held)."""

log = logging.getLogger("policyforge.franka")


@functools.cache
def franka_spec(rate_hz: float = 25.0) -> RobotSpec:
    """Limits valid on both the Panda (the simulator's model) and the FR3; hold as the safe mode."""
    model = ArmReach.load_model(ArmReach.config_class())
    ranges = model.jnt_range[[model.joint(j).id for j in ARM_JOINTS]]
    return RobotSpec(
        name="franka",
        joint_names=ARM_JOINTS,
        position_low=np.maximum(ranges[:, 0], FR3_LOW),
        position_high=np.minimum(ranges[:, 1], FR3_HIGH),
        max_velocity=VELOCITY_LIMITS.copy(),
        max_torque=MAX_TORQUE.copy(),
        control_rate_hz=rate_hz,
        safe_mode="hold",
        workspace_low=WORKSPACE[0].copy(),
        workspace_high=WORKSPACE[1].copy(),
    )


@dataclasses.dataclass
class FrankaConfig:
    """Connection to a Franka arm (or franky-sim)."""

    host: str = "127.0.0.1"
    """The robot's (FCI) IP address; 127.0.0.1 for franky-sim."""
    mode: Literal["joint", "cartesian"] = "joint"
    """Send joint-position targets, or end-effector pose targets (Command.ee_target / ee_orientation)."""
    dynamics_factor: float = 0.5
    """franky's relative_dynamics_factor: fraction of the robot's velocity, acceleration and jerk limits."""
    realtime: bool = False
    """Require a real-time kernel (hardware); off for franky-sim."""
    rate_hz: float = 25.0
    """Command rate the spec announces (the policy's rate)."""
    workspace_low_z: float | None = None
    """The workspace box's floor, m in the base frame (targets stay the safety filter's workspace_margin above it);
    None: WORKSPACE's 0.05 m, over the table. A task at table height needs it lower (`deploy --workspace-floor`)."""

    def __post_init__(self) -> None:
        floor = self.workspace_low_z
        high = float(WORKSPACE[1][2])
        ok = floor is None or (isinstance(floor, int | float) and math.isfinite(floor) and -0.2 <= floor < high)
        check(ok, "workspace_low_z", f"must be a height in [-0.2, {high:g}) m of the base frame, got {floor!r}")


class Franka(Robot):
    """A Franka arm through franky. `observe()` reads the latest libfranka state; `send()` starts a motion to
    the command's target, replacing the one in progress."""

    def __init__(self, config: FrankaConfig | None = None):
        self.config = config or FrankaConfig()
        self.spec = franka_spec(self.config.rate_hz)
        if self.config.workspace_low_z is not None:
            low = self.spec.workspace_low.copy()
            low[2] = self.config.workspace_low_z
            self.spec = dataclasses.replace(self.spec, workspace_low=low)
        self.robot = None
        self.stats = {"commands": 0, "motion_errors": 0, "planner_errors": 0}
        self._motion_type: type | None = None
        self._seen: tuple[float, float] = (-1.0, 0.0)
        """The newest libfranka state's robot time and when this driver first read it (monotonic s)."""

    def connect(self, timeout: float = 5.0) -> None:
        # libfranka raises the calling thread to SCHED_FIFO 99 wherever permitted and leaves it there; the control
        # loop sets its own thread's scheduling (LoopConfig), so the caller's is put back
        with scheduling_kept():
            self._connect(timeout)

    def _connect(self, timeout: float) -> None:
        import franky

        realtime = franky.RealtimeConfig.Enforce if self.config.realtime else franky.RealtimeConfig.Ignore
        deadline, error = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                before = netbind.socket_fds()
                self.robot = franky.Robot(self.config.host, realtime_config=realtime)
                # libfranka's UDP socket (states in, commands out) listens on 0.0.0.0: only the robot's link
                netbind.bind_wildcard_sockets(netbind.socket_fds() - before, netbind.interface_to(self.config.host))
                break
            except Exception as err:  # libfranka raises NetworkException until the server answers
                error = err
                time.sleep(0.2)
        if self.robot is None:
            raise ConnectionError(f"Franka: no robot answered at {self.config.host} within {timeout} s ({error})")
        self.robot.recover_from_errors()
        self.robot.relative_dynamics_factor = self.config.dynamics_factor

    def observe(self) -> RobotState:
        if self.robot is None:
            raise RuntimeError("Franka: not connected (call connect() or use `with Franka(...) as robot`)")
        state = self.robot.state
        robot_time = state.time.to_sec()
        if robot_time != self._seen[0]:  # a new state: stamp it now; one that stops advancing grows old (stale)
            self._seen = (robot_time, time.monotonic())
        return RobotState(
            stamp=self._seen[1],
            joint_pos=np.array(state.q, dtype=np.float64),
            joint_vel=np.array(state.dq, dtype=np.float64),
            joint_torque=np.array(state.tau_J, dtype=np.float64),
            ee_pos=np.array(state.O_T_EE.translation, dtype=np.float64),
        )

    def send(self, command: Command) -> Command:
        import franky

        if self.config.mode == "cartesian" and command.ee_target is not None:
            w, x, y, z = command.ee_orientation if command.ee_orientation is not None else (0.0, 1.0, 0.0, 0.0)
            pose = franky.Affine(list(map(float, command.ee_target)), [x, y, z, w])  # franky: (x, y, z, w)
            motion = franky.CartesianMotion(pose, franky.ReferenceType.Absolute)
        else:
            motion = franky.JointMotion(list(map(float, command.position)))
        if self._motion_type not in (None, type(motion)):  # franky cannot switch types mid-motion
            self._wait_for_motion_end(franky)
        self._motion_type = type(motion)
        try:
            self.robot.move(motion, asynchronous=True)
        except franky.ControlException:
            self.stats["motion_errors"] += 1  # a reflex stopped the robot: recover, the next command continues
            self.robot.recover_from_errors()
        except RuntimeError as error:  # franky's trajectory planner (ruckig) found no trajectory to the target
            if "planner" not in str(error).lower():
                raise
            self.stats["planner_errors"] += 1
            self._stop(franky)  # instead: hold where the arm is
            return Command(position=np.array(self.robot.state.q, dtype=np.float64))
        self.stats["commands"] += 1
        return command

    def _wait_for_motion_end(self, franky) -> None:
        """Block until the motion in progress ends, at most `MOTION_WAIT_S`; past that, stop it and raise
        `TimeoutError`."""
        if not self.robot.join_motion(MOTION_WAIT_S):
            self._stop(franky)
            raise TimeoutError(f"Franka: the motion in progress did not end within {MOTION_WAIT_S} s; stopped it")

    def _stop(self, franky) -> None:
        """Start decelerating to a stop where the arm is (the motion in progress aimed at an older target). Errors
        are swallowed: this is the way out, also when the connection is gone."""
        stop = franky.CartesianStopMotion() if self._motion_type is franky.CartesianMotion else franky.JointStopMotion()
        try:
            self.robot.move(stop, asynchronous=True)
        except Exception:
            with contextlib.suppress(Exception):
                self.robot.recover_from_errors()

    def disconnect(self) -> None:
        """Stop the motion in progress; the arm holds its position under its own controller."""
        if self.robot is None:
            return
        import franky

        self._stop(franky)
        with contextlib.suppress(Exception):  # disconnecting: a motion that will not end is the robot's to stop
            self._wait_for_motion_end(franky)
        holder, self.robot = [self.robot], None
        if not release(holder, RELEASE_WAIT_S):
            log.warning(
                "Franka: franky did not close its connection within %.0f s (its motion thread is still running); "
                "it finishes in the background. The arm holds under its own controller.",
                RELEASE_WAIT_S,
            )


def release(holder: list, wait_s: float) -> bool:
    """Drop the references in `holder` (the caller's last ones) in a daemon thread, so that a destructor that blocks
    cannot block the caller; True when they were gone within `wait_s`. A destructor still blocked at exit is left
    with its daemon thread."""
    done = threading.Event()

    def drop() -> None:
        holder.clear()
        done.set()

    threading.Thread(target=drop, name="franky-release", daemon=True).start()
    return done.wait(wait_s)
