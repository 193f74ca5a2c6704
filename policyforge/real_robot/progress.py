"""What `policyforge deploy` tells its user: before anything connects, what runs on which robot towards what
(`announce`); while the policy runs, a line when the robot starts moving to its ready pose and when the policy
takes over, then a heartbeat every `HEARTBEAT_S` (elapsed time, achieved command rate, distance to the goal or
tracked velocity, interventions so far); at the end, whether the overruns matter (`OVERRUN_LIMITS`) and the
verdict: an arm reached its goal or not, a quadruped's velocity tracking error. `DeployWatch` gathers it from
the control loop's `on_tick` (cheap, on the loop's thread) and speaks from a thread of its own, so that printing
never delays a tick.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from policyforge.real_robot.loop import ControlLoop, LoopConfig, LoopReport
from policyforge.real_robot.robot import RobotState
from policyforge.real_robot.safety import Filtered

if TYPE_CHECKING:
    from policyforge.real_robot.launch import DeployConfig

HEARTBEAT_S = 2.0
"""Seconds between two heartbeat lines: often enough that a 10 s deployment is never silent for long, rarely
enough to read (a 500 Hz loop would print 1,000 lines in that time at one a tick)."""


@dataclasses.dataclass(frozen=True)
class OverrunLimit:
    """When a robot's overruns (loop ticks that woke over a period late, their deadlines skipped) are harmless."""

    skipped_share: float
    """Skipped deadlines / all deadlines of the loop below which the control is as trained."""
    gap_ms: float
    """Longest time between two commands below which the robot never falls back on its own watchdog, ms."""
    why: str
    """The reasoning, in a sentence (printed when the limits are exceeded)."""


OVERRUN_LIMITS = {
    "franka": OverrunLimit(
        0.2,
        200.0,
        "position-controlled: each command replaces a trajectory the arm plans and runs in its own 1 kHz loop, so a "
        "skipped 25 Hz tick only leaves the previous target in force 40 ms longer; under 20% skipped the policy "
        "still acts at over 20 Hz (a reach takes at most 1.25x as long), and gaps under 200 ms stay well inside "
        "the 0.5 s command timeout after which the safety filter holds the arm",
    ),
    "go2": OverrunLimit(
        0.1,
        20.0,
        "torque-level PD at 500 Hz under a 50 Hz policy: a skipped tick leaves the last PD target in the motors, and "
        "the policy's targets change every 10th tick only, so under 10% skipped at most a tenth of them land a tick "
        "(2 ms) late; "
        "gaps under 20 ms (one policy period) deliver every target before the next, far from the 50 ms after which "
        "the Go2 peer drops to damping (peers/go2_sim.py --command-timeout)",
    ),
}
"""Per robot (`launch.ROBOTS`): the overrun share and command gap below which overruns are harmless."""


@dataclasses.dataclass
class Overruns:
    """A loop's overruns, judged against its robot's `OVERRUN_LIMITS`."""

    harmless: bool
    counts: str
    """The overruns, the deadlines they skipped (of all), the longest gap between commands."""
    judgement: str
    """Why they are harmless, or why not and what to do."""


def overrun_assessment(report: LoopReport, robot: str) -> Overruns:
    """The loop's overruns judged against `OVERRUN_LIMITS[robot]` (harmless for a robot without limits)."""
    skipped = max(report.ticks - report.commands_sent, 0)
    share = skipped / max(report.ticks, 1)
    counts = (
        f"{report.overruns:,} (skipped {skipped:,} of {report.ticks:,} deadlines, {share:.1%}; "
        f"longest gap between commands {report.longest_gap_ms:.1f} ms)"
    )
    limit = OVERRUN_LIMITS.get(robot)
    if limit is None:
        return Overruns(True, counts, f"no overrun limits are set for the {robot}")
    bounds = f"under {limit.skipped_share:.0%} skipped and gaps under {limit.gap_ms:.0f} ms"
    if share < limit.skipped_share and report.longest_gap_ms < limit.gap_ms:
        return Overruns(True, counts, f"harmless for the {robot}: {bounds}")
    return Overruns(
        False,
        counts,
        f"too many for the {robot}, harmless only {bounds}: {limit.why}. Give the control loop a CPU of its own "
        "(--realtime --cpus N) or run on a quieter computer",
    )


@dataclasses.dataclass
class Verdict:
    """How the deployment went, in one line."""

    line: str
    """"VERDICT: ..." as printed."""
    reached: bool | None
    """Arms: whether the end effector ended within the tolerance of the goal; None for robots without a goal."""
    error: float | None = None
    """Quadrupeds: the planar velocity tracking error |v_xy − command_xy|, m/s (None where not measured)."""


