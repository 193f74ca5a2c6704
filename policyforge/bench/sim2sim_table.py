"""The sim-to-sim gap table (issue 24): quadruped-walk policies (a) trained as before, (b) with the sim-to-real
adapters, (c) a proprioceptive student of a privileged teacher trained as (b), each evaluated on the nominal
simulator, on held-out perturbed models, on our Go2 DDS peer and on Unitree's own simulator (unitree_mujoco, through
the DDS driver and its bridge); and arm-reach on franky-sim before and after the Franka motion generator.

    policyforge bench sim2sim-table --a A.onnx [A2 ...] --b B.onnx [...] --c C.onnx [...]
        [--unitree-mujoco CHECKOUT] [--seconds 10] [--arm] [--arm-goals 6]

Every row takes one exported policy per seed. Errors are mean planar velocity-tracking errors |v_xy − command| in
m/s for the command (0.5, 0, 0) m/s in simulation and on the peer, (−0.4, 0, 0) on unitree_mujoco (their scene has
a step 1.1 m ahead of the robot); falls count terminated episodes (simulation) or falls (unitree_mujoco). Held-out:
the mean over four models the policies never saw as such — friction ×0.7 with masses ×1.3, friction ×1.3 with
masses ×0.7, 20 ms more action latency, and motors at 70% of their torque (DC-motor curve). The last line is one
JSON object {"quadruped": {"a": {"train", "heldout", "go2_peer", "unitree_mujoco", "unitree_mujoco_falls", each
held-out model's error by name, "std", "worst_loss", "seeds": [per-seed cells]}, ...}, "arm_reach_franky_error_m":
{"before", "after"}} (means over seeds; null where not run). `worst_loss` is the issue's target measure: the largest
error / training-simulator error − 1 over the held-out models, the peer and unitree_mujoco.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge.real_robot.deploy import ExportedPolicy
from policyforge.real_robot.launch import DeployConfig, deploy
from policyforge.sims.config import ActuatorConfig, CorruptionConfig, RandomizationConfig, SimConfig
from policyforge.sims.make import make_env
from policyforge.sims.task import NumpySampler

COMMAND = (0.5, 0.0, 0.0)
UNITREE_COMMAND = (-0.4, 0.0, 0.0)
HELD_OUT = {
    "slippery, heavy": {"randomization": RandomizationConfig(friction=(0.7, 0.7), mass_scale=(1.3, 1.3))},
    "grippy, light": {"randomization": RandomizationConfig(friction=(1.3, 1.3), mass_scale=(0.7, 0.7))},
    "+20 ms latency": {"corruption": CorruptionConfig(action_latency_steps=(1, 1))},
    "weak motors": {
        "actuator": ActuatorConfig(model="dc_motor"),
        "randomization": RandomizationConfig(motor_strength=(0.7, 0.7)),
    },
}
"""Models a policy is evaluated on and not trained on as such (SimConfig fields)."""


def sim_error(path: Path, seconds: float, envs: int = 16, **sim) -> tuple[float, int]:
    """Mean planar tracking error (m/s, after the first second) and falls of `envs` quadrupeds walking at COMMAND
    for `seconds` under an exported policy, on quadruped-walk with the SimConfig fields `sim`."""
    policy = ExportedPolicy(path)
    options = {**policy.spec.get("task_options", {}), "episode_seconds": seconds + 1.0}
    env = make_env(SimConfig(task="quadruped-walk", num_envs=envs, task_options=options, **sim))
    initial = env.task.reset(NumpySampler(np.random.default_rng(0)), envs, np)
    initial.vars["command"][:] = COMMAND
    obs = env.reset_to(initial)
    history = [ExportedPolicy(path) for _ in range(envs)] if policy.history_len else None
    errors, fallen = [], np.zeros(envs, dtype=bool)
    steps = round(seconds / env.task.config.control_dt)
    for step in range(steps):
        key = obs[policy.obs_key].numpy()
        if history is None:
            actions = np.asarray(policy.run(key))[:, 0]
        else:
            actions = np.stack([one(row) for one, row in zip(history, key, strict=True)])
        obs, _, terminated, _, info = env.step(torch.as_tensor(actions))
        fallen |= terminated.numpy()
        if step * env.task.config.control_dt >= 1.0:
            errors.append(np.where(fallen, np.nan, info["reward_terms"]["lin_vel_error"].numpy()))
    return float(np.nanmean(errors)) if not fallen.all() else math.nan, int(fallen.sum())


def peer_error(path: Path, seconds: float) -> float:
    """Planar tracking error on our simulated Go2 behind its DDS protocol (`deploy --peer sim`)."""
    config = DeployConfig(source=path, robot="go2", peer="sim", seconds=seconds, velocity_command=COMMAND)
    return _error(deploy(config, say=lambda line: None).verdict.error)


def unitree_error(path: Path, seconds: float, checkout: Path) -> tuple[float, int]:
    """Planar tracking error and falls on Unitree's unitree_mujoco (their scene and SDK bridge, headless)."""
    from policyforge.real_robot.peers.process import free_domain_id, read_facts, stop_process

    with tempfile.TemporaryDirectory() as tmp:
        facts, domain = Path(tmp) / "unitree.json", free_domain_id()
        command = [sys.executable, "-m", "policyforge.real_robot.peers.unitree_mujoco", "--checkout", str(checkout)]
        simulator = subprocess.Popen([*command, "--domain-id", str(domain), "--stats", str(facts)])
        try:
            settled = time.monotonic() + 120.0  # the robot lies down, then settles (~2 s simulated)
            while read_facts(facts).get("sim_seconds", 0.0) < 2.0:
                if time.monotonic() > settled:
                    raise RuntimeError(f"unitree_mujoco did not start within 120 s ({checkout})")
                time.sleep(0.2)
            config = DeployConfig(
                source=path, robot="go2", interface="lo", domain_id=domain, simulator_bridge=True,
                sim_facts=facts, seconds=seconds, velocity_command=UNITREE_COMMAND,
            )  # fmt: skip
            error = _error(deploy(config, say=lambda line: None).verdict.error)
            falls = int(json.loads(facts.read_text())["falls"])
        finally:
            stop_process(simulator)
    return error, falls


