"""`policyforge deploy`: an exported policy on a robot (or on a simulated protocol peer), through the safety
filter and the fixed-rate loop; the episode is recorded as a LeRobot dataset for later fine-tuning."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from policyforge.config import ConfigError
from policyforge.real_robot.deploy import ArmAdapter, ExportedPolicy, QuadrupedAdapter
from policyforge.real_robot.loop import ControlLoop, LoopConfig, LoopReport
from policyforge.real_robot.safety import SafetyConfig, SafetyFilter

ROBOTS = {"go2": "quadruped-walk", "franka": "arm-reach"}
"""Robots `deploy` drives → the task their policies are trained on."""


@dataclasses.dataclass
class DeployConfig:
    """One deployment."""

    source: Path
    """A training run directory (its policy is exported to ONNX first if needed) or an exported .onnx/.pt file."""
    robot: str = "go2"
    """Which robot: one of ROBOTS."""
    peer: str | None = None
    """"sim": start the robot's simulated protocol peer on the loopback and drive that."""
    seconds: float = 10.0
    """Length of the policy phase, s."""
    velocity_command: tuple[float, float, float] = (0.5, 0.0, 0.0)
    """Legged robots: forward, sideways (m/s) and turn (rad/s) command."""
    goal: tuple[float, float, float] = (0.5, 0.0, 0.3)
    """Arms: the reach goal in the robot's base frame, m."""
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
    safety: SafetyConfig = dataclasses.field(default_factory=SafetyConfig)
    """Safety-filter thresholds."""


def resolve_policy(source: Path) -> Path:
    """The exported policy file of `source`: the file itself, or a run's export/policy.onnx (made if missing)."""
    source = Path(source)
    if source.is_file():
        return source
    if not (source / "config.yaml").is_file():
        raise FileNotFoundError(f"{source} is neither an exported policy (.onnx/.pt) nor a run directory")
    exported = source / "export" / "policy.onnx"
    if not exported.is_file():
        command = [sys.executable, "-m", "policyforge.cli", "export", str(source), "--format", "onnx"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:  # the export's own message (e.g. an unusable checkpoint) says why
            raise ConfigError("source", f"exporting {source} failed: {(done.stdout + done.stderr).strip()}")
        sys.stdout.write(done.stdout)
    return exported


@contextlib.contextmanager
def simulated_peer(
    robot: str,
    domain_id: int,
    stats_path: Path,
    seconds: float | None = None,
    extra_args: tuple[str, ...] = (),
    kill_after: float | None = None,
) -> Iterator[Path]:
    """Run the robot's simulated protocol peer in a subprocess on the loopback while inside; yields the path
    of its facts (JSON). `extra_args`: more peer flags (fault injection); `kill_after`: SIGKILL the peer this
    many seconds after its start (the robot's computer dies). Leaving stops it (SIGTERM) and waits for its
    final facts."""
    if robot == "franka":  # franky-sim: a MuJoCo FR3 serving the libfranka protocol on 127.0.0.1
        command = [str(Path(sys.executable).with_name("franky-sim")), "-s", "mujoco", "--hostname", "127.0.0.1"]
    elif robot == "ur":  # our simulated UR controller: RTDE 30004, dashboard 29999, script port 30003
        command = [sys.executable, "-m", "policyforge.real_robot.peers.rtde_sim", "--stats", str(stats_path)]
        command += list(extra_args)
    elif robot == "go2":
        command = [sys.executable, "-m", "policyforge.real_robot.peers.go2_sim", "--domain-id", str(domain_id)]
        command += ["--stats", str(stats_path)] + (["--seconds", str(seconds)] if seconds else []) + list(extra_args)
    else:
        raise ConfigError("robot", f"no simulated peer for {robot!r}; peers: ['franka', 'go2', 'ur']")
    quiet = subprocess.DEVNULL if robot == "franka" else None
    process = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=quiet)
    killer = threading.Timer(kill_after, process.kill) if kill_after is not None else None
    if killer is not None:
        killer.start()
    try:
        yield stats_path
    finally:
        if killer is not None:
            killer.cancel()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_facts(stats_path: Path) -> dict:
    """The peer's latest facts (empty before its first write)."""
    return json.loads(stats_path.read_text()) if stats_path.exists() else {}