class ArmGoal:
    """Distance of an arm's end effector to the goal during the policy phase: `goal` [3] m in the base frame,
    `tolerance` m (the task's success_threshold). The end effector is the twin's `forward_kinematics` of the measured
    joints (the TCP the policy and the safety filter know) where given, else the robot's own report
    (`RobotState.ee_pos`); with both, their largest disagreement is kept (`report_gap`) and a large one told in the
    verdict: a robot whose end-effector frame is not the twin's TCP, or a peer reporting another pose.

    The verdict is `reached` when the end effector *ends* within the tolerance, as the simulator scores an episode
    (its success flag at the episode's last step: `sims.episodes.end_step`); the closest approach is printed
    beside it, so a policy that passes the goal and drifts off (reached, then left) is told apart."""

    REPORT_GAP = 0.02
    """A disagreement between the robot's report and the twin's kinematics above this is told, m."""

    def __init__(
        self,
        goal: np.ndarray,
        tolerance: float,
        forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        self.goal, self.tolerance = np.asarray(goal, dtype=np.float64), float(tolerance)
        self.forward_kinematics = forward_kinematics
        self.distance = self.closest = math.inf
        self.closest_at = 0.0
        """Seconds into the policy phase of the closest approach."""
        self.report_gap = 0.0
        """Largest distance between the robot's reported end effector and the twin's kinematics of its joints, m."""
        self.position: np.ndarray | None = None
        """The latest end effector measured [3] (m, base frame): after `verdict`, where it ended."""

    def end_effector(self, state: RobotState) -> np.ndarray | None:
        """The end effector [3] (m, base frame) of `state`: the twin's kinematics of its joints, else the robot's
        report; None without either. Notes the disagreement of the two."""
        if self.forward_kinematics is None:
            return state.ee_pos
        position = np.asarray(self.forward_kinematics(state.joint_pos), dtype=np.float64)
        if state.ee_pos is not None:
            self.report_gap = max(self.report_gap, float(np.linalg.norm(state.ee_pos - position)))
        return position

    def update(self, state: RobotState, policy_s: float) -> None:
        """A state of the policy phase, `policy_s` seconds into it."""
        position = self.end_effector(state)
        if position is None:
            return
        self.position, self.distance = position, float(np.linalg.norm(position - self.goal))
        if self.distance < self.closest:
            self.closest, self.closest_at = self.distance, policy_s

    def mark(self) -> None:
        """(Nothing to note: the distance is measured at every tick.)"""

    def heartbeat(self) -> str:
        if not math.isfinite(self.distance):
            return "distance to goal: no state yet"
        return f"distance to goal {self.distance * 100:.1f} cm (closest {self.closest * 100:.1f} cm)"

    def verdict(self, final: RobotState | None) -> Verdict:
        """From the last state the robot reported (after the loop) or, without one, the last of the loop."""
        position = None if final is None else self.end_effector(final)
        if position is not None:
            self.position, self.distance = position, float(np.linalg.norm(position - self.goal))
            self.closest = min(self.closest, self.distance)
        if not math.isfinite(self.distance):
            return Verdict("VERDICT: not reached (the robot reported no end-effector position)", False)
        reached = self.distance <= self.tolerance
        cm = lambda metres: f"{metres * 100:.1f} cm"  # noqa: E731
        line = (
            f"VERDICT: {'reached' if reached else 'not reached'}: final distance to the goal {cm(self.distance)}, "
            f"closest {cm(self.closest)} ({self.closest_at:.1f} s into the policy), tolerance {cm(self.tolerance)}"
        )
        if not reached and self.closest <= self.tolerance:
            line += " (it came within the tolerance, then left)"
        if self.report_gap > self.REPORT_GAP:
            line += (
                f"; measured with the twin's kinematics of the measured joints: the robot's own end-effector report "
                f"differed by up to {cm(self.report_gap)} (is its end-effector frame the twin's TCP?)"
            )
        return Verdict(line, reached)


class VelocityTracking:
    """A quadruped's velocity against its command [vx, vy, yaw_rate] (m/s, m/s, rad/s, base frame) during the
    policy phase: the yaw rate from the IMU's gyro (`RobotState.gyro`, on any Go2), the planar velocity from the
    base position a simulated peer reports (`base_position`, `sim_seconds` in its facts; `read_facts` is None on
    hardware, whose low-level state carries no base velocity), turned into the base frame by the IMU's yaw."""

    def __init__(self, command, read_facts: Callable[[], dict] | None, tracking_sigma: float):
        self.command, self.read_facts, self.sigma = np.asarray(command, dtype=np.float64), read_facts, tracking_sigma
        self.yaw_rate_sum = self.heading_sin = self.heading_cos = 0.0
        self.samples = 0
        self._marks: list[tuple[int, float, float, float, np.ndarray | None, float]] = []
        """(samples, yaw rate sum, heading sin sum, cos sum, base xy, sim time) at the policy's start and at each
        heartbeat: velocities are differences between marks."""

    def update(self, state: RobotState, policy_s: float) -> None:
        if state.gyro is None or state.imu_quat is None:
            return
        w, x, y, z = state.imu_quat
        yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        self.yaw_rate_sum += float(state.gyro[2])
        self.heading_sin, self.heading_cos = self.heading_sin + math.sin(yaw), self.heading_cos + math.cos(yaw)
        self.samples += 1

    def mark(self) -> None:
        """Note where the robot is now (the policy's start, a heartbeat, the end)."""
        facts = self.read_facts() if self.read_facts is not None else {}
        xy = np.asarray(facts["base_position"][:2], dtype=np.float64) if "base_position" in facts else None
        sums = (self.samples, self.yaw_rate_sum, self.heading_sin, self.heading_cos)
        self._marks.append((*sums, xy, float(facts.get("sim_seconds", math.nan))))

    def velocity(self, since: int = -2) -> np.ndarray | None:
        """[vx, vy, yaw_rate] between mark `since` and the last one (vx, vy NaN when not measured); None before
        two marks with states between them."""
        if len(self._marks) < 2:
            return None
        (n0, yaw0, s0, c0, xy0, t0), (n1, yaw1, s1, c1, xy1, t1) = self._marks[since], self._marks[-1]
        if n1 <= n0:
            return None
        planar = np.full(2, np.nan)
        if xy0 is not None and xy1 is not None and t1 > t0:
            heading = math.atan2(s1 - s0, c1 - c0)  # mean heading over the interval
            dx, dy = (xy1 - xy0) / (t1 - t0)
            cos, sin = math.cos(heading), math.sin(heading)
            planar = np.array([cos * dx + sin * dy, -sin * dx + cos * dy])  # world → base frame
        return np.array([*planar, (yaw1 - yaw0) / (n1 - n0)])

    def heartbeat(self) -> str:
        self.mark()
        return f"velocity {_velocity_text(self.velocity())} (command {_velocity_text(self.command)})"

    def verdict(self, final: RobotState | None) -> Verdict:
        """Over the policy phase: from its start to the last mark (`DeployWatch.watching` marks its end)."""
        measured = self.velocity(since=0)
        if measured is None:
            return Verdict("VERDICT: no velocity measured (the policy phase produced no states)", None)
        # the task's tracking rewards (sims/tasks/quadruped.py): exp(-error² / tracking_sigma), 1 when perfect
        planar, yaw = float(np.linalg.norm(measured[:2] - self.command[:2])), abs(float(measured[2] - self.command[2]))
        errors = [f"{yaw:.2f} rad/s yaw (tracking reward {math.exp(-(yaw**2) / self.sigma):.2f} of 1)"]
        if math.isfinite(planar):
            errors.insert(
                0, f"{planar:.2f} m/s linear (tracking reward {math.exp(-(planar**2) / self.sigma):.2f} of 1)"
            )
        else:
            errors.append("linear velocity not measured: the Go2's low-level state has no base velocity")
        line = f"VERDICT: tracked {_velocity_text(measured)} against the command {_velocity_text(self.command)}"
        line = f"{line}: error {', '.join(errors)}"
        robot_seconds = self._marks[-1][5] - self._marks[0][5]
        if math.isfinite(robot_seconds):  # a simulated peer's clock: on a loaded machine it runs slower than ours
            line += f"; measured over {robot_seconds:.2f} s of the peer's simulated time"
        return Verdict(line, None, planar if math.isfinite(planar) else None)


def _velocity_text(velocity: np.ndarray | None) -> str:
    if velocity is None:
        return "-"
    vx, vy, yaw_rate = (f"{v:.2f}" if math.isfinite(v) else "?" for v in velocity)
    return f"{vx}, {vy} m/s, {yaw_rate} rad/s"


def measure_for(config: DeployConfig, adapter, read: Callable[[], dict] | None) -> ArmGoal | VelocityTracking:
    """What the heartbeat and the verdict measure: the distance to an arm's goal, within the task's success
    distance; a quadruped's velocity against its command."""
    if config.robot == "go2":
        return VelocityTracking(config.velocity_command, read, adapter.task.tracking_sigma)
    return ArmGoal(adapter.goal, adapter.success_distance, adapter.forward_kinematics)


def announce(config: DeployConfig, task: str, adapter, inferred: bool, loop: LoopConfig, say) -> None:
    """Say, before anything connects, what runs on which robot towards what, and for how long."""
    from policyforge.real_robot.launch import ROBOTS
    from policyforge.real_robot.peers.process import PEERS

    how = f"inferred from the task; --robot {' | '.join(ROBOTS)} chooses" if inferred else "--robot"
    on = f"its simulated peer ({PEERS[config.robot]}, 127.0.0.1)" if config.peer else "hardware"
    say(f"robot: {config.robot} ({how}), on {on}")
    say(f"task: {task} (from {config.source}), the policy at {loop.policy_rate_hz:g} Hz in a {loop.rate_hz:g} Hz loop")
    if config.robot == "go2":
        vx, vy, yaw = config.velocity_command
        say(f"command: vx {vx:g} m/s, vy {vy:g} m/s, yaw rate {yaw:g} rad/s (base frame)")
    else:
        for line in adapter.scene_lines():
            say(f"scene (--scene-seed {config.scene_seed}): {line}")
        tolerance, which = adapter.success_distance, "touch_distance" if adapter.has_scene else "success_threshold"
        say(
            "goal: ({:.3f}, {:.3f}, {:.3f}) m in the base frame, ".format(*adapter.goal)
            + f"{config.arm_mode} targets; reached when the end effector ends within {tolerance * 100:g} cm "
            f"(the task's {which})"
        )
    say(f"run: {loop.prepare_seconds:g} s to the ready pose, then the policy for {loop.seconds:g} s")


class DeployWatch:
    """The control loop's `on_tick` (records the tick, its time and the robot's state into `measure`, an
    `ArmGoal` or `VelocityTracking`) and, while inside `watching(loop)`, a thread that says when the ready pose
    and the policy phase begin and a heartbeat line every `heartbeat_s` of the policy phase."""

    def __init__(
        self,
        measure: ArmGoal | VelocityTracking,
        config: LoopConfig,
        say: Callable[[str], None],
        heartbeat_s: float = HEARTBEAT_S,
    ):
        self.measure, self.config, self.say, self.heartbeat_s = measure, config, say, heartbeat_s
        self.prepare_ticks = round(config.prepare_seconds * config.rate_hz)
        self.tick = -1
        self.sent = 0
        self.started = self.policy_started = math.nan
        """Monotonic times of the first tick, and of the first tick of the policy phase."""

    def on_tick(self, tick: int, state: RobotState, filtered: Filtered) -> None:
        now = time.monotonic()
        if self.tick < 0:
            self.started = now
        if tick >= self.prepare_ticks:
            if math.isnan(self.policy_started):
                self.policy_started = now
            self.measure.update(state, now - self.policy_started)
        self.tick, self.sent = tick, self.sent + 1

    @contextlib.contextmanager
    def watching(self, loop: ControlLoop) -> Iterator[None]:
        """Speak (in a thread of its own) while inside."""
        done = threading.Event()
        thread = threading.Thread(target=self._speak, args=(loop, done), name="deploy-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            self.measure.mark()  # the end of the policy phase

    def _speak(self, loop: ControlLoop, done: threading.Event) -> None:
        said_prepare = said_policy = False
        next_beat, last = math.inf, (0, 0.0)
        while not done.wait(0.05):
            now = time.monotonic()
            if not said_prepare and self.tick >= 0:
                said_prepare = True
                self.say(f"moving to the ready pose ({self.config.prepare_seconds:g} s)")
            if not said_policy and not math.isnan(self.policy_started):
                said_policy, next_beat, last = True, now + self.heartbeat_s, (self.sent, now)
                self.measure.mark()
                length = "until stopped" if self.config.seconds is None else f"for {self.config.seconds:g} s"
                self.say(f"policy running {length} (a heartbeat every {self.heartbeat_s:g} s)")
            if now >= next_beat:
                next_beat += self.heartbeat_s
                rate = (self.sent - last[0]) / max(now - last[1], 1e-9)
                last = (self.sent, now)
                interventions = ", ".join(f"{k} {v:,}" for k, v in sorted(loop.interventions().items())) or "none"
                self.say(
                    f"[{now - self.started:5.1f} s] {rate:.1f} Hz (target {self.config.rate_hz:g}) · "
                    f"{self.measure.heartbeat()} · interventions: {interventions}"
                )
