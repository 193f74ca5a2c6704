"""`policyforge deploy`: an exported policy on a robot (or on a simulated protocol peer), through the safety
filter and the fixed-rate loop; the episode is recorded as a LeRobot dataset for later fine-tuning. (The export
a source names is found, or made, by `deploy.resolve_policy`; what deploy says, by `progress`.)"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policyforge.config import ConfigError, check
from policyforge.policies.export import saturated_share, saturation_warning
from policyforge.real_robot.arm_adapter import ArmAdapter
from policyforge.real_robot.deploy import ExportedPolicy, QuadrupedAdapter, resolve_policy
from policyforge.real_robot.loop import ControlLoop, LoopConfig, LoopReport
from policyforge.real_robot.peers.process import (
    PEER_START_S,
    PEERS,
    free_domain_id,
    read_facts,
    simulated_peer,
    wait_for_facts,
)
from policyforge.real_robot.progress import (
    ArmGoal,
    DeployWatch,
    Overruns,
    Verdict,
    announce,
    measure_for,
    overrun_assessment,
)
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter
from policyforge.real_robot.success_detector import detector_line, success_detector

ROBOTS = {"go2": ("quadruped-walk",), "franka": ("arm-reach", "arm-instructed")}
"""Robots `deploy` drives → the tasks their policies may be trained on (arm-instructed: families that leave the cubes
where they stand, `arm_adapter.STATIC_FAMILIES`)."""
ROBOT_FOR_FAMILY = {"arm": "franka", "quadruped": "go2"}
"""The robot a task family's policies deploy to when no robot is named (`infer_robot`): arm tasks to the Franka,
the arm of the README's deploy journey (`deploy runs/demo`; the UR and Feetech drivers are not deploy targets
yet), quadruped tasks to the Go2."""
REALTIME_PRIORITY = 80
"""SCHED_FIFO priority of `deploy --realtime`'s control loop: above ordinary real-time services, below the
kernel's own threads (99) and, on a PREEMPT_RT kernel, its interrupt threads (50 by default: raise theirs for the
robot's network card, as ROS 2 and libfranka set-ups do)."""
DDS_DOMAINS = range(0, 233)
"""DDS domain ids that map to valid ports with the standard port mapping (0–232)."""


