"""Fault injection: a driver + its protocol peer, driven through the safety filter and the control loop by
adversarial policies and a misbehaving link, with the peer auditing every command that reaches "the motors".

Every command that reaches a peer is audited by `peers.audit.TargetAudit` (the Go2 and UR peers audit their own;
here, the goals a Feetech bus peer received and the commands the Franka driver hands to franky).

Each scenario starts a fresh peer, brings the robot to its default pose, runs a working policy (the Go2: the
walking policy; a Feetech arm: a smooth joint-space wave) and injects one fault part-way.
It is handled when no unsafe command reached the peer and the filter reacted as it must: bad actions refused,
and the robot in its safe mode (damping) or e-stopped at the end of a fault that persists.
"""

from __future__ import annotations

import dataclasses
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policyforge.real_robot.arm_adapter import ArmAdapter
from policyforge.real_robot.deploy import ExportedPolicy, QuadrupedAdapter
from policyforge.real_robot.feetech import (
    RAD_PER_STEP,
    SO100_MOTORS,
    FeetechArm,
    FeetechConfig,
    MotorCalibration,
    save_calibration,
)
from policyforge.real_robot.franka import FRANKA_SAFETY, Franka, FrankaConfig
from policyforge.real_robot.go2 import Go2, Go2Config
from policyforge.real_robot.loop import ControlLoop, LoopConfig, LoopReport
from policyforge.real_robot.peers.audit import TargetAudit
from policyforge.real_robot.peers.feetech_sim import FeetechBusPeer
from policyforge.real_robot.peers.process import free_domain_id, read_facts, simulated_peer
from policyforge.real_robot.robot import Command, RobotSpec, RobotState
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter
from policyforge.real_robot.ur import UR, URConfig
from policyforge.sims.tasks.quadruped import QuadrupedConfig

PREPARE_S, RUN_S, FAULT_AT_S = 1.0, 3.0, 1.0
"""Stand-up time, policy time, and when (into the policy phase) the fault starts, s."""
PEER_START_S = 90.0
"""How long a simulated peer may take to start (its first facts): 4 s at load 3, 25 s at load 8 for the Go2's."""


class FaultyPolicy:
    """A working policy that turns bad after `FAULT_AT_S` of policy time (`rate_hz` steps a second)."""

    def __init__(self, policy: Callable[[np.ndarray], np.ndarray], fault: str, rate_hz: float = 50.0):
        self.policy, self.fault, self.steps, self.rate_hz = policy, fault, 0, rate_hz

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        self.steps += 1
        action = self.policy(obs)
        if self.steps <= FAULT_AT_S * self.rate_hz:
            return action
        if self.fault == "nan":
            return np.full_like(action, np.nan)
        if self.fault == "huge":
            return np.full_like(action, 1e6)
        if self.fault == "oscillating":
            return np.full_like(action, 1.0 if self.steps % 2 else -1.0)
        if self.fault == "stall":
            time.sleep(10.0)
        if self.fault == "exception":
            raise RuntimeError("the policy crashed")
        if self.fault == "dive":  # an end-effector policy's "straight down" (arm tasks: action[2] is z)
            return np.array([0.0, 0.0, -1.0, *np.zeros(len(action) - 3)])
        return action


@dataclasses.dataclass
class Scenario:
    name: str
    """What goes wrong."""
    policy_fault: str | None = None
    """A FaultyPolicy fault."""
    peer_args: tuple[str, ...] = ()
    """Faults the peer injects (go2_sim flags)."""
    expect: str = "estop"
    """The filter's required reaction: "estop" (latched by the end) or "safe" (safe mode entered; a short
    fault may recover)."""


def policy_scenarios() -> list[Scenario]:
    """The policy faults every robot is driven with; each must end in the e-stop."""
    return [
        Scenario("NaN actions", policy_fault="nan"),
        Scenario("huge actions (1e6)", policy_fault="huge"),
        Scenario("oscillating actions (±1 every step)", policy_fault="oscillating"),
        Scenario("policy stalls (10 s)", policy_fault="stall"),
        Scenario("policy raises", policy_fault="exception"),
    ]


def go2_scenarios() -> list[Scenario]:
    start = PREPARE_S + FAULT_AT_S  # peer time of the fault (the peer's clock starts with the driver's)
    return [
        *policy_scenarios(),
        Scenario("state messages dropped for 0.2 s", peer_args=("--drop-state", f"{start},0.2"), expect="safe"),
        Scenario("state messages 150 ms late for 1.5 s", peer_args=("--delay-state", f"{start},1.5,0.15")),
        Scenario("robot computer dies", peer_args=("--die-at", f"{start}")),
    ]


