"""The Go2 safety chain under latency, on a virtual clock: the walking policy, the safety filter and the driver's
RobotClock against the simulated Go2's physics and command audit, with the delays a loaded computer causes
injected deterministically — states delayed in transit for seconds, the peer stalled then catching up, the
loop's ticks late — instead of relying on machine load. No unsafe command may reach the audit.

The co-simulation follows go2_sim.serve and ControlLoop.run step by step: the peer takes the commands that
arrived, audits them, steps the physics with the newest fresh one (or damps) and publishes a state stamped with
its clock; the driver ticks every 2 ms, observes the newest state delivered, runs the policy every 10 ticks,
filters and sends. Each side's work costs virtual time; delays add to it."""

from __future__ import annotations

import collections
import dataclasses
import heapq

import numpy as np
import pytest

from policyforge.real_robot.deploy import ExportedPolicy, QuadrupedAdapter
from policyforge.real_robot.go2 import go2_spec, lowstate_state
from policyforge.real_robot.peers.audit import TargetAudit
from policyforge.real_robot.peers.go2_model import SimulatedGo2
from policyforge.real_robot.peers.go2_sim import MEASUREMENT_WINDOW
from policyforge.real_robot.robot import RobotClock
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter
from policyforge.sims.tasks.quadruped import QuadrupedConfig
from tests.real_robot.conftest import GO2_POLICY

PERIOD = 0.002
"""Physics and loop period, s (500 Hz)."""
PREPARE_S, RUN_S = 1.0, 3.0
PEER_COST, DRIVER_COST, DELIVERY = 0.0003, 0.0006, 0.0002
"""Virtual time a peer step and a driver tick take, and a message's delivery, s."""


@dataclasses.dataclass
class Delays:
    """What goes wrong, in seconds of virtual time."""

    state_delay: tuple[float, float, float] | None = None
    """(start, duration, delay): states published then arrive `delay` late (a loaded computer, a busy link)."""
    peer_stall: tuple[float, float] | None = None
    """(every, duration): the peer stops, then catches up its physics (a loaded robot computer)."""
    slow_tick: tuple[float, float] | None = None
    """(every, duration): a tick of the loop takes this much longer (the driver descheduled)."""


def stalled(now: float, stall: tuple[float, float] | None, phase: float) -> float:
    """When a process stalled `stall[1]` s every `stall[0]` s (from `phase`) runs again, if it is stalled now."""
    if stall is None:
        return now
    begin = phase + np.floor((now - phase) / stall[0]) * stall[0]
    return begin + stall[1] if begin <= now < begin + stall[1] else now


class CoSimulation:
    """The peer and the driver as two processes on one virtual clock (module docstring)."""

    def __init__(self, delays: Delays):
        self.delays, self.robot, self.audit = delays, SimulatedGo2(1 / PERIOD), TargetAudit(go2_spec(), 0.1)
        self.safety, self.clock = SafetyFilter(go2_spec(), SafetyConfig()), RobotClock()
        self.states: list[tuple[float, object]] = []  # (arrival, LowState_)
        self.commands: list[tuple[float, int, object]] = []  # (arrival, sequence, Command)
        self.published: collections.deque = collections.deque()
        self.policy = ExportedPolicy(GO2_POLICY)
        self.adapter = QuadrupedAdapter(QuadrupedConfig(), (0.5, 0.0, 0.0))
        self.done, self.last_arrival = False, 0.0

    def peer(self):
        now, command, command_time = 0.0, None, -np.inf
        while not self.done:
            now = stalled(now, self.delays.peer_stall, 0.11)
            for arrived in [c for c in self.commands if c[0] <= now]:
                self.commands.remove(arrived)
                seen = np.array([q for _, q in self.published])
                self.audit.check(arrived[2], self.robot.joint_pos, seen)
                command, command_time = arrived[2], now
            self.robot.step(command if now - command_time <= 0.05 else None, 3.0)
            delay = self.delays.state_delay
            late = delay[2] if delay and delay[0] <= now < delay[0] + delay[1] else 0.0
            self.last_arrival = max(now + DELIVERY + late, self.last_arrival)  # in order, as the peer's outbox
            self.states.append((self.last_arrival, self.robot.lowstate(round(now * 1000))))
            self.published.append((now, self.robot.joint_pos.copy()))
            while self.published[0][0] < now - MEASUREMENT_WINDOW:
                self.published.popleft()
            now = max(now + PEER_COST, self.robot.tick * PERIOD)  # sleeps until its next step, or catches up
            yield now

    def driver(self):
        now, tick, sequence, last_action = 0.1, 0, 0, np.zeros(12)
        prepare, total = round(PREPARE_S / PERIOD), round((PREPARE_S + RUN_S) / PERIOD)
        while not any(arrival <= now for arrival, _ in self.states):
            now += PERIOD
            yield now
        start, ramp_from = now, lowstate_state(self.states[0][1], 0.0).joint_pos
        while tick < total:
            deadline = start + tick * PERIOD
            now = max(now, deadline)
            if now - deadline > PERIOD:  # woke a whole period late: skip to the grid
                tick = int((now - start) / PERIOD) + 1
                continue
            arrived = [s for s in self.states if s[0] <= now]
            for old in arrived[:-1]:
                self.states.remove(old)
            msg = arrived[-1][1]
            state = lowstate_state(msg, self.clock.stamp(msg.tick * 1e-3, now))
            command = None
            if tick < prepare:
                blend = (tick + 1) / prepare
                command = self.adapter.pose_command((1 - blend) * ramp_from + blend * self.adapter.default_pose)
            elif (tick - prepare) % 10 == 0:
                action = self.policy(self.adapter.observation(state, last_action))
                if self.safety.check_action(action, now):
                    last_action, command = np.clip(action, -1, 1), self.adapter.command(action)
            sequence += 1
            self.commands.append((now + DELIVERY, sequence, self.safety(command, state, now).command))
            now = stalled(now + DRIVER_COST, self.delays.slow_tick, 0.07)
            tick += 1
            yield now
        self.done = True

    def run(self) -> None:
        processes = [(0.0, 0, self.peer()), (0.1, 1, self.driver())]
        while processes:
            _, order, process = heapq.heappop(processes)
            wakes = next(process, None)
            if wakes is not None and not self.done:
                heapq.heappush(processes, (wakes, order, process))


@pytest.mark.parametrize(
    "delays, interventions",
    [
        # sustained latency: was absorbed by the RobotClock as drift (2 %/s), states 45 ms old looked fresh
        (Delays(state_delay=(1.5, 2.5, 0.045)), {"torque_limit"}),
        # stale states → damping → back to tracking from a state 30-50 ms old (the old audit allowed 20 ms)
        (Delays(peer_stall=(0.5, 0.06), state_delay=(1.5, 2.5, 0.03)), {"stale_state"}),
        # the loop's ticks late by 20 ms ten times a second
        (Delays(slow_tick=(0.1, 0.02)), {"torque_limit"}),
    ],
    ids=["states-45ms-late", "peer-stalls-and-states-30ms-late", "slow-ticks"],
)
def test_no_unsafe_command_reaches_the_motors_under_latency(delays, interventions):
    world = CoSimulation(delays)
    world.run()
    assert world.audit.unsafe == {}, world.audit.first
    assert interventions <= set(world.safety.counts), world.safety.counts  # the filter did have to act
    assert np.linalg.norm(world.robot.base_position[:2]) > 0.3  # it walked: commands were not just damping