@dataclasses.dataclass
class DeployConfig:
    """One deployment."""

    source: Path
    """A training run directory (its policy is exported to ONNX first if needed) or an exported .onnx/.pt file."""
    robot: str | None = None
    """Which robot: one of ROBOTS; None: the one the policy's task deploys to (`infer_robot`)."""
    peer: str | None = None
    """"sim": start the robot's simulated protocol peer on the loopback and drive that."""
    seconds: float = 10.0
    """Length of the policy phase, s."""
    velocity_command: tuple[float, float, float] = (0.5, 0.0, 0.0)
    """Legged robots: forward, sideways (m/s) and turn (rad/s) command."""
    goal: tuple[float, float, float] = (0.5, 0.0, 0.3)
    """Arms: the reach goal in the robot's base frame, m (arm-reach; a scene task's goal is its instruction's)."""
    workspace_floor: float | None = None
    """Arms: the lowest end-effector target allowed, m in the base frame (the table's surface plus a clearance: the
    workspace box's floor goes the safety margin below it); None: the robot's default box (Franka: targets ≥ 0.10 m).
    A task at table height (touching a cube: 0.03 m) needs it lowered."""
    scene_seed: int = 0
    instruction: str | None = None
    """Arms, tasks with an instruction: the instruction the policy follows in that scene (one of the task's texts, of
    a family the policy was trained on); None: the one drawn with the scene."""
    """Arms, tasks with objects (arm-instructed): the seed of the layout and instruction the twin assumes, drawn as the
    simulator's reset draws them (`arm_adapter`); the cubes must stand where the announcement says."""
    arm_mode: str = "joint"
    """Arms: "joint" (joint targets from the simulator's IK) or "cartesian" (end-effector targets)."""
    interface: str = "lo"
    """Network interface of the robot link (ignored with a peer: loopback)."""
    host: str = "172.16.0.2"
    """Arms: the robot's IP address (ignored with a peer: 127.0.0.1)."""
    domain_id: int | None = None
    """DDS domain (default: 0 on hardware, a random free one with a peer)."""
    record: Path | None = None
    """Dataset directory to append the episode to (LeRobot v3.0)."""
    motion_mode_released: bool = False
    """Hardware Go2: confirm its sport mode is released."""
    simulator_bridge: bool = False
    """Go2: the states come from a simulator bridge that leaves `crc` and `tick` empty (Unitree's unitree_mujoco;
    `Go2Config.simulator_bridge`); with `peer: sim` the simulated Go2 sends its states that way too."""
    sim_facts: Path | None = None
    """Go2 on a simulator: the JSON file where it writes its base position and clock (`base_position`,
    `sim_seconds`: our unitree_mujoco runner's `--stats`), so the verdict measures the planar velocity, as with a
    peer; None on hardware, which reports no base velocity."""
    safety: SafetyConfig = dataclasses.field(default_factory=SafetyConfig)
    """Safety-filter thresholds."""
    realtime: bool = False
    """Run the control loop with `LoopConfig`'s real-time options: SCHED_FIFO priority REALTIME_PRIORITY, memory
    locked, garbage collector frozen. Needs root or CAP_SYS_NICE (else one warning, normal scheduling)."""
    cpus: tuple[int, ...] | None = None
    """CPUs the control loop and its policy thread are kept on, e.g. (1,) (None: wherever the kernel puts them)."""
    expect_reach: bool = False
    """Arms: the deployment is expected to reach its goal (`Deployment.verdict`; the CLI exits non-zero if not)."""
    reward_model: Path | None = None
    """Arms with an instruction: a reward model (an `algo: reward_model` run) that scores the task's progress and
    success while the policy runs, from the MuJoCo twin's cameras at the measured joints (`success_detector`)."""
    reward_every_s: float = 0.2
    """Seconds between two scorings of the reward model."""

    def loop_config(self, rate_hz: float, policy_rate_hz: float) -> LoopConfig:
        """The control loop's settings for a robot ticking at `rate_hz` and a policy acting at `policy_rate_hz`."""
        return LoopConfig(
            rate_hz=rate_hz,
            policy_rate_hz=policy_rate_hz,
            seconds=self.seconds,
            cpu_affinity=self.cpus,
            realtime_priority=REALTIME_PRIORITY if self.realtime else None,
            lock_memory=self.realtime,
            freeze_gc=self.realtime,
        )

    def __post_init__(self) -> None:
        try:
            self.loop_config(1.0, 1.0)  # checks the CPUs before anything connects
        except ConfigError as err:
            raise ConfigError("cpus", err.reason) from None
        check(self.robot in (None, *ROBOTS), "robot", f"unknown robot {self.robot!r}; drivers: {sorted(ROBOTS)}")
        check(self.peer in (None, "sim"), "peer", f"unknown peer {self.peer!r}; use 'sim' or leave it out for hardware")
        check(
            not self.simulator_bridge or self.robot in (None, "go2"),
            "simulator_bridge",
            f"Go2 only (a DDS simulator bridge), not {self.robot}",
        )
        check(
            isinstance(self.reward_every_s, int | float) and 0.01 <= self.reward_every_s <= 60,
            "reward_every_s",
            f"must be in [0.01, 60] s, got {self.reward_every_s!r}",
        )
        check(
            isinstance(self.seconds, int | float) and math.isfinite(self.seconds) and self.seconds > 0,
            "seconds",
            f"must be a finite number of seconds > 0, got {self.seconds!r}",
        )
        for name, unit in (("velocity_command", "m/s, m/s, rad/s"), ("goal", "m")):
            value = getattr(self, name)
            check(
                len(value) == 3 and all(math.isfinite(float(v)) for v in value),
                name,
                f"must be three finite numbers ({unit}), got {value!r}",
            )
        check(self.arm_mode in ("joint", "cartesian"), "arm_mode", f"must be joint or cartesian, got {self.arm_mode!r}")
        check(
            self.domain_id is None or self.domain_id in DDS_DOMAINS,
            "domain_id",
            f"must be a DDS domain id in [0, 232] (the standard port mapping), got {self.domain_id!r}",
        )
        for name in ("interface", "host"):
            value = getattr(self, name)
            check(
                bool(re.fullmatch(r"[A-Za-z0-9_.:-]+", value)),
                name,
                f"must be a {'network interface name (lo, eth0)' if name == 'interface' else 'host name or IP address'}"
                f", got {value!r}",
            )


@dataclasses.dataclass
class Deployment:
    """What a deployment did."""

    robot: str
    """The robot driven (named, or inferred from the policy's task)."""
    report: LoopReport
    """The control loop's report."""
    facts: dict
    """A Go2 peer's final facts; an arm's final end-effector position `ee_pos` (the twin's kinematics of the measured
    joints), `goal_distance` (m) and the robot's own `reported_ee_pos`."""
    verdict: Verdict
    """Arms: reached or not (final and closest distance, tolerance); quadrupeds: the velocity tracking error."""
    overruns: Overruns
    """The overruns, judged for this robot: `progress.overrun_assessment`."""
    loop: LoopConfig
    """The control loop's settings (rates, phases)."""