def run_scenario(scenario: Scenario, policy_path: Path, workdir: Path) -> dict:
    """Run one scenario; returns what happened and whether it was handled."""
    domain = free_domain_id()
    policy = FaultyPolicy(ExportedPolicy(policy_path), scenario.policy_fault or "")
    adapter = QuadrupedAdapter(QuadrupedConfig(), (0.5, 0.0, 0.0))
    facts_path = workdir / f"peer-{domain}.json"
    modes: set[str] = set()
    with simulated_peer("go2", domain, facts_path, extra_args=scenario.peer_args):
        wait_for_facts(facts_path)
        with Go2(Go2Config(domain_id=domain)) as robot:
            safety = SafetyFilter(robot.spec, SafetyConfig())
            config = LoopConfig(rate_hz=500.0, policy_rate_hz=50.0, seconds=RUN_S, prepare_seconds=PREPARE_S)
            last_tick = [-1]

            def on_tick(tick: int, state, filtered) -> None:
                modes.add(filtered.mode)
                last_tick[0] = tick

            report = ControlLoop(robot, safety, policy, adapter, config, on_tick).run()
            commands = robot.stats["commands"]
        time.sleep(0.3)
        facts = read_facts(facts_path)
    unsafe = sum(facts.get("unsafe", {}).values())
    row = _result(scenario, report, modes, commands, unsafe, facts.get("first_unsafe"))
    return row | {"commanded_until_s": (last_tick[0] + 1) / config.rate_hz}


def fuzz(
    policy_path: Path, arm_policy_path: Path, robots: tuple[str, ...] = ("go2", "feetech", "ur", "franka")
) -> tuple[list[dict], dict]:
    """Every scenario of every robot (`policy_path`: a quadruped-walk export, `arm_policy_path`: an arm-reach
    export); returns the rows and the summary {commands_sent, unsafe_commands_reaching_peer, faults_injected,
    faults_handled}."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="policyforge-fuzz-") as tmp:
        if "go2" in robots:
            rows += [{"robot": "go2", **run_scenario(s, policy_path, Path(tmp))} for s in go2_scenarios()]
        if "feetech" in robots:
            rows += [{"robot": "feetech", **run_feetech_scenario(s, Path(tmp))} for s in feetech_scenarios()]
        if "ur" in robots:
            rows += [{"robot": "ur", **run_ur_scenario(s, Path(tmp))} for s in ur_scenarios()]
        if "franka" in robots:
            rows += [{"robot": "franka", **run_franka_scenario(s, arm_policy_path)} for s in franka_scenarios()]
    summary = {
        "commands_sent": sum(r["commands_sent"] for r in rows),
        "unsafe_commands_reaching_peer": sum(r["unsafe_at_peer"] for r in rows),
        "faults_injected": len(rows),
        "faults_handled": sum(r["handled"] for r in rows),
    }
    return rows, summary


# -- Feetech bus arm ---------------------------------------------------------------------------------------

FEETECH_IDS = [1, 2, 3, 4, 5, 6]
FEETECH_RATE_HZ = 30.0


class JointAdapter:
    """A joint-space policy on a bus arm: actions [-1, 1] span each joint's calibrated range; the observation is
    the joints and the last action."""

    def __init__(self, spec: RobotSpec):
        self.mid = (spec.position_low + spec.position_high) / 2
        self.half = (spec.position_high - spec.position_low) / 2
        self.action_dim = spec.num_joints
        self.default_pose = self.mid.copy()

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        return np.concatenate([state.joint_pos, last_action])

    def command(self, action: np.ndarray) -> Command:
        return Command(position=self.mid + np.clip(action, -1.0, 1.0) * self.half)

    def pose_command(self, position: np.ndarray) -> Command:
        return Command(position=np.asarray(position, dtype=np.float64))


class WavePolicy:
    """A smooth working policy: every joint swings through half its range at 0.25 Hz (`rate_hz` calls a second)."""

    def __init__(self, rate_hz: float = FEETECH_RATE_HZ):
        self.step, self.rate_hz = 0, rate_hz

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        self.step += 1
        return 0.5 * np.sin(2 * np.pi * 0.25 * self.step / self.rate_hz + np.arange(6))


def feetech_scenarios() -> list[Scenario]:
    return [
        *policy_scenarios(),
        Scenario("servos silent for 0.3 s", peer_args=("silence",), expect="safe"),
        Scenario("bus adapter unplugged", peer_args=("die",)),
    ]


def run_feetech_scenario(scenario: Scenario, workdir: Path) -> dict:
    """One scenario on servos emulated behind a pseudo-terminal; the audit checks every goal written."""
    peer = FeetechBusPeer(FEETECH_IDS)
    calibration = workdir / "so100.json"
    save_calibration(
        calibration, {m: MotorCalibration(i, 2048, 1248, 2848) for m, i in zip(SO100_MOTORS, FEETECH_IDS, strict=True)}
    )
    policy = FaultyPolicy(WavePolicy(), scenario.policy_fault or "", rate_hz=FEETECH_RATE_HZ)
    fault_at = PREPARE_S + FAULT_AT_S
    if "silence" in scenario.peer_args:
        threading.Timer(fault_at, peer.silence, [0.3]).start()
    if "die" in scenario.peer_args:
        threading.Timer(fault_at, peer.close).start()
    modes: set[str] = set()
    try:
        with FeetechArm(FeetechConfig(port=peer.port, calibration=calibration, rate_hz=FEETECH_RATE_HZ)) as arm:
            safety = SafetyFilter(arm.spec, SafetyConfig())
            config = LoopConfig(
                rate_hz=FEETECH_RATE_HZ, policy_rate_hz=FEETECH_RATE_HZ, seconds=RUN_S, prepare_seconds=PREPARE_S
            )
            loop = ControlLoop(arm, safety, policy, JointAdapter(arm.spec), config, lambda t, s, f: modes.add(f.mode))
            report = loop.run()
    finally:
        peer.close()
    audit = audit_goals(peer.goals_written, arm, SafetyConfig().max_step)
    return _result(scenario, report, modes, audit.targets, sum(audit.unsafe.values()), audit.first)


def audit_goals(goals_written: list[tuple[int, int]], arm: FeetechArm, max_step: float) -> TargetAudit:
    """Audit the goals the servos received (`FeetechBusPeer.goals_written`: (id, raw goal) in the order written)
    as joint targets in rad, one per sync write, against the arm's calibrated range."""
    goals = np.array(goals_written, dtype=np.int64).reshape(-1, 2)
    per_servo = [goals[goals[:, 0] == servo, 1] for servo in arm.ids]
    if len({len(raw) for raw in per_servo}) > 1:  # every write sets all of the arm's servos at once
        counts = dict(zip(arm.ids, map(len, per_servo), strict=True))
        raise RuntimeError(f"the servos received different numbers of goals {counts}: a write landed in part")
    audit = TargetAudit(arm.spec, max_step)
    for raw in np.stack(per_servo, axis=1) if goals.size else []:
        audit.check(Command(position=(raw - arm.center) * RAD_PER_STEP))
    return audit


