"""System identification of a Go2's leg joints: record the joints' response to an excitation through the deploy
path (the DDS driver and the safety filter, the robot hanging on a gantry), then fit the simulated Go2's joint
damping, armature, dry friction, motor strength and command latency to it with CMA-ES (`cma`).

The model fitted is the simulated Go2's own (`peers.go2_model`: go2.xml with torque motors and a LowCmd's PD law),
replayed with the recorded commands at the times they were sent; the error is the RMS joint-position error
against the recorded states. Each replayed segment starts from the recorded state, so an error does not grow
over the whole recording.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path

import numpy as np

from policyforge.config import ConfigError
from policyforge.io import atomic_path
from policyforge.real_robot.peers.go2_model import JointPhysics, SimulatedGo2
from policyforge.real_robot.realtime import realtime
from policyforge.real_robot.robot import Command, Robot
from policyforge.real_robot.safety import SafetyFilter
from policyforge.sims.tasks.quadruped import STAND_QPOS

RATE_HZ = 500.0
"""Command and physics rate of the recording and the replay, Hz (the Go2's low-level rate)."""
BOUNDS = {
    "damping": (0.0, 2.0),
    "armature": (0.0, 0.1),
    "frictionloss": (0.0, 1.0),
    "motor_strength": (0.5, 1.5),
    "command_delay": (0.0, 0.04),
}
"""The search box of each fitted `JointPhysics` field (SI units)."""


@dataclasses.dataclass
class Excitation:
    """What the joints are driven through: around the standing pose, each joint a sum of two sines of its own
    frequencies, under PD gains that change halfway (so stiffness and damping of the motor separate from the
    joint's)."""

    seconds: float = 8.0
    """Length of the excitation, s."""
    amplitude: float = 0.25
    """Peak of each sine, rad."""
    frequencies: tuple[float, float] = (0.5, 4.0)
    """Lowest and highest frequency, Hz (slow motions show dry friction, fast ones inertia and latency)."""
    gains: tuple[tuple[float, float], ...] = ((15.0, 0.3), (40.0, 1.0))
    """(kp, kd) of each equal part of the excitation."""

    def command(self, t: float) -> Command:
        """The joint command [12] at `t` s into the excitation."""
        joints = np.arange(12)
        low, high = self.frequencies
        slow = low + (high - low) * ((joints * 7) % 12) / 11 / 2
        fast = low + (high - low) * (0.5 + ((joints * 5) % 12) / 11 / 2)
        offset = self.amplitude * (np.sin(2 * np.pi * slow * t + joints) + np.sin(2 * np.pi * fast * t)) / 2
        kp, kd = self.gains[min(int(t / self.seconds * len(self.gains)), len(self.gains) - 1)]
        zeros = np.zeros(12)
        return Command(STAND_QPOS + offset, zeros, zeros, np.full(12, kp), np.full(12, kd))


@dataclasses.dataclass
class Recording:
    """What the robot was sent and what it measured: commands [C] and states [S], times on this computer's clock."""

    command_time: np.ndarray
    """[C] when each command was sent, s."""
    command_position: np.ndarray
    """[C, 12] position targets, rad."""
    command_kp: np.ndarray
    """[C, 12] stiffness, N·m/rad."""
    command_kd: np.ndarray
    """[C, 12] damping, N·m·s/rad."""
    state_time: np.ndarray
    """[S] when each state was measured (the driver's stamp), s."""
    joint_pos: np.ndarray
    """[S, 12] rad."""
    joint_vel: np.ndarray
    """[S, 12] rad/s."""
    joint_torque: np.ndarray | None = None
    """[S, 12] the drive's measured (estimated) torques, N·m; None where the robot reports none (or the recording
    predates them): what an actuator network is fitted to."""

    def save(self, path: Path) -> None:
        arrays = {name: value for name, value in dataclasses.asdict(self).items() if value is not None}
        with atomic_path(Path(path)) as tmp, open(tmp, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: Path) -> Recording:
        names = [field.name for field in dataclasses.fields(cls)]
        with np.load(path, allow_pickle=False) as data:  # never unpickle what a user hands over
            missing = sorted(set(names) - set(data.files) - {"joint_torque"})
            if missing:
                raise ConfigError("recording", f"{path} is not a sysid recording: it lacks {missing}")
            return cls(**{name: data[name] for name in names if name in data.files})


def record(
    robot: Robot, excitation: Excitation, settle_seconds: float = 2.0, realtime_priority: int | None = None
) -> Recording:
    """Drive a connected robot through `excitation` at RATE_HZ, every command through the safety filter, after
    `settle_seconds` moving to its start; returns what was sent and measured during the excitation.
    `realtime_priority`: run the loop under SCHED_FIFO at this priority where permitted (`realtime.py`): on a
    busy computer an ordinary thread misses ticks, and the recording then holds half the states and late commands."""
    with realtime(priority=realtime_priority):
        return _record(robot, excitation, settle_seconds)


def _record(robot: Robot, excitation: Excitation, settle_seconds: float) -> Recording:
    safety, period = SafetyFilter(robot.spec), 1.0 / RATE_HZ
    start_pose, first = robot.observe().joint_pos.copy(), excitation.command(0.0)
    commands, states, last_stamp = [], [], None
    start = time.monotonic()
    ticks = round((settle_seconds + excitation.seconds) * RATE_HZ)
    for tick in range(ticks):
        deadline = start + tick * period
        time.sleep(max(deadline - time.monotonic(), 0.0))
        state, t = robot.observe(), tick * period - settle_seconds
        if t < 0:
            blend = min(1.0, (tick + 1) / (settle_seconds * RATE_HZ))
            command = dataclasses.replace(first, position=(1 - blend) * start_pose + blend * first.position)
        else:
            command = excitation.command(t)
        sent = robot.send(safety(command, state, time.monotonic()).command)
        safety.sent(sent)
        if t >= 0:
            commands.append((time.monotonic(), sent.position, sent.kp, sent.kd))
            if state.stamp != last_stamp:
                states.append((state.stamp, state.joint_pos, state.joint_vel, state.joint_torque))
        last_stamp = state.stamp
    command_columns = [np.array(column) for column in zip(*commands, strict=True)]
    *state_columns, torques = zip(*states, strict=True)
    torque = None if any(t is None for t in torques) else np.array(torques)
    return Recording(*command_columns, *(np.array(column) for column in state_columns), torque)


RECORD_PRIORITY = 80
"""SCHED_FIFO priority of the recording loop in `record_peer` and `sysid record --realtime` (the peers run at 90,
as a robot's own computer would)."""


def record_peer(physics: JointPhysics, excitation: Excitation, workdir: Path) -> Recording:
    """Start the simulated Go2 with `physics` (hanging), record `excitation` on it through the driver, stop it."""
    from policyforge.real_robot.go2 import Go2, Go2Config
    from policyforge.real_robot.peers.process import (
        free_domain_id,
        robot_computer_for_the_peers,
        simulated_peer,
        wait_for_facts,
    )

    domain, flags = free_domain_id(), dataclasses.replace(physics, hang=True).peer_flags()
    with simulated_peer("go2", domain, Path(workdir) / "peer.json", extra_args=flags) as facts:
        wait_for_facts(facts)
        # a robot's physics runs in real time, on its own computer: a peer starved by this machine's load would
        # pause and then catch up, which no model of a robot replays
        robot_computer_for_the_peers()
        with Go2(Go2Config(domain_id=domain)) as robot:
            return record(robot, excitation, realtime_priority=RECORD_PRIORITY)


def replay(recording: Recording, physics: JointPhysics, segment_seconds: float = 1.0) -> np.ndarray:
    """The joint positions [S, 12] the hanging simulated Go2 with `physics` has at the recorded states' times
    under the recorded commands (each in force from its send time plus `physics.command_delay`), replayed in
    segments of `segment_seconds` that each start from the recorded state."""
    rec, predicted = recording, recording.joint_pos.copy()
    bounds = np.arange(rec.state_time[0], rec.state_time[-1] + segment_seconds, segment_seconds)
    for begin, end in itertools.pairwise(bounds):
        inside = np.flatnonzero((rec.state_time >= begin) & (rec.state_time < end))
        if len(inside) >= 2:
            times, positions = _replay_segment(rec, physics, inside[0], rec.state_time[inside[-1]])
            for joint in range(12):
                predicted[inside, joint] = np.interp(rec.state_time[inside], times, positions[:, joint])
    return predicted


def _replay_segment(rec: Recording, physics: JointPhysics, first: int, until: float) -> tuple[np.ndarray, np.ndarray]:
    """From recorded state `first` to time `until`: the times [T] of the physics steps and the joint positions
    [T, 12] after each (the first: the recorded state)."""
    period, zeros = 1.0 / RATE_HZ, np.zeros(12)
    robot = SimulatedGo2(RATE_HZ, dataclasses.replace(physics, hang=True))
    robot.data.qpos[robot.qpos_ids], robot.data.qvel[robot.qvel_ids] = rec.joint_pos[first], rec.joint_vel[first]
    start = rec.state_time[first]
    times = start + period * np.arange(int((until - start) / period) + 2)
    # a step uses the newest command in force when it began
    in_force = np.searchsorted(rec.command_time + physics.command_delay, times[1:] - period, side="right") - 1
    positions = [rec.joint_pos[first]]
    for i in in_force:
        command = (
            None if i < 0 else Command(rec.command_position[i], zeros, zeros, rec.command_kp[i], rec.command_kd[i])
        )
        robot.step(command, 0.0)
        positions.append(robot.joint_pos.copy())
    return times, np.array(positions)


def replay_error(recording: Recording, physics: JointPhysics) -> float:
    """RMS joint-position error of `replay` against the recording, rad."""
    return float(np.sqrt(np.mean((replay(recording, physics) - recording.joint_pos) ** 2)))


@dataclasses.dataclass
class Fit:
    """The result of `fit`."""

    physics: JointPhysics
    """The fitted parameters."""
    error_rad: float
    """Their replay error, rad."""
    evaluations: int
    """Replays run."""


def fit(recording: Recording, evaluations: int = 500, seed: int = 0) -> Fit:
    """The `JointPhysics` (fields of BOUNDS) whose replay best matches `recording`: CMA-ES over the box, from its
    centre, at most `evaluations` replays."""
    import cma

    def physics_of(unit: np.ndarray) -> JointPhysics:
        box = zip(BOUNDS.items(), np.clip(unit, 0.0, 1.0), strict=True)
        return JointPhysics(**{name: low + (high - low) * float(u) for (name, (low, high)), u in box})

    options = {"bounds": [0.0, 1.0], "maxfevals": evaluations, "seed": seed + 1, "verbose": -9}
    strategy = cma.CMAEvolutionStrategy(np.full(len(BOUNDS), 0.5), 0.25, options)
    while not strategy.stop():
        candidates = strategy.ask()
        strategy.tell(candidates, [replay_error(recording, physics_of(c)) for c in candidates])
    best = physics_of(strategy.result.xbest)
    return Fit(best, float(strategy.result.fbest), int(strategy.result.evaluations))
