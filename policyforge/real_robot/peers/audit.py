"""The audit of what reached "the motors": one `TargetAudit`, with one set of tolerances, that every protocol peer
runs on the commands it receives — the simulated Go2 (LowCmd), the simulated UR controller (servoJ targets) —
and that the fault-injection harness runs on the Feetech goals a bus peer saw and on the Franka commands handed
to franky (`real_robot/testing/faults.py`).

It is the oracle that checks the safety filter, so it is kept independent of `real_robot/safety.py` on purpose:
it shares no code and no constants with the filter (only the data types of `robot.py` and the robot's limits in
its `RobotSpec`). A bug in a shared clamp, or a threshold loosened in one place, would otherwise pass the filter
and its check together. The rules are written out again here, in the audit's own terms, with slack only for
what the wire and the peer's view of the joints add (the tolerances below).

A command is unsafe for each of these reasons it has (counted per reason; one command may have several):

- nonfinite: any NaN/inf among its arrays (nothing else is checked then);
- position_limit: a tracked joint's target beyond the joint limits;
- step_limit: a tracked joint's target more than `max_step` (per command, and per command lost in transit)
  from its reference: the previous target where the joint tracked it, else the joint as the sender may have
  measured it. A PD joint whose target moves towards the joint is exempt (the motor applies less torque);
- torque_limit: a PD command whose |τ_ff| + kp·|q* − q| exceeds the motor's limit;
- velocity_limit: a velocity target beyond the joint's maximum;
- workspace: a Cartesian target, or the end effector at the joint targets (forward kinematics), outside the box —
  unless the arm itself was outside it when the joint targets arrived and they bring the end effector nearer the
  box (the way back in).

A joint "tracks" its target when the command has no gains (a position-controlled arm: every joint) or kp > 0
(a damped joint of a PD robot tracks nothing).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from policyforge.real_robot.robot import Command, RobotSpec

LIMIT_TOLERANCE = 1e-5
"""Slack of the joint-limit and velocity-limit checks, rad or rad/s: the widest rounding on any peer's wire is
the Go2's float32 LowCmd, ≤ 6e-8 relative (≤ 2e-6 at its 30 rad/s velocity limit). The Feetech goals are whole
steps of the same calibrated range the limits come from, so they land on it exactly."""
STEP_TOLERANCE = 0.01
"""Slack of the step check, rad: the audit rebuilds the reference the sender stepped from (the previous target
that arrived, or the joint as published within the sender's measurement window), not the exact one it used."""
TORQUE_TOLERANCE = 0.05
"""Relative slack of the PD-torque check: the audit measures |q* − q| against the joint when the command
arrives; the joint moved since the sender looked at it."""
WORKSPACE_TOLERANCE = 1e-6
"""Slack of the workspace check, m: float64 forward kinematics of the very target that reached the driver."""


class TargetAudit:
    """Counts the commands that reached the motors and would be unsafe to follow (module docstring), by reason.

    `spec`: the robot's limits; `max_step`: the largest change of a target from one command to the next, rad
    (the bound the sender was configured with); `forward_kinematics(q [J]) -> [3]` (m): enables the workspace
    check, against `spec.workspace_low`/`workspace_high`."""

    def __init__(
        self,
        spec: RobotSpec,
        max_step: float,
        forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.spec, self.max_step, self.forward_kinematics = spec, max_step, forward_kinematics
        self.targets = 0
        """Commands checked."""
        self.unsafe: dict[str, int] = {}
        """Unsafe commands by reason."""
        self.events: list[list[str]] = []
        """The reasons of each unsafe command, in order."""
        self.first: dict | None = None
        """The first unsafe command with what it was judged against: reasons, command, joint_pos, previous
        (target [J] and which joints tracked it, or None), lost_before."""
        self.previous: tuple[np.ndarray, np.ndarray] | None = None
        """The last finite command's targets [J] and which joints tracked them [J] bool."""

    @property
    def unsafe_commands(self) -> int:
        """Commands with at least one reason."""
        return len(self.events)

    def restart(self) -> None:
        """The sender started a new session (e.g. a new servoJ stream): the next targets step from the joint."""
        self.previous = None

    def check(
        self, command: Command, joint_pos: np.ndarray | None = None, seen: np.ndarray | None = None, lost: int = 0
    ) -> list[str]:
        """Audit one command that reached the motors; returns its reasons ([] when safe).

        `joint_pos` [J]: the joints when it arrived, rad (needed by the torque check of a PD command; without it
        joints that tracked no previous target have no step reference); `seen` [K, J]: every joint position the
        sender may have measured it from (default: `joint_pos` only); `lost`: commands lost in transit since the
        previous one (each may have moved the target by `max_step`)."""
        self.targets += 1
        previous = self.previous
        if not _finite(command):
            reasons = ["nonfinite"]
        else:
            position = np.asarray(command.position, dtype=np.float64)
            tracking = np.ones(len(position), bool) if command.kp is None else np.asarray(command.kp) > 0
            reasons = []
            if self._beyond_limits(position, tracking):
                reasons.append("position_limit")
            if self._stepped_too_far(command, position, tracking, joint_pos, seen, lost):
                reasons.append("step_limit")
            reasons += self._effort(command, position, joint_pos)
            if self._outside_workspace(command, position, tracking, joint_pos):
                reasons.append("workspace")
            self.previous = (position, tracking)
        for reason in reasons:
            self.unsafe[reason] = self.unsafe.get(reason, 0) + 1
        if reasons:
            self.events.append(reasons)
        if reasons and self.first is None:
            self.first = {
                "reasons": reasons, "command": dataclasses.asdict(command), "joint_pos": joint_pos,
                "previous": previous, "lost_before": lost,
            }  # fmt: skip
        return reasons

    def _beyond_limits(self, position: np.ndarray, tracking: np.ndarray) -> bool:
        low, high = self.spec.position_low - LIMIT_TOLERANCE, self.spec.position_high + LIMIT_TOLERANCE
        return bool(np.any(((position < low) | (position > high))[tracking]))

    def _effort(self, command: Command, position: np.ndarray, joint_pos: np.ndarray | None) -> list[str]:
        """torque_limit and velocity_limit, where the command carries torques, gains or velocities."""
        spec, reasons = self.spec, []
        if command.kp is not None or command.torque is not None:
            torque = np.abs(command.torque) if command.torque is not None else 0.0
            if command.kp is not None:
                if joint_pos is None:
                    raise ValueError("TargetAudit.check: a PD command (kp given) needs joint_pos for its torque")
                torque = torque + np.asarray(command.kp) * np.abs(position - joint_pos)
            if np.any(torque > (1 + TORQUE_TOLERANCE) * spec.max_torque):
                reasons.append("torque_limit")
        if command.velocity is not None and np.any(np.abs(command.velocity) > spec.max_velocity + LIMIT_TOLERANCE):
            reasons.append("velocity_limit")
        return reasons

    def _stepped_too_far(
        self,
        command: Command,
        position: np.ndarray,
        tracking: np.ndarray,
        joint_pos: np.ndarray | None,
        seen: np.ndarray | None,
        lost: int,
    ) -> bool:
        """Whether a tracked joint's target moved more than allowed from its reference (module docstring)."""
        was_tracking = np.zeros_like(tracking) if self.previous is None else self.previous[1]
        target = np.zeros_like(position) if self.previous is None else self.previous[0]
        if joint_pos is None:  # no measured joint: only joints that tracked a previous target have a reference
            measured_low = measured_high = target
            tracking = tracking & was_tracking
        else:
            measured = np.vstack([joint_pos] if seen is None or np.size(seen) == 0 else [seen, joint_pos])
            measured_low, measured_high = measured.min(axis=0), measured.max(axis=0)
        low = np.where(was_tracking, target, measured_low)
        high = np.where(was_tracking, target, measured_high)
        change = position - np.clip(position, low, high)
        allowed = self.max_step * (1 + lost) + STEP_TOLERANCE
        violent = np.abs(change) > allowed
        if command.kp is not None and joint_pos is not None:  # a PD target moving towards the joint: less torque
            violent &= ~(was_tracking & (change * (joint_pos - target) > 0))
        return bool(np.any(violent[tracking]))

    def _outside_workspace(
        self, command: Command, position: np.ndarray, tracking: np.ndarray, joint_pos: np.ndarray | None
    ) -> bool:
        """Whether the Cartesian target, or the end effector at the joint targets, is outside the box (joint
        targets only where every joint tracks its target: otherwise they are no pose the arm goes to), joint
        targets that lead an arm outside the box back towards it excepted."""
        spec = self.spec
        if spec.workspace_low is None or spec.workspace_high is None:
            return False
        if command.ee_target is not None and self._distance_outside(command.ee_target) > 0:
            return True
        if self.forward_kinematics is None or not np.all(tracking):
            return False
        outside = self._distance_outside(self.forward_kinematics(position))
        if outside == 0 or joint_pos is None:
            return outside > 0
        return outside >= self._distance_outside(self.forward_kinematics(np.asarray(joint_pos, dtype=np.float64)))

    def _distance_outside(self, point: np.ndarray) -> float:
        """How far a point [3] lies outside the box (with the tolerance), m; 0 inside."""
        point = np.asarray(point, dtype=np.float64)
        low, high = self.spec.workspace_low - WORKSPACE_TOLERANCE, self.spec.workspace_high + WORKSPACE_TOLERANCE
        return float(np.linalg.norm(np.maximum(low - point, 0.0) + np.maximum(point - high, 0.0)))


def _finite(command: Command) -> bool:
    """Whether every array the command carries is finite."""
    arrays = (command.position, command.velocity, command.torque, command.kp, command.kd, command.ee_target)
    return all(np.all(np.isfinite(a)) for a in arrays if a is not None)