# -- UR (our simulated controller) -------------------------------------------------------------------------

UR_RATE_HZ, UR_POLICY_HZ = 125.0, 25.0
UR_RANGE = 0.3
"""The wave policy's actions span the home pose ± this, rad."""


def ur_scenarios() -> list[Scenario]:
    return [
        *policy_scenarios(),
        Scenario("program stopped on the pendant", peer_args=("dashboard-stop",)),
    ]


def run_ur_scenario(scenario: Scenario, workdir: Path) -> dict:
    """One scenario on the simulated UR controller (servoJ at 125 Hz, a 25 Hz joint-space wave policy); the
    controller audits every servoJ target that reaches it."""
    policy = FaultyPolicy(WavePolicy(UR_POLICY_HZ), scenario.policy_fault or "", rate_hz=UR_POLICY_HZ)
    facts_path, modes = workdir / f"ur-facts-{time.monotonic_ns()}.json", set()  # a fresh file per peer
    with simulated_peer("ur", 0, facts_path, extra_args=("--max-step", str(SafetyConfig().max_step))):
        wait_for_facts(facts_path)  # written once every port listens
        with UR(URConfig(frequency=UR_RATE_HZ)) as ur:
            home = ur.observe().joint_pos
            span = dataclasses.replace(ur.spec, position_low=home - UR_RANGE, position_high=home + UR_RANGE)
            safety = SafetyFilter(ur.spec, SafetyConfig(state_timeout=0.2, command_timeout=0.5))
            config = LoopConfig(
                rate_hz=UR_RATE_HZ, policy_rate_hz=UR_POLICY_HZ, seconds=RUN_S, prepare_seconds=PREPARE_S
            )
            loop = ControlLoop(ur, safety, policy, JointAdapter(span), config, lambda t, s, f: modes.add(f.mode))
            if "dashboard-stop" in scenario.peer_args:
                threading.Timer(PREPARE_S + FAULT_AT_S, _dashboard_stop).start()
            report = _run(loop, link_fault="dashboard-stop" in scenario.peer_args)
            commands = ur.stats["commands"]
        time.sleep(0.3)
        facts = read_facts(facts_path)
    unsafe = sum(facts.get("unsafe", {}).values())
    return _result(scenario, report, modes, commands, unsafe, facts.get("first_unsafe"))