def infer_robot(task: str | None) -> str:
    """The robot that runs policies of `task` when none is named: the robot of that task (`ROBOTS`), else of its
    family (`ROBOT_FOR_FAMILY`: `arm-*`, `quadruped-*`); ConfigError naming the choices for any other task."""
    exact = [robot for robot, tasks in ROBOTS.items() if task in tasks]
    robot = exact[0] if len(exact) == 1 else ROBOT_FOR_FAMILY.get(str(task).split("-")[0])
    if robot is None:
        raise ConfigError(
            "robot",
            f"cannot tell which robot runs a policy of task {task!r}: the robots are {sorted(ROBOTS)} "
            f"({', '.join(f'{robot}: {family}-* tasks' for family, robot in ROBOT_FOR_FAMILY.items())}); name one",
        )
    return robot


def deploy(config: DeployConfig, say: Callable[[str], None] = print) -> Deployment:
    """Run the deployment. Everything that can be checked without the robot (the export, the robot for its
    task, its sizes against the robot's adapter, the command or goal) is checked before connecting; `say` is
    told which export runs, what will run where and towards what, each wait, a heartbeat while the policy runs
    (`progress.DeployWatch`) and the verdict."""
    policy = ExportedPolicy(resolve_policy(config.source, say))
    task = policy.spec.get("task")
    inferred = config.robot is None
    config = dataclasses.replace(config, robot=config.robot or infer_robot(task))
    if task not in ROBOTS[config.robot]:
        how = f" (inferred from the task {task!r}: no robot runs it yet)" if inferred else ""
        runs = ", ".join(ROBOTS[config.robot])
        raise ConfigError("robot", f"{config.robot} runs {runs} policies{how}; this one is for {task!r}")
    check(
        config.sim_facts is None or (config.robot == "go2" and config.peer is None),
        "sim_facts",
        "a Go2 simulator's facts file (unitree_mujoco runner --stats); with --peer sim the peer's own are read",
    )
    check(
        not config.expect_reach or config.robot != "go2",
        "expect_reach",
        f"arms only: the go2 (for the task {task!r}) has no goal; its verdict is the velocity tracking error",
    )
    policy_rate = 1.0 / float(policy.spec["control_dt"])
    domain = config.domain_id if config.domain_id is not None else (free_domain_id() if config.peer else 0)
    robot, adapter, safety_config, rate = _robot_and_adapter(config, policy, domain, policy_rate)
    _check_before_connecting(config, policy, adapter, robot.spec)
    loop_config = config.loop_config(rate, policy_rate)
    detector = success_detector(config, adapter)
    announce(config, policy.spec.get("task"), adapter, inferred, loop_config, say)
    with contextlib.ExitStack() as stack:
        facts_path = None
        if config.peer == "sim":
            say(f"starting the simulated {config.robot} ({PEERS[config.robot]})")
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="policyforge-peer-")))
            wire = ("--bridge-wire",) if config.simulator_bridge else ()
            facts_path = stack.enter_context(simulated_peer(config.robot, domain, tmp / "peer.json", extra_args=wire))
            if config.robot == "go2":
                say(f"waiting for the peer's first state (up to {PEER_START_S:.0f} s)")
                wait_for_facts(facts_path)
        where = "127.0.0.1" if config.peer else config.host if config.robot != "go2" else config.interface
        say(f"connecting to the {config.robot} at {where}")
        # a simulated peer may start far slower than a robot answers (franky-sim: 2 s idle, tens loaded)
        robot.connect(timeout=PEER_START_S) if config.peer else robot.connect()
        facts_path = facts_path or config.sim_facts
        read = (lambda: read_facts(facts_path)) if facts_path is not None and config.robot == "go2" else None
        watch = DeployWatch(measure_for(config, adapter, read), loop_config, say)
        try:
            safety = SafetyFilter(robot.spec, safety_config, getattr(adapter, "forward_kinematics", None))
            ticks = watch.on_tick if detector is None else _both(watch.on_tick, detector.on_tick)
            loop = ControlLoop(robot, safety, policy, adapter, loop_config, ticks)
            with watch.watching(loop), detector.watching() if detector is not None else contextlib.nullcontext():
                report = loop.run()
            final = robot.observe()
        finally:
            robot.disconnect()
        warning = saturation_warning(saturated_share(report.actions), f"{policy.path} on {config.robot}")
        if warning:
            say(f"warning: {warning}")
        if config.record is not None and report.policy_steps:
            _record(config.record, report, policy_rate, task)
        facts, measure = {}, watch.measure
        if facts_path is not None and config.robot == "go2":
            from policyforge.real_robot.peers.go2_sim import FACTS_PERIOD_S  # the Go2 driver loaded its DDS already

            time.sleep(2 * FACTS_PERIOD_S)  # the peer's final facts, written after the loop's last command
            facts = read_facts(facts_path)
        verdict = measure.verdict(final)
        if isinstance(measure, ArmGoal) and measure.position is not None:  # the twin's kinematics of the joints
            facts = {"ee_pos": measure.position.tolist(), "goal_distance": measure.distance}
            if final.ee_pos is not None:
                facts["reported_ee_pos"] = final.ee_pos.tolist()
        if detector is not None:
            facts["reward_model"] = detector.summary()
            say(detector_line(facts["reward_model"]))
    return Deployment(config.robot, report, facts, verdict, overrun_assessment(report, config.robot), loop_config)


