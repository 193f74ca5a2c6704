"""`policyforge deploy` on the command line: its flags (`add_parser`), their translation into a `DeployConfig`
(errors name the flag), and its summary and exit status (`run`). The deployment itself is `launch.deploy`."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from policyforge.config import ConfigError

ESTOP_EXIT = 3
"""Exit status of a `deploy` that ended in an e-stop."""
NOT_REACHED_EXIT = 4
"""Exit status of a `deploy --expect-reach` whose arm did not end within its task's success distance of the goal
(an e-stop's 3 takes precedence: it is the cause)."""
NO_CONNECTION_EXIT = 5
"""Exit status of a `deploy` whose robot connection failed (the driver's message says why)."""

DEPLOY_FLAGS = {
    "source": "source",
    "robot": "--robot",
    "peer": "--peer",
    "seconds": "--seconds",
    "velocity_command": "--command",
    "goal": "--goal",
    "scene_seed": "--scene-seed",
    "instruction": "--instruction",
    "workspace_floor": "--workspace-floor",
    "reward_model": "--reward-model",
    "reward_every_s": "--reward-every",
    "workspace_low_z": "--workspace-floor",
    "arm_mode": "--mode",
    "host": "--host",
    "interface": "--interface",
    "domain_id": "--domain-id",
    "motion_mode_released": "--motion-mode-released",
    "simulator_bridge": "--simulator-bridge",
    "sim_facts": "--sim-facts",
    "cpus": "--cpus",
    "expect_reach": "--expect-reach",
}
"""DeployConfig's fields → the flags that set them, for error messages."""
ROBOT_CHOICES = ["franka", "go2"]
"""`launch.ROBOTS`, spelled out: the parser is built for every command, and `launch` imports MuJoCo and the
drivers (tests/real_robot/test_deploy_output.py checks that the two agree)."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The `deploy` sub-command and its flags."""
    deploying = commands.add_parser(
        "deploy",
        help="run a trained policy on a robot (or its simulated peer), safely",
        description="Run a trained policy on a robot (or its simulated peer) through the safety filter. It says "
        "what runs where and towards what before connecting, a heartbeat while the policy runs, and a summary "
        "ending in a VERDICT line.",
        epilog=f"exit status: 0 done (without --expect-reach, whatever the verdict); 2 a bad flag or file; "
        f"{ESTOP_EXIT} the run ended in an e-stop (its cause is printed); {NOT_REACHED_EXIT} with --expect-reach, "
        "the arm did not end within its task's success distance of the goal",
    )
    deploying.add_argument("source", help="a run directory (exported to ONNX if needed) or an exported policy file")
    deploying.add_argument(
        "--robot",
        default=None,
        choices=ROBOT_CHOICES,
        help="robot driver (default: the one the policy's task runs on: arm tasks → franka, quadruped → go2)",
    )
    deploying.add_argument("--peer", default=None, choices=["sim"], help="drive the robot's simulated protocol peer")
    deploying.add_argument("--seconds", type=float, default=10.0, help="how long the policy runs")
    deploying.add_argument("--command", default="0.5,0,0", help="velocity command vx,vy,yaw_rate (legged robots)")
    deploying.add_argument("--goal", default="0.5,0,0.3", help="arms: reach goal x,y,z in the base frame (m)")
    deploying.add_argument(
        "--workspace-floor",
        type=float,
        default=None,
        help="arms: the lowest end-effector target, m in the base frame (default: the robot's box; Franka 0.10)",
    )
    deploying.add_argument(
        "--instruction",
        default=None,
        help="arm-instructed: what the policy is told in the scene, e.g. 'touch the red cube' (default: drawn with it)",
    )
    deploying.add_argument(
        "--scene-seed",
        type=int,
        default=0,
        help="arm-instructed: the seed of the cubes' layout and the instruction (announced before connecting)",
    )
    deploying.add_argument("--mode", default="joint", choices=["joint", "cartesian"], help="arms: command space")
    deploying.add_argument("--host", default="172.16.0.2", help="arms: the robot's IP address")
    deploying.add_argument("--interface", default="lo", help="Go2: network interface of the robot link, e.g. eth0")
    deploying.add_argument("--domain-id", type=int, default=None, help="DDS domain (default 0; random with a peer)")
    deploying.add_argument("--record", default=None, help="append the episode to this LeRobot dataset directory")
    deploying.add_argument(
        "--motion-mode-released", action="store_true", help="hardware Go2: its sport mode has been released"
    )
    deploying.add_argument(
        "--simulator-bridge",
        action="store_true",
        help="Go2: states from a simulator bridge without CRC or tick (Unitree's unitree_mujoco), on this computer",
    )
    deploying.add_argument(
        "--sim-facts",
        default=None,
        help="Go2 on a simulator: its facts file (base position, clock) to measure the walking velocity from",
    )
    deploying.add_argument(
        "--realtime", action="store_true", help="control loop under SCHED_FIFO, memory locked, GC frozen (root)"
    )
    deploying.add_argument("--cpus", default=None, help="CPUs to keep the control loop on, e.g. 1 or 2,3")
    deploying.add_argument(
        "--expect-reach",
        action="store_true",
        help=f"arms: exit {NOT_REACHED_EXIT} unless the end effector ends within the task's success distance of "
        "the goal (for scripts and CI)",
    )
    deploying.add_argument(
        "--reward-model",
        default=None,
        help="arms with an instruction: a reward model run (algo: reward_model) that scores progress and success "
        "from the MuJoCo twin's camera at the measured joints while the policy runs",
    )
    deploying.add_argument(
        "--reward-every", type=float, default=0.2, help="seconds between the reward model's scorings"
    )
    deploying.set_defaults(run=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Deploy as `args` say; print the summary and the verdict; the exit status (module constants)."""
    from policyforge.real_robot.launch import DeployConfig, deploy

    command = _three_numbers(args.command, "--command", "vx,vy,yaw_rate (m/s, m/s, rad/s), e.g. 0.5,0,0")
    goal = _three_numbers(args.goal, "--goal", "x,y,z in the arm's base frame (m), e.g. 0.5,0,0.3")
    try:
        config = DeployConfig(
            source=Path(args.source),
            robot=args.robot,
            peer=args.peer,
            seconds=args.seconds,
            velocity_command=command,
            goal=goal,
            scene_seed=args.scene_seed,
            instruction=args.instruction,
            workspace_floor=args.workspace_floor,
            arm_mode=args.mode,
            host=args.host,
            interface=args.interface,
            domain_id=args.domain_id,
            record=Path(args.record) if args.record else None,
            motion_mode_released=args.motion_mode_released,
            simulator_bridge=args.simulator_bridge,
            sim_facts=Path(args.sim_facts) if args.sim_facts else None,
            realtime=args.realtime,
            cpus=_cpu_list(args.cpus),
            expect_reach=args.expect_reach,
            reward_model=Path(args.reward_model) if args.reward_model else None,
            reward_every_s=args.reward_every,
        )
        done = deploy(config, say=lambda text: console.print(text, markup=False, soft_wrap=True))
    except ConfigError as err:
        raise ConfigError(DEPLOY_FLAGS.get(err.path, err.path), err.reason) from None
    except ConnectionError as err:
        console.print(f"error: {err}", markup=False, soft_wrap=True)
        return NO_CONNECTION_EXIT
    report, facts = done.report, done.facts
    table = Table(title=f"deploy {args.source} on {done.robot}" + (f" ({args.peer} peer)" if args.peer else ""))
    table.add_column("", no_wrap=True)  # keys whole (scripts look rows up by them); values wrap
    table.add_column("value")
    jitter, loop = report.jitter_ms, done.loop
    rate = report.commands_sent / report.wall_s if report.wall_s > 0 else 0.0
    rows = {
        "duration": f"{report.wall_s:.1f} s ({loop.prepare_seconds:g} s to the ready pose, {loop.seconds:g} s policy)",
        "commands sent": f"{report.commands_sent:,}",
        "achieved rate": f"{rate:.1f} Hz (target {loop.rate_hz:g} Hz)",
        "ticks / policy steps": f"{report.ticks} / {report.policy_steps}",
        "jitter median / p99 / max": f"{jitter['median']:.2f} / {jitter['p99']:.2f} / {jitter['max']:.2f} ms",
        "overruns": f"{done.overruns.counts}: {'harmless' if done.overruns.harmless else 'too many'}",
        "real-time options": ", ".join(report.realtime) or "none",
        "safety interventions": ", ".join(f"{k} {v:,}" for k, v in sorted(report.interventions.items())) or "none",
        "final mode": report.final_mode,
    }
    if len(report.latency_ms):
        rows["action latency"] = latency_row(report.latency_ms, loop.policy_rate_hz)
    if report.estop_cause:
        rows["e-stop cause"] = report.estop_cause
    if "goal_distance" in facts:
        rows["end effector / distance to goal"] = "({:.3f}, {:.3f}, {:.3f}) m".format(*facts["ee_pos"])
        rows["end effector / distance to goal"] += f" / {facts['goal_distance'] * 100:.1f} cm"
        reported = facts.get("reported_ee_pos")
        if reported is not None and math.dist(reported, facts["ee_pos"]) > 0.005:
            rows["end effector / distance to goal"] += " (the robot reports ({:.3f}, {:.3f}, {:.3f}) m)".format(
                *reported
            )
    if "displacement" in facts:
        rows["peer: base moved (x, y)"] = "{:.2f}, {:.2f} m".format(*facts["displacement"])
        rows["peer: unsafe commands"] = str(sum(facts["unsafe"].values()))
    if "reward_model" in facts and facts["reward_model"].get("scored"):
        scored = facts["reward_model"]
        rows["reward model: progress"] = (
            f"{scored['progress_first']:.2f} → {scored['progress_last']:.2f} (highest {scored['progress_max']:.2f})"
        )
        rows["reward model: success"] = f"{scored['success_last']:.2f} ({'done' if scored['success'] else 'not done'})"
    if config.record:
        rows["recorded to"] = str(config.record)
    for key, value in rows.items():
        table.add_row(key, value)
    console.print(table)
    console.print(f"overruns: {done.overruns.judgement}", markup=False, soft_wrap=True)
    console.print(done.verdict.line, markup=False, soft_wrap=True, style="bold")
    if report.final_mode == "estop":
        console.print(f"[red]e-stop[/red]: {report.estop_cause} (exit status {ESTOP_EXIT})")
        return ESTOP_EXIT
    if config.expect_reach and not done.verdict.reached:
        console.print(f"--expect-reach: the goal was not reached (exit status {NOT_REACHED_EXIT})")
        return NOT_REACHED_EXIT
    return 0


def latency_row(latency_ms: np.ndarray, policy_rate_hz: float) -> str:
    """The measured state → action latency [T] (ms), and the `sim.corruption.action_latency_steps` that covers it
    (whole control steps of a policy acting at `policy_rate_hz`)."""
    median, p99 = np.median(latency_ms), np.percentile(latency_ms, 99)
    periods = p99 * 1e-3 * policy_rate_hz
    return (
        f"median {median:.1f} / p99 {p99:.1f} ms from measurement to command ({periods:.2f} policy periods at p99; "
        f"train with sim.corruption.action_latency_steps=[0,{math.ceil(periods)}] to cover it)"
    )


def _cpu_list(text: str | None) -> tuple[int, ...] | None:
    try:
        return None if text is None else tuple(int(cpu) for cpu in text.split(","))
    except ValueError:
        raise ConfigError("--cpus", f"give CPU numbers separated by commas, e.g. 1 or 2,3; got {text!r}") from None


def _three_numbers(text: str, flag: str, what: str) -> tuple[float, float, float]:
    try:
        numbers = tuple(float(x) for x in text.split(","))
    except ValueError:
        numbers = ()
    if len(numbers) != 3:
        raise ConfigError(flag, f"give {what}; got {text!r}")
    return numbers
