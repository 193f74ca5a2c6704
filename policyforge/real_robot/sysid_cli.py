"""`policyforge sysid record|fit` on the command line: record a hanging Go2's joints under an excitation through
the driver and the safety filter, then fit the simulated Go2's joint model to the recording (`sysid`)."""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.config import ConfigError


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The `sysid` sub-command: `record`, `fit` and `actuator-net`."""
    sysid = commands.add_parser("sysid", help="system identification of the Go2's leg joints: record, then fit")
    steps = sysid.add_subparsers(dest="sysid_command", required=True)
    recording = steps.add_parser("record", help="drive a hanging Go2 through an excitation and record it")
    recording.add_argument("--out", required=True, help="the recording to write (.npz)")
    recording.add_argument("--peer", default=None, choices=["sim"], help="record the simulated Go2, hanging")
    recording.add_argument("--interface", default="lo", help="network interface of the robot link, e.g. eth0")
    recording.add_argument("--domain-id", type=int, default=0, help="DDS domain")
    recording.add_argument("--seconds", type=float, default=8.0, help="length of the excitation")
    recording.add_argument("--motion-mode-released", action="store_true", help="hardware: sport mode released")
    recording.add_argument(
        "--realtime", action="store_true", help="the recording loop under SCHED_FIFO (root or CAP_SYS_NICE)"
    )
    recording.add_argument(
        "--hanging", action="store_true", help="hardware: the robot hangs on a gantry, feet clear of the ground"
    )
    recording.set_defaults(run=record_command)
    fitting = steps.add_parser("fit", help="fit the simulated Go2's joints to a recording (CMA-ES)")
    fitting.add_argument("recording", help="a recording written by `sysid record`")
    fitting.add_argument("--evaluations", type=int, default=500, help="replays CMA-ES may run")
    fitting.add_argument("--seed", type=int, default=0)
    fitting.set_defaults(run=fit_command)
    network = steps.add_parser("actuator-net", help="fit an actuator network to a recording's measured torques")
    network.add_argument("recording", help="a recording written by `sysid record` (with joint torques)")
    network.add_argument("--out", required=True, help="the network to write (.npz): sim.actuator.network")
    network.add_argument("--step-seconds", type=float, default=0.005, help="physics step of the simulator, s")
    network.add_argument("--epochs", type=int, default=100, help="passes over the training samples")
    network.add_argument("--seed", type=int, default=0)
    network.set_defaults(run=actuator_net_command)


def record_command(args: argparse.Namespace, console: Console) -> int:
    from policyforge.real_robot.go2 import Go2, Go2Config
    from policyforge.real_robot.peers.go2_model import JointPhysics
    from policyforge.real_robot.sysid import RECORD_PRIORITY, Excitation, record, record_peer

    if args.peer is None and not args.hanging:
        raise ConfigError(
            "--hanging",
            "the excitation swings every leg ±0.25 rad at up to 4 Hz: hang the robot on a gantry, feet clear of the "
            "ground, then say so with --hanging",
        )
    if not 1.0 <= args.seconds <= 120.0:
        raise ConfigError("--seconds", f"must be in [1, 120] s, got {args.seconds:g}")
    console.print(f"recording {args.seconds:g} s of excitation (after 2 s moving to its start)")
    if args.peer:
        with tempfile.TemporaryDirectory(prefix="policyforge-sysid-") as tmp:
            recording = record_peer(JointPhysics(hang=True), Excitation(seconds=args.seconds), Path(tmp))
    else:
        config = Go2Config(args.interface, args.domain_id, motion_mode_released=args.motion_mode_released)
        with Go2(config) as robot:
            priority = RECORD_PRIORITY if args.realtime else None
            recording = record(robot, Excitation(seconds=args.seconds), realtime_priority=priority)
    recording.save(Path(args.out))
    console.print(f"{len(recording.command_time)} commands and {len(recording.state_time)} states → {args.out}")
    return 0


def fit_command(args: argparse.Namespace, console: Console) -> int:
    from policyforge.real_robot.peers.go2_model import JointPhysics
    from policyforge.real_robot.sysid import BOUNDS, Recording, fit, replay_error

    if not Path(args.recording).is_file():
        raise ConfigError("recording", f"no file {args.recording}; write one with `policyforge sysid record`")
    recording = Recording.load(Path(args.recording))
    result = fit(recording, args.evaluations, args.seed)
    model_error = replay_error(recording, JointPhysics())
    table = Table(title=f"fitted to {args.recording} ({result.evaluations} replays)")
    table.add_column("parameter")
    table.add_column("fitted")
    table.add_column("search box")
    for name, (low, high) in BOUNDS.items():
        table.add_row(name, f"{getattr(result.physics, name):.4g}", f"[{low:g}, {high:g}]")
    table.add_row("replay error, rad RMS", f"{result.error_rad:.4f}", f"go2.xml's joints: {model_error:.4f}")
    console.print(table)
    console.print(f"train quadruped-walk with it: {training_overrides(result.physics)}", markup=False, soft_wrap=True)
    print(json.dumps({name: getattr(result.physics, name) for name in BOUNDS} | {"error_rad": result.error_rad}))
    return 0


def actuator_net_command(args: argparse.Namespace, console: Console) -> int:
    from policyforge.real_robot.actuator_fit import ActuatorFitConfig, fit_actuator_net
    from policyforge.real_robot.sysid import Recording
    from policyforge.sims.make import make_task

    if not Path(args.recording).is_file():
        raise ConfigError("recording", f"no file {args.recording}; write one with `policyforge sysid record`")
    if args.epochs < 1:
        raise ConfigError("--epochs", f"must be at least 1, got {args.epochs}")
    recording = Recording.load(Path(args.recording))
    torque_scale = make_task("quadruped-walk").model.actuator_forcerange[:, 1]
    config = ActuatorFitConfig(step_seconds=args.step_seconds, epochs=args.epochs, seed=args.seed)
    result = fit_actuator_net(recording, torque_scale, config)
    result.net.save(Path(args.out))
    table = Table(title=f"actuator network fitted to {args.recording} ({result.samples} samples)")
    table.add_column("held-out torque error, N·m RMS")
    table.add_column("network")
    table.add_column("ideal PD law")
    table.add_row(f"last {config.holdout:.0%} of the recording", f"{result.net_error:.4f}", f"{result.pd_error:.4f}")
    console.print(table)
    console.print(
        f"train quadruped-walk with it: sim.actuator.model=network sim.actuator.network={args.out}",
        markup=False,
        soft_wrap=True,
    )
    print(json.dumps({"net_error": result.net_error, "pd_error": result.pd_error, "samples": result.samples}))
    return 0


def training_overrides(physics) -> str:
    """Command-line overrides that give quadruped-walk's simulator these joints: the joint physics as task options,
    the motor strength as a fixed kp and kd scale, the latency in whole control steps (`sim.corruption`)."""
    from policyforge.sims.tasks.quadruped import QuadrupedConfig

    steps = math.ceil(physics.command_delay / QuadrupedConfig().control_dt - 1e-9)
    strength = f"[{physics.motor_strength:.3g},{physics.motor_strength:.3g}]"
    return " ".join(
        [
            f"sim.task_options.joint_damping={physics.damping:.3g}",
            f"sim.task_options.joint_armature={physics.armature:.3g}",
            f"sim.task_options.joint_frictionloss={physics.frictionloss:.3g}",
            f"'sim.randomization.kp_scale={strength}' 'sim.randomization.kd_scale={strength}'",
            f"'sim.corruption.action_latency_steps=[0,{steps}]'",
        ]
    )
