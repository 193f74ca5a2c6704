"""The safety filter between a policy and a robot driver: no bad command reaches `Robot.send`.

Every control tick the filter takes the policy's newest command (or none, when the policy runs slower than
the robot) and the latest robot state, and returns the command to send:

- a command with NaN/inf is rejected (the last accepted one stays in force);
- targets are clamped to the joint limits, velocities and feed-forward torques to the spec's maxima, the
  position target moves at most `max_step` rad per tick, and a PD target is kept close enough to the measured
  joint that kp·(q* − q) stays within the torque limit until the next command (the joint's measured velocity
  times the state's age plus `torque_horizon`);
- an end-effector target outside the workspace box is clamped into it; a joint target whose forward
  kinematics leaves the box is rejected (unless the arm is already outside and the target brings it closer:
  the way back in);
- no fresh state for `state_timeout` s, or no fresh command for `command_timeout` s → the robot's safe mode
  (hold or damp); recovery is automatic while the fault lasts less than `estop_after` s;
- a fault that lasts `estop_after` s, or `trigger_estop()`, latches an e-stop: the safe mode until `reset()`.

Each intervention is counted by reason (`counts`); the first of each reason is logged (a warning naming it),
later ones only counted: a filter clamping steps every few ticks would otherwise print a line a tick. The
counts are what a caller reports (the control loop's `LoopReport.interventions`, deploy's heartbeat and
summary).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Callable
from typing import Literal

import numpy as np

from policyforge.config import check
from policyforge.real_robot.robot import Command, RobotSpec, RobotState, safe_command

log = logging.getLogger("policyforge.safety")

Mode = Literal["normal", "safe", "estop"]
REASONS = (
    "nonfinite",
    "action_range",
    "oscillation",
    "position_limit",
    "velocity_limit",
    "torque_limit",
    "step_limit",
    "workspace",
    "stale_state",
    "stale_command",
    "estop",
)
"""Every reason an intervention is counted under."""


WORKSPACE_RETURN_M = 1e-4
"""A target outside the workspace box is let through only when it is this much closer to the box than the arm, m:
a step back in, not a target that merely keeps the arm where it is."""


@dataclasses.dataclass
class SafetyConfig:
    """Thresholds of the safety filter."""

    state_timeout: float = 0.05
    """No robot state newer than this many seconds → safe mode, s."""
    command_timeout: float = 0.1
    """No accepted policy command for this many seconds → safe mode, s."""
    estop_after: float = 0.5
    """A fault (stale state or command) lasting this long latches the e-stop, s."""
    max_step: float = 0.1
    """Largest change of a joint's position target from one tick to the next, rad."""
    action_slack: float = 0.05
    """Policy actions live in [-1, 1]; one beyond 1 + this is rejected as a malfunction."""
    oscillation_limit: float = 1.0
    """Mean |Δaction| per policy step over `oscillation_window` steps above this latches the e-stop (bang-bang
    chatter: a trained walking policy stays near 0.2, alternating ±1 gives 2)."""
    oscillation_window: int = 25
    """Policy steps the oscillation is averaged over."""
    workspace_margin: float = 0.0
    """Targets are kept this far inside the workspace box, m: room for the arm to brake, since it overshoots a
    target it approaches fast by its stopping distance (2–5 cm for the arm-reach demo on franky-sim)."""
    torque_horizon: float = 0.005
    """How long past the state's age the PD torque bound must hold (the next command's period plus its
    delivery), s: the target keeps |q̇|·(age + this) further inside the bound, for the joint keeps moving."""
    speed_window: float = 0.1
    """|q̇| in that margin is the fastest each joint was measured moving in this window, s, not only in the
    latest state: a state 45 ms old that caught a walking leg at its turning point (q̇ ≈ 0) says nothing of
    the 15 rad/s it swings at by the time the command lands (tests/real_robot/test_latency.py)."""

    def __post_init__(self) -> None:
        check(self.oscillation_window >= 2, "oscillation_window", f"must be ≥ 2, got {self.oscillation_window}")
        check(self.torque_horizon >= 0, "torque_horizon", f"must be ≥ 0, got {self.torque_horizon}")
        check(self.speed_window >= 0, "speed_window", f"must be ≥ 0, got {self.speed_window}")
        check(self.workspace_margin >= 0, "workspace_margin", f"must be ≥ 0, got {self.workspace_margin}")
        for name in ("state_timeout", "command_timeout", "estop_after", "max_step", "oscillation_limit"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")


@dataclasses.dataclass
class Filtered:
    """What the filter decided this tick."""

    command: Command
    """The command to send."""
    mode: Mode
    """normal: the policy's (possibly clamped) command; safe: hold/damp; estop: latched safe mode."""
    reasons: tuple[str, ...]
    """The interventions of this tick (empty when the command passed untouched)."""


class SafetyFilter:
    """See the module docstring. `forward_kinematics`: joint positions [J] → end-effector position [3] (arms
    with a workspace box)."""

    def __init__(
        self,
        spec: RobotSpec,
        config: SafetyConfig | None = None,
        forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.spec, self.config, self.forward_kinematics = spec, config or SafetyConfig(), forward_kinematics
        self.counts: collections.Counter[str] = collections.Counter()
        self.events: collections.deque[tuple[float, str]] = collections.deque(maxlen=1000)
        """(time, reason) of each intervention that started (the last 1,000)."""
        self._accepted: Command | None = None
        self._accepted_at = -np.inf
        self._last_sent: Command | None = None
        self._safe: Command | None = None
        self._fault_since: float | None = None
        self._estop_reason: str | None = None
        self._active: set[str] = set()
        self._logged: set[str] = set()
        """The reasons logged so far (each once: `_note`)."""
        self._last_action: np.ndarray | None = None
        self._action_changes: collections.deque[float] = collections.deque(maxlen=self.config.oscillation_window)
        self._speeds: collections.deque[tuple[float, np.ndarray]] = collections.deque()
        """(stamp, |q̇| [J]) of the states measured within `speed_window` of the newest."""

    def check_action(self, action: np.ndarray, now: float) -> bool:
        """Whether a policy action [A] may become a command: finite and within [-1, 1] (plus slack); counted
        and refused otherwise. Chatter (see `SafetyConfig.oscillation_limit`) latches the e-stop."""
        config = self.config
        if not np.all(np.isfinite(action)):
            self._note({"nonfinite"}, now)
            return False
        if np.max(np.abs(action)) > 1.0 + config.action_slack:
            self._note({"action_range"}, now)
            return False
        if self._last_action is not None:
            self._action_changes.append(float(np.mean(np.abs(action - self._last_action))))
        self._last_action = np.array(action, dtype=np.float64)
        changes = self._action_changes
        if len(changes) == changes.maxlen and sum(changes) / len(changes) > config.oscillation_limit:
            self._note({"oscillation"}, now)
            self.trigger_estop(f"the policy oscillates (mean |Δaction| {sum(changes) / len(changes):.2f})", now)
            return False
        return True

    @property
    def estopped(self) -> bool:
        return self._estop_reason is not None

    def trigger_estop(self, reason: str, now: float) -> None:
        """Latch the e-stop (e.g. an operator's button, a peer that died)."""
        if self._estop_reason is None:
            self._estop_reason = reason
            self.events.append((now, "estop"))
            log.error("e-stop latched: %s", reason)

    def reset(self, state: RobotState, now: float) -> None:
        """Clear a latched e-stop; only with a fresh state. The next command starts from the measured pose."""
        if now - state.stamp > self.config.state_timeout:
            raise RuntimeError(
                f"cannot reset the e-stop: the robot state is {now - state.stamp:.3f} s old "
                f"(> state_timeout {self.config.state_timeout} s); restore the connection first"
            )
        self._estop_reason, self._fault_since, self._safe = None, None, None
        self._accepted, self._accepted_at, self._last_sent = None, -np.inf, None
        log.warning("e-stop reset")

    def __call__(self, command: Command | None, state: RobotState, now: float) -> Filtered:
        """The command to send at time `now` (monotonic s), given the policy's new `command` (None: no new one
        this tick) and the latest `state`."""
        reasons: set[str] = set()
        if command is not None:
            accepted = self._check_new(command, state, reasons)
            if accepted is not None:
                self._accepted, self._accepted_at = accepted, now
        faults = self._faults(state, now)
        reasons |= faults
        if faults:
            self._fault_since = now if self._fault_since is None else self._fault_since
            if now - self._fault_since >= self.config.estop_after:
                self.trigger_estop(f"{' and '.join(sorted(faults))} for {now - self._fault_since:.2f} s", now)
        else:
            self._fault_since = None
        if self.estopped or faults:
            return self._safe_output(state, now, reasons)
        self._safe = None
        out = self._limit_motion(self._accepted, state, now, reasons)
        out.valid_until = now + self.config.torque_horizon
        self._last_sent = out
        self._note(reasons, now)
        return Filtered(out, "normal", tuple(sorted(reasons)))

    def sent(self, command: Command) -> None:
        """What the driver actually sent in place of the filter's last output (`Robot.send` returns it): the next
        command steps on from it. A driver sends its safe command instead of one that missed its deadline."""
        self._last_sent = command

    # -- steps -------------------------------------------------------------------------------------------

    def _check_new(self, command: Command, state: RobotState, reasons: set[str]) -> Command | None:
        """The policy's command with static limits applied, or None when it must be rejected."""
        arrays = [a for a in dataclasses.astuple(command) if a is not None]
        if not all(np.all(np.isfinite(np.asarray(a, dtype=np.float64))) for a in arrays):
            reasons.add("nonfinite")
            return None
        spec, out = self.spec, command.copy()
        if out.ee_target is not None and spec.workspace_low is not None:
            margin = self.config.workspace_margin
            clamped = np.clip(out.ee_target, spec.workspace_low + margin, spec.workspace_high - margin)
            if not np.array_equal(clamped, out.ee_target):
                reasons.add("workspace")
            out.ee_target = clamped
        position = np.clip(out.position, spec.position_low, spec.position_high)
        if not np.array_equal(position, out.position):
            reasons.add("position_limit")
        out.position = position
        if out.ee_target is None and not self._allowed_in_workspace(out.position, state.joint_pos):
            reasons.add("workspace")
            return None
        if out.velocity is not None:
            velocity = np.clip(out.velocity, -spec.max_velocity, spec.max_velocity)
            reasons |= {"velocity_limit"} if not np.array_equal(velocity, out.velocity) else set()
            out.velocity = velocity
        if out.torque is not None:
            torque = np.clip(out.torque, -spec.max_torque, spec.max_torque)
            reasons |= {"torque_limit"} if not np.array_equal(torque, out.torque) else set()
            out.torque = torque
        return out

    def _faults(self, state: RobotState, now: float) -> set[str]:
        faults = set()
        fresh = now - state.stamp <= self.config.state_timeout
        if not fresh or not (np.all(np.isfinite(state.joint_pos)) and np.all(np.isfinite(state.joint_vel))):
            faults.add("stale_state")
        if now - self._accepted_at > self.config.command_timeout:
            faults.add("stale_command")
        return faults

    def _limit_motion(self, command: Command, state: RobotState, now: float, reasons: set[str]) -> Command:
        """Per-tick limits that depend on the last sent command and the measured state."""
        out = command.copy()
        previous, target, step = self._step_reference(state), out.position, self.config.max_step
        position = np.clip(target, previous - step, previous + step)
        if not np.array_equal(position, target):
            reasons.add("step_limit")
        out.position = self._within_torque_and_joint_limits(position, out, state, now, reasons)
        if out.ee_target is None and not self._in_workspace(out.position):
            # the target is inside the box but a per-joint step towards it need not be: step along the straight
            # line in joint space instead, or hold when that leaves the box too
            largest = float(np.max(np.abs(target - previous)))
            along = previous + (target - previous) * min(1.0, step / max(largest, 1e-12))
            out.position = self._within_torque_and_joint_limits(along, out, state, now, reasons)
            if not self._allowed_in_workspace(out.position, state.joint_pos):
                reasons.add("workspace")
                out.position = previous.copy()
        return out

    def _within_torque_and_joint_limits(
        self, position: np.ndarray, command: Command, state: RobotState, now: float, reasons: set[str]
    ) -> np.ndarray:
        """Targets [J] kept within the joint limits and, for PD commands, where kp·|q* − q| + |τ_ff| ≤ τ_max holds
        until the next command lands (this only pulls a target towards the joint)."""
        if command.kp is not None:
            feedforward = np.abs(command.torque) if command.torque is not None else 0.0
            drift = self._recent_speed(state) * (max(now - state.stamp, 0.0) + self.config.torque_horizon)
            reach = np.maximum(self.spec.max_torque - feedforward, 0.0) / np.maximum(command.kp, 1e-9)
            reach = np.maximum(reach - drift, 0.0)
            bounded = np.clip(position, state.joint_pos - reach, state.joint_pos + reach)
            if not np.array_equal(bounded, position):
                reasons.add("torque_limit")
            position = bounded
        return np.clip(position, self.spec.position_low, self.spec.position_high)

    def _recent_speed(self, state: RobotState) -> np.ndarray:
        """The fastest each joint was measured moving within `speed_window` of `state`, rad/s [J]."""
        speeds = self._speeds
        if not speeds or state.stamp > speeds[-1][0]:
            speeds.append((state.stamp, np.abs(np.nan_to_num(state.joint_vel, posinf=0.0, neginf=0.0))))
            while speeds[0][0] < state.stamp - self.config.speed_window:
                speeds.popleft()
        return np.max([speed for _, speed in speeds] + [np.abs(state.joint_vel)], axis=0)

    def _in_workspace(self, position: np.ndarray) -> bool:
        """Whether joint targets [J] put the end effector inside the workspace box, `workspace_margin` from its
        walls (always, without a box)."""
        return self._outside_workspace(position) == 0.0

    def _allowed_in_workspace(self, position: np.ndarray, measured: np.ndarray) -> bool:
        """Whether joint targets [J] may be sent: inside the box, or, with the arm already outside it (it overshoots
        a target by its stopping distance, or started there), closer to the box than the measured joints [J] put
        the end effector — the way back in. Without it every target near an arm outside the box was refused, and
        the e-stop latched where a step back would do."""
        outside = self._outside_workspace(position)
        return outside == 0.0 or outside < self._outside_workspace(measured) - WORKSPACE_RETURN_M

    def _outside_workspace(self, position: np.ndarray) -> float:
        """How far joint targets [J] put the end effector outside the box shrunk by `workspace_margin`, m (0
        inside, and always without a box)."""
        spec, margin = self.spec, self.config.workspace_margin
        if self.forward_kinematics is None or spec.workspace_low is None:
            return 0.0
        ee = self.forward_kinematics(position)
        below = np.maximum(spec.workspace_low + margin - ee, 0.0)
        above = np.maximum(ee - (spec.workspace_high - margin), 0.0)
        return float(np.linalg.norm(below + above))

    def _step_reference(self, state: RobotState) -> np.ndarray:
        """Where each joint's target may step from: the last target sent, or the measured position for joints
        that were not tracking one (nothing sent yet, or zero stiffness while damping)."""
        last = self._last_sent
        if last is None:
            return state.joint_pos
        if last.kp is None:
            return last.position
        return np.where(last.kp > 0, last.position, state.joint_pos)

    def _safe_output(self, state: RobotState, now: float, reasons: set[str]) -> Filtered:
        if self._safe is None:  # entering safe mode: hold where the robot is now (or damp)
            holding = self._last_sent.position if self._last_sent is not None else state.joint_pos
            if not np.all(np.isfinite(holding)):
                holding = np.clip(np.nan_to_num(holding), self.spec.position_low, self.spec.position_high)
            self._safe = safe_command(self.spec, dataclasses.replace(state, joint_pos=holding))
        if self.estopped:
            reasons.add("estop")
        self._last_sent = self._safe
        self._note(reasons, now)
        return Filtered(self._safe.copy(), "estop" if self.estopped else "safe", tuple(sorted(reasons)))

    def _note(self, reasons: set[str], now: float) -> None:
        """Count this tick's interventions; record the ones that just started; log the first of each reason
        (later ones are counted only: module docstring)."""
        for reason in reasons:
            self.counts[reason] += 1
        for reason in reasons - self._active - {"estop"}:  # trigger_estop records its own event
            self.events.append((now, reason))
            if reason not in self._logged:
                self._logged.add(reason)
                log.warning("safety: %s (first time; further ones are counted, not logged)", reason)
        self._active = set(reasons)