def _both(first: Callable, second: Callable) -> Callable:
    def both(*args) -> None:
        first(*args)
        second(*args)

    return both


def _check_before_connecting(config: DeployConfig, policy: ExportedPolicy, adapter, spec) -> None:
    """The export's sizes against the robot's task adapter; the command within what the policy was trained on
    (Go2) or the goal inside the workspace box (arms); on hardware, the network interface and the sport mode."""
    policy.check_sizes(adapter.obs_dim, adapter.action_dim, config.robot)
    if config.robot == "go2":
        task = adapter.task
        ranges = {"vx": task.command_x, "vy": task.command_y, "yaw_rate": task.command_yaw}
        for (name, (low, high)), value in zip(ranges.items(), config.velocity_command, strict=True):
            check(
                low <= value <= high,
                "velocity_command",
                f"{name}={value:g} is outside the range the policy was trained on, [{low:g}, {high:g}] "
                "(its task_options command_x / command_y / command_yaw)",
            )
        if config.peer is None:
            interfaces = sorted(name for _, name in socket.if_nameindex())
            check(config.interface in interfaces, "interface", f"no {config.interface!r} here; have {interfaces}")
            check(
                config.interface == "lo" or config.motion_mode_released,
                "motion_mode_released",
                "release the Go2's sport mode first (Unitree app or MotionSwitcherClient.ReleaseMode()) and say so; "
                "otherwise its controller fights the low-level commands",
            )
    elif spec.workspace_low is not None:
        goal = adapter.goal
        check(
            bool(np.all(goal >= spec.workspace_low) and np.all(goal <= spec.workspace_high)),
            "goal" if not adapter.has_scene else "scene_seed",
            f"{tuple(goal.round(3).tolist())} is outside the {spec.name} workspace box {spec.workspace_low.tolist()} – "
            f"{spec.workspace_high.tolist()} m"
            + (
                " (a task at table height: lower its floor with --workspace-floor, e.g. 0.01 m over a table at z = 0)"
                if goal[2] < spec.workspace_low[2]
                else ""
            ),
        )


def _robot_and_adapter(config: DeployConfig, policy: ExportedPolicy, domain: int, policy_rate: float):
    """The driver, the task adapter, the safety thresholds and the loop rate of `config.robot`."""
    from policyforge.config import from_dict

    options = policy.spec.get("task_options") or {}
    if config.robot == "go2":
        from policyforge.real_robot.go2 import Go2, Go2Config
        from policyforge.sims.tasks.quadruped import QuadrupedConfig

        interface = "lo" if config.peer else config.interface
        go2 = Go2Config(
            interface=interface,
            domain_id=domain,
            motion_mode_released=config.motion_mode_released,
            simulator_bridge=config.simulator_bridge,
        )
        adapter = QuadrupedAdapter(from_dict(QuadrupedConfig, options), config.velocity_command)
        return Go2(go2), adapter, config.safety, 500.0
    from policyforge.real_robot.franka import FRANKA_SAFETY, Franka, FrankaConfig

    host, floor = "127.0.0.1" if config.peer else config.host, config.workspace_floor
    franka = FrankaConfig(
        host=host,
        mode=config.arm_mode,
        realtime=config.peer is None,
        rate_hz=policy_rate,
        # a policy trained on the Franka motion generator moves as franky did at its factor
        dynamics_factor=float(options.get("motion_dynamics_factor", FrankaConfig.dynamics_factor)),
        workspace_low_z=None if floor is None else floor - FRANKA_SAFETY["workspace_margin"],
    )
    adapter = ArmAdapter(
        policy.spec["task"],
        options,
        np.asarray(config.goal),
        cartesian=config.arm_mode == "cartesian",
        obs_key=policy.obs_key,
        scene_seed=config.scene_seed,
        instruction=config.instruction,
    )
    safety = dataclasses.replace(config.safety, **FRANKA_SAFETY)
    return Franka(franka), adapter, safety, policy_rate


def _record(root: Path, report: LoopReport, fps: float, task: str) -> None:
    from policyforge.data.dataset import DemoWriter

    states, actions = report.observations, report.actions.reshape(len(report.actions), -1)
    steps = len(states)
    writer = DemoWriter(root, round(fps), states.shape[1], actions.shape[1], task_name=task, robot_type="real")
    dones = np.zeros(steps, bool)
    dones[-1] = True
    writer.add_episode(states, actions, np.zeros(steps, np.float32), dones, np.zeros(steps, bool))