def free_domain_id() -> int:
    """A DDS domain id unlikely to be in use by another test or robot on this host."""
    return random.SystemRandom().randint(100, 230)


def deploy(config: DeployConfig) -> tuple[LoopReport, dict]:
    """Run the deployment; returns the loop's report and facts: a Go2 peer's final facts, an arm's final
    end-effector position and its distance to the goal."""
    if config.robot not in ROBOTS:
        raise ConfigError("robot", f"unknown robot {config.robot!r}; drivers: {sorted(ROBOTS)}")
    if config.peer not in (None, "sim"):
        raise ConfigError("peer", f"unknown peer {config.peer!r}; use 'sim' or leave it out for hardware")
    policy = ExportedPolicy(resolve_policy(config.source))
    task = policy.spec.get("task")
    if task != ROBOTS[config.robot]:
        raise ConfigError("robot", f"{config.robot} runs {ROBOTS[config.robot]} policies; this one is for {task!r}")
    policy_rate = 1.0 / float(policy.spec["control_dt"])
    domain = config.domain_id if config.domain_id is not None else (free_domain_id() if config.peer else 0)
    with contextlib.ExitStack() as stack:
        facts_path = None
        if config.peer == "sim":
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="policyforge-peer-")))
            facts_path = stack.enter_context(simulated_peer(config.robot, domain, tmp / "peer.json"))
        robot, adapter, safety_config, rate = _robot_and_adapter(config, policy, domain, policy_rate)
        with robot:
            safety = SafetyFilter(robot.spec, safety_config, getattr(adapter, "forward_kinematics", None))
            loop_config = LoopConfig(rate_hz=rate, policy_rate_hz=policy_rate, seconds=config.seconds)
            report = ControlLoop(robot, safety, policy, adapter, loop_config).run()
            final = robot.observe()
        if config.record is not None and report.policy_steps:
            _record(config.record, report, policy_rate, task)
        facts = {}
        if final.ee_pos is not None:  # arms: where the robot says its end effector ended
            facts = {
                "ee_pos": final.ee_pos.tolist(),
                "goal_distance": float(np.linalg.norm(final.ee_pos - config.goal)),
            }
        if facts_path is not None and config.robot == "go2":
            time.sleep(0.2)  # the peer writes its facts ten times a second
            facts = read_facts(facts_path)
    return report, facts


def _robot_and_adapter(config: DeployConfig, policy: ExportedPolicy, domain: int, policy_rate: float):
    """The driver, the task adapter, the safety thresholds and the loop rate of `config.robot`."""
    from policyforge.config import from_dict

    options = policy.spec.get("task_options") or {}
    if config.robot == "go2":
        from policyforge.real_robot.go2 import Go2, Go2Config
        from policyforge.sims.tasks.quadruped import QuadrupedConfig

        interface = "lo" if config.peer else config.interface
        go2 = Go2Config(interface=interface, domain_id=domain, motion_mode_released=config.motion_mode_released)
        adapter = QuadrupedAdapter(from_dict(QuadrupedConfig, options), config.velocity_command)
        return Go2(go2), adapter, config.safety, 500.0
    from policyforge.real_robot.franka import FRANKA_SAFETY, Franka, FrankaConfig

    host = "127.0.0.1" if config.peer else config.host
    franka = FrankaConfig(host=host, mode=config.arm_mode, realtime=config.peer is None, rate_hz=policy_rate)
    adapter = ArmAdapter(
        policy.spec["task"], options, np.asarray(config.goal), cartesian=config.arm_mode == "cartesian"
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