def _error(value: float | None) -> float:
    return math.nan if value is None else float(value)


def seed_cells(path: Path, seconds: float, checkout: Path | None) -> dict[str, float]:
    """Every column for one exported policy: errors (m/s) and falls."""
    train, train_falls = sim_error(path, seconds)
    held = {name: sim_error(path, seconds, **sim) for name, sim in HELD_OUT.items()}
    cells = {"train": train, "train_falls": train_falls}
    cells.update({name: error for name, (error, _) in held.items()})
    cells["heldout"] = float(np.mean([error for error, _ in held.values()]))
    cells["heldout_falls"] = sum(falls for _, falls in held.values())
    cells["go2_peer"] = peer_error(path, seconds)
    if checkout is not None:
        cells["unitree_mujoco"], cells["unitree_mujoco_falls"] = unitree_error(path, seconds, checkout)
    return cells


def quadruped_row(paths: list[Path], seconds: float, checkout: Path | None, say=print) -> dict:
    """Means over one policy per seed of every column, with each seed's cells (`seeds`) and the largest loss
    against the training simulator over the held-out columns (`worst_loss`: error / train error − 1)."""
    seeds = []
    for path in paths:
        seeds.append(seed_cells(path, seconds, checkout))
        say(f"{path}: " + json.dumps({k: round(v, 3) for k, v in seeds[-1].items()}))
    row: dict = {name: float(np.mean([cells[name] for cells in seeds])) for name in seeds[0]}
    row["std"] = {name: float(np.std([cells[name] for cells in seeds])) for name in ERROR_COLUMNS if name in row}
    held_out = [name for name in (*HELD_OUT, "go2_peer", "unitree_mujoco") if name in row]
    row["worst_loss"] = max(row[name] / row["train"] - 1.0 for name in held_out)
    row["seeds"] = seeds
    return row


ERROR_COLUMNS = ("train", *HELD_OUT, "heldout", "go2_peer", "unitree_mujoco")
FALL_COLUMNS = ("train_falls", "heldout_falls", "unitree_mujoco_falls")


def quadruped_table(rows: dict[str, dict], seconds: float) -> Table:
    """Mean ± std over seeds of each error column, falls per seed (mean), the worst loss."""
    table = Table(title=f"quadruped-walk: planar tracking error (m/s) over {seconds:g} s, mean ± std over seeds")
    for column in ("row", "seeds", *ERROR_COLUMNS, "falls (train / held-out / unitree)", "worst loss"):
        table.add_column(column)
    for name, row in rows.items():
        errors = [f"{row[c]:.3f} ± {row['std'][c]:.3f}" if c in row else "—" for c in ERROR_COLUMNS]
        falls = " / ".join(f"{row[c]:g}" if c in row else "—" for c in FALL_COLUMNS)
        table.add_row(name, str(len(row["seeds"])), *errors, falls, f"{row['worst_loss']:+.0%}")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for row in "abc":
        parser.add_argument(f"--{row}", type=Path, nargs="+", default=[], help=f"row {row}: one export per seed")
    parser.add_argument("--unitree-mujoco", type=Path, default=None, help="a unitree_mujoco checkout (column)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--arm", action="store_true", help="also the arm rows (bench arm-transfer, joint mode)")
    parser.add_argument("--arm-goals", type=int, default=6)
    args = parser.parse_args(argv)
    console, result = Console(), {"quadruped": {}, "arm_reach_franky_error_m": None}
    for row in "abc":
        if getattr(args, row):
            result["quadruped"][row] = quadruped_row(getattr(args, row), args.seconds, args.unitree_mujoco)
    console.print(quadruped_table(result["quadruped"], args.seconds))
    if args.arm:
        from policyforge.bench import arm_transfer

        targets = arm_transfer.goals(args.arm_goals)
        result["arm_reach_franky_error_m"] = {
            name: float(np.mean(arm_transfer.franky_distances(path, targets, 6.0, "joint")))
            for name, path in (("before", arm_transfer.ASSETS / "arm-reach-policy.onnx"),
                               ("after", arm_transfer.ASSETS / "arm-reach-franka-policy.onnx"))
        }  # fmt: skip
    print(json.dumps(_no_nan(result)))


def _no_nan(value):
    """`value` with NaN (not measured, or every robot fell) as null, for strict JSON."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


if __name__ == "__main__":
    main()