def _dashboard_stop() -> None:
    """Stop the running program as the pendant's stop button (or a dashboard client) does."""
    with socket.create_connection(("127.0.0.1", 29999), timeout=2) as dashboard, dashboard.makefile("rb") as lines:
        lines.readline()  # the banner
        dashboard.sendall(b"stop\n")
        lines.readline()


# -- Franka (franky-sim) -----------------------------------------------------------------------------------

ARM_SAFETY = SafetyConfig(**FRANKA_SAFETY)
FRANKA_RUN_S = 5.0
"""Policy time of a Franka scenario, s: a dive from the ready pose (TCP 0.53 m up) reaches the workspace floor
after about 2 s at the speed franky allows, then the e-stop takes another second."""


class AuditedFranka(Franka):
    """The Franka driver, auditing each command on its way into franky (franky-sim cannot be asked what
    reached its motors) with `TargetAudit`, the workspace box included (forward kinematics of the target)."""

    def __init__(self, config: FrankaConfig, forward_kinematics: Callable[[np.ndarray], np.ndarray]):
        super().__init__(config)
        self.audit = TargetAudit(self.spec, ARM_SAFETY.max_step, forward_kinematics)

    def send(self, command: Command) -> Command:
        self.audit.check(command)
        return super().send(command)


def franka_scenarios() -> list[Scenario]:
    return [
        *policy_scenarios(),
        Scenario("actions dive through the table", policy_fault="dive"),
        Scenario("robot controller dies", peer_args=("die",)),
    ]


def run_franka_scenario(scenario: Scenario, policy_path: Path) -> dict:
    """One scenario on franky-sim with the arm-reach policy (joint mode, 25 Hz)."""
    exported = ExportedPolicy(policy_path)
    adapter = ArmAdapter("arm-reach", exported.spec["task_options"], np.array([0.5, 0.1, 0.25]))
    rate = 1.0 / float(exported.spec["control_dt"])
    policy = FaultyPolicy(exported, scenario.policy_fault or "", rate_hz=rate)
    robot = AuditedFranka(FrankaConfig(rate_hz=rate), adapter.forward_kinematics)
    # franky-sim starts and connects in about a second; "die" kills it about FAULT_AT_S into the policy
    kill_after = PREPARE_S + FAULT_AT_S + 1.0 if "die" in scenario.peer_args else None
    with (
        tempfile.TemporaryDirectory() as tmp,
        simulated_peer("franka", 0, Path(tmp) / "unused", kill_after=kill_after),
        robot,
    ):
        safety = SafetyFilter(robot.spec, ARM_SAFETY, adapter.forward_kinematics)
        config = LoopConfig(rate_hz=rate, policy_rate_hz=rate, seconds=FRANKA_RUN_S, prepare_seconds=PREPARE_S)
        loop = ControlLoop(robot, safety, policy, adapter, config)
        report = _run(loop, link_fault=kill_after is not None)
        commands, unsafe = robot.stats["commands"], sum(robot.audit.unsafe.values())
    return _result(scenario, report, set(), commands, unsafe, robot.audit.first)


def wait_for_facts(facts_path: Path, timeout: float = PEER_START_S) -> dict:
    """A peer's first facts, once it wrote them (it serves the robot's protocol from then on)."""
    deadline = time.monotonic() + timeout
    while not (facts := read_facts(facts_path)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the simulated peer wrote no facts to {facts_path} within {timeout:.0f} s")
        time.sleep(0.05)
    return facts


def _run(loop: ControlLoop, link_fault: bool) -> LoopReport:
    """Run the loop to its end. A scenario that breaks the link to the robot (`link_fault`) makes the driver
    raise, which ends the loop with the e-stop latched: its report up to then. Anything else raises."""
    try:
        return loop.run()
    except Exception:
        if not link_fault:
            raise
        return loop.report


def _result(
    scenario: Scenario, report, modes: set[str], commands: int, unsafe: int, first_unsafe: dict | None = None
) -> dict:
    """One scenario's row: handled when nothing unsafe reached the peer and the filter reacted as
    `scenario.expect` demands (`modes`: the filter modes seen during the run)."""
    reacted = {"estop": report.final_mode == "estop", "safe": bool(modes & {"safe", "estop"})}[scenario.expect]
    return {
        "scenario": scenario.name,
        "commands_sent": commands,
        "unsafe_at_peer": unsafe,
        "interventions": report.interventions,
        "final_mode": report.final_mode,
        "handled": bool(reacted and unsafe == 0),
        "first_unsafe": first_unsafe,
    }
