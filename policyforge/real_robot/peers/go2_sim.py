"""A simulated Unitree Go2 that speaks the real low-level DDS protocol: the `quadruped-walk` MuJoCo model at
500 Hz, subscribed to `rt/lowcmd` and publishing `rt/lowstate`, both with Unitree's message types and CRC.

Each physics step the motors apply τ = τ_ff + kp (q* − q) + kd (q̇* − q̇) (saturated at the motors' torque
limits) from the newest LowCmd with a valid CRC. Unlike the usual sim bridges, the peer drops to damping when
no valid command arrived for `command_timeout` s, as a safe real robot's firmware should be assumed *not* to.
It starts lying down (joints folded, damping) and audits every command it receives against the Go2's limits
(`peers.audit.TargetAudit`), so tests can count unsafe commands that reached "the motors". Facts go to
`stats_path` (JSON, atomically, ten times a second and at exit). It answers Unitree's motion-switcher service
(`peers.unitree_services`), so Unitree's own low-level SDK examples run against it unmodified; `--bridge-wire`
publishes the states as Unitree's simulator bridge (unitree_mujoco) does, without CRC or tick.

    python -m policyforge.real_robot.peers.go2_sim --domain-id 7 --stats /tmp/go2.json [--seconds 30]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
from cyclonedds.core import Policy, Qos
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration
from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowCmd_, LowState_
from unitree_sdk2py.utils.crc import CRC

from policyforge.io import atomic_path
from policyforge.real_robot import dds
from policyforge.real_robot.go2 import (
    LOWCMD_TOPIC,
    LOWSTATE_TOPIC,
    empty_lowstate,
    go2_spec,
    lowcmd_command,
)
from policyforge.real_robot.peers.audit import TargetAudit
from policyforge.real_robot.peers.go2_model import JointPhysics, SimulatedGo2
from policyforge.real_robot.peers.unitree_services import MotionSwitcherService
from policyforge.real_robot.robot import Command
from policyforge.sims.xmath import projected_gravity

MEASUREMENT_WINDOW = 0.06
"""After damping the driver steps from the joint as it measured it: from any state published this long ago or
less, s (the safety filter's state_timeout, 50 ms, plus 10 ms of delivery)."""

FACTS_PERIOD_S = 0.1
"""How often the peer writes its facts file: a reader sees a snapshot up to this old."""
BRIDGE_ZERO_STATES = 20
"""With `bridge_wire`, this many all-zero LowStates come first (unitree_mujoco publishes before it steps)."""


@dataclasses.dataclass
class StateFaults:
    """Faults the peer injects into its own LowState stream, at times of its clock (s since it started, as its
    state stamps count them: on a loaded machine the physics falls behind that clock, and the driver's loop
    follows the clock, not the physics)."""

    drop: tuple[float, float] | None = None
    """(start, duration): no LowState is published in this window."""
    delay: tuple[float, float, float] | None = None
    """(start, duration, delay): LowStates of this window are published `delay` s late."""
    die_at: float | None = None
    """The process exits abruptly at this time (no damping, no goodbye), like a crashed robot computer."""
    stall: tuple[float, float] | None = None
    """(every, duration): every `every` s the process stops for `duration` s, then catches up (a loaded computer
    that deschedules the simulator)."""


class StateOutbox:
    """Publishes LowStates, applying `StateFaults`."""

    def __init__(self, writer: DataWriter, faults: StateFaults):
        self.writer, self.faults = writer, faults
        self.delayed: collections.deque[tuple[float, LowState_]] = collections.deque()

    def publish(self, msg: LowState_, clock: float, now: float) -> None:
        faults = self.faults
        if faults.die_at is not None and clock >= faults.die_at:
            os._exit(3)
        while self.delayed and self.delayed[0][0] <= now:
            self.writer.write(self.delayed.popleft()[1])
        if faults.drop and faults.drop[0] <= clock < faults.drop[0] + faults.drop[1]:
            return
        if faults.delay and faults.delay[0] <= clock < faults.delay[0] + faults.delay[1]:
            self.delayed.append((now + faults.delay[2], msg))
        elif not self.delayed:  # in order: nothing overtakes a delayed message
            self.writer.write(msg)
        else:
            self.delayed.append((now, msg))


@dataclasses.dataclass
class Go2PeerConfig:
    """The simulated Go2."""

    domain_id: int = 0
    """DDS domain."""
    interface: str = "lo"
    """Network interface (loopback)."""
    rate_hz: float = 500.0
    """Physics and LowState rate, Hz (the real robot's low-level rate)."""
    command_timeout: float = 0.05
    """No valid LowCmd for this long → damping, s."""
    damping_kd: float = 3.0
    """Damping gain of the fallback, N·m·s/rad."""
    max_step: float = 0.1
    """The audit's bound on a joint target's change between consecutive commands, rad."""
    seconds: float | None = None
    """Stop after this much simulated time (None: until SIGTERM/SIGINT)."""
    stats_path: Path | None = None
    """Where to write the facts (JSON)."""
    faults: StateFaults = dataclasses.field(default_factory=StateFaults)
    """Faults to inject into the state stream."""
    trace_path: Path | None = None
    """Where to save every received command with the state it was audited against (npz, at exit)."""
    bridge_wire: bool = False
    """Publish LowStates as Unitree's simulator bridge (unitree_mujoco) does: `crc`, `tick`, `head` and
    `level_flag` 0, and all zeros for the first BRIDGE_ZERO_STATES (a quaternion of length 0)."""
    motion_mode: str = ""
    """The motion mode the motion-switcher service reports at start ("" none; e.g. "normal": the sport controller
    holds the robot and LowCmds are ignored, counted in `commands_in_motion_mode`, until ReleaseMode)."""
    physics: JointPhysics = dataclasses.field(default_factory=JointPhysics)
    """The leg joints' physics (known parameters for system identification; default: go2.xml's)."""


def bridge_wire(msg: LowState_, before_physics: bool) -> LowState_:
    """`msg` as Unitree's simulator bridge publishes it: nothing but zeros before its physics ran, and never a
    CRC, tick, head or level flag."""
    if before_physics:
        return empty_lowstate()
    msg.crc = msg.tick = msg.level_flag = 0
    msg.head = [0, 0]
    return msg


def serve(config: Go2PeerConfig) -> dict:
    """Run the peer until `config.seconds` of simulated time or a stop signal; return its facts."""
    robot = SimulatedGo2(config.rate_hz, config.physics)
    participant = dds.participant(config.domain_id, config.interface)
    every_command = Qos(Policy.History.KeepLast(64), Policy.Reliability.Reliable(duration(milliseconds=10)))
    reader = DataReader(participant, Topic(participant, LOWCMD_TOPIC, LowCmd_), qos=every_command)
    outbox = StateOutbox(DataWriter(participant, Topic(participant, LOWSTATE_TOPIC, LowState_)), config.faults)
    motion_switcher = MotionSwitcherService(participant, config.motion_mode)
    audit = TargetAudit(go2_spec(), config.max_step)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    facts = {"commands": 0, "lost_commands": 0, "bad_crc_commands": 0, "damping_steps": 0, "steps": 0}
    facts["commands_in_motion_mode"], facts["motion_switcher_calls"] = 0, motion_switcher.calls
    facts["unsafe"], sequence = audit.unsafe, None
    facts["max_publish_gap_ms"], last_written = 0.0, time.monotonic()
    command, command_time = None, -np.inf
    pending: collections.deque[tuple[float, Command]] = collections.deque()
    """(when it takes effect, command) of the commands received and not yet in force."""
    trace, trace_published = ([], []) if config.trace_path is not None else (None, None)
    published: collections.deque[tuple[float, np.ndarray]] = collections.deque()
    """(time, joint positions [12]) of the states published in the last MEASUREMENT_WINDOW."""
    period, start = 1.0 / config.rate_hz, time.monotonic()
    next_write, start_xy, min_height = start, robot.base_position[:2], np.inf
    while not stopping and (config.seconds is None or robot.tick * period < config.seconds):
        for msg in reader.take(N=64):
            if not isinstance(msg, LowCmd_):
                continue
            if CRC().Crc(msg) != msg.crc:
                facts["bad_crc_commands"] += 1
                continue
            if motion_switcher.mode:
                facts["commands_in_motion_mode"] += 1
                continue
            facts["commands"] += 1
            pending.append((time.monotonic() + config.physics.command_delay, lowcmd_command(msg)))
            received = pending[-1][1]
            lost = max(msg.reserve - sequence - 1, 0) if sequence is not None else 0
            facts["lost_commands"], sequence = facts["lost_commands"] + lost, msg.reserve
            facts["first_sequence"], facts["last_sequence"] = facts.get("first_sequence", sequence), sequence
            audit.check(received, robot.joint_pos, np.array([q for _, q in published]), lost)
            if trace is not None:
                trace.append((msg.reserve, time.monotonic(), robot.tick * period, robot.joint_pos.copy(),
                              robot.joint_vel.copy(), received.position, received.kp, len(audit.events)))  # fmt: skip
            facts["first_unsafe"] = audit.first
            facts["last_command_stiff"] = bool(np.any(received.kp > 0))
        while pending and pending[0][0] <= time.monotonic():  # commands take effect command_delay after arriving
            command_time, command = pending.popleft()
        fresh = command is not None and time.monotonic() - command_time <= config.command_timeout
        facts["damping_steps"] += not fresh
        robot.step(command if fresh else None, config.damping_kd)
        written = time.monotonic()
        # stamped with the time since start, as the robot's own clock counts it: after a stall the physics
        # catches up in a burst, but the stamps stay true to when each state is sent
        state = robot.lowstate(round((written - start) * 1000))
        if config.bridge_wire:
            state = bridge_wire(state, robot.tick <= BRIDGE_ZERO_STATES)
        outbox.publish(state, written - start, written)
        if robot.tick % 10 == 0:
            motion_switcher.poll()
        published.append((written, robot.joint_pos.copy()))
        while published[0][0] < written - MEASUREMENT_WINDOW:
            published.popleft()
        if trace is not None:
            trace_published.append((round((written - start) * 1000), robot.tick * period))
        facts["steps"] = robot.tick
        facts["max_publish_gap_ms"] = max(facts["max_publish_gap_ms"], (written - last_written) * 1e3)
        last_written = written
        min_height = min(min_height, robot.base_position[2])
        now = time.monotonic()
        if config.stats_path is not None and now >= next_write:
            _write(config.stats_path, facts, robot, start_xy, min_height, now - start)
            next_write = now + FACTS_PERIOD_S
        stall = config.faults.stall
        if stall and robot.tick % max(round(stall[0] / period), 1) == 0:
            time.sleep(stall[1])
        delay = start + robot.tick * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    if config.stats_path is not None:
        _write(config.stats_path, facts, robot, start_xy, min_height, time.monotonic() - start)
    if trace is not None:
        columns = ("sequence", "received", "sim_time", "joint_pos", "joint_vel", "position", "kp", "unsafe_so_far")
        arrays = {c: np.array(v) for c, v in zip(columns, zip(*trace, strict=True), strict=True)}
        np.savez(config.trace_path, start=start, published=np.array(trace_published), **arrays)
    return facts


def _write(path: Path, facts: dict, robot: SimulatedGo2, start_xy: np.ndarray, min_height: float, wall: float) -> None:
    position = robot.base_position
    summary = {
        **facts,
        "sim_seconds": robot.tick * robot.model.opt.timestep,
        "wall_seconds": wall,
        "base_position": position.tolist(),
        "base_height": float(position[2]),
        "min_base_height": float(min_height),
        "upright": float(-projected_gravity(robot.sensor("orientation")[None], np)[0, 2]),
        "displacement": (position[:2] - start_xy).tolist(),
        "joint_pos": robot.joint_pos.tolist(),
    }
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(json.dumps(summary, default=lambda value: np.asarray(value).tolist()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain-id", type=int, default=0)
    parser.add_argument("--interface", default="lo")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--command-timeout", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--stats", type=Path, default=None)
    parser.add_argument("--drop-state", default=None, help="START,DURATION (s): publish no LowState then")
    parser.add_argument("--delay-state", default=None, help="START,DURATION,DELAY (s): publish LowStates late")
    parser.add_argument("--die-at", type=float, default=None, help="exit abruptly at this time of its clock (s)")
    parser.add_argument("--stall", default=None, help="EVERY,DURATION (s): stop for DURATION every EVERY s")
    parser.add_argument("--trace", type=Path, default=None, help="save every command received (npz) here")
    parser.add_argument("--bridge-wire", action="store_true", help="states as unitree_mujoco's bridge sends them")
    parser.add_argument("--motion-mode", default="", help="motion mode active at start (e.g. normal); default none")
    parser.add_argument("--hang", action="store_true", help="trunk fixed in the air, legs free (identification)")
    parser.add_argument("--joint-damping", type=float, default=None, help="leg joints' damping, N·m·s/rad")
    parser.add_argument("--armature", type=float, default=None, help="leg joints' armature, kg·m²")
    parser.add_argument("--frictionloss", type=float, default=None, help="leg joints' dry friction, N·m")
    parser.add_argument("--motor-strength", type=float, default=1.0, help="applied torque per unit commanded")
    parser.add_argument("--command-delay", type=float, default=0.0, help="s from a command's arrival to its effect")
    args = parser.parse_args(argv)
    numbers = lambda text: tuple(float(x) for x in text.split(",")) if text else None  # noqa: E731
    faults = StateFaults(
        drop=numbers(args.drop_state), delay=numbers(args.delay_state), die_at=args.die_at, stall=numbers(args.stall)
    )
    config = Go2PeerConfig(
        domain_id=args.domain_id, interface=args.interface, rate_hz=args.rate,
        command_timeout=args.command_timeout, seconds=args.seconds, stats_path=args.stats, faults=faults,
        trace_path=args.trace, bridge_wire=args.bridge_wire, motion_mode=args.motion_mode,
        physics=JointPhysics(args.joint_damping, args.armature, args.frictionloss, args.motor_strength,
                             args.command_delay, args.hang),
    )  # fmt: skip
    serve(config)


if __name__ == "__main__":
    main()
