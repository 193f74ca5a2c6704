"""System identification against a Go2 peer with known parameters: the simulated Go2 hangs (legs free) with leg
joints that differ from go2.xml's — damping, armature, dry friction, a weak motor, command latency — is driven
through the DDS driver and the safety filter (`real_robot.sysid.record`), and the simulated Go2's model is fitted
to the recording with CMA-ES (`real_robot.sysid.fit`).

    policyforge bench sysid [--seconds 8] [--evaluations 500] [--seeds 0 1 2] [--out runs/sysid]

Prints, per parameter, the peer's true value, go2.xml's, and the fitted one per seed with its error; the
replay error (RMS joint position) of go2.xml's model and of the fitted one; and the held-out torque error of an
actuator network fitted to the same recording (`real_robot.actuator_fit`) against the PD law's. The last line is
JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from policyforge.real_robot.actuator_fit import ActuatorFitConfig, fit_actuator_net
from policyforge.real_robot.peers.go2_model import JointPhysics, SimulatedGo2
from policyforge.real_robot.sysid import BOUNDS, Excitation, fit, record_peer, replay_error
from policyforge.sims.make import make_task

KNOWN = JointPhysics(damping=0.5, armature=0.03, frictionloss=0.2, motor_strength=0.85, command_delay=0.01, hang=True)
"""The peer's leg joints (go2.xml: damping 0.1, armature 0.01 (calves 0.02), no dry friction, full strength, no
latency)."""


def model_value(name: str) -> float:
    """go2.xml's value of a fitted field (the thigh's, where the calves differ)."""
    if name in ("motor_strength", "command_delay"):
        return 1.0 if name == "motor_strength" else 0.0
    model = SimulatedGo2(500.0).model
    return float(getattr(model, f"dof_{name}")[model.joint("FR_thigh_joint").dofadr[0]])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of the excitation, s")
    parser.add_argument("--evaluations", type=int, default=500, help="replays CMA-ES may run per fit")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one recording and fit each")
    parser.add_argument("--out", type=Path, default=None, help="keep the recordings (npz) here")
    args = parser.parse_args(argv)
    excitation, fits, console = Excitation(seconds=args.seconds), [], Console()
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            recording = record_peer(KNOWN, excitation, Path(tmp))
        if args.out is not None:
            recording.save(args.out / f"recording-s{seed}.npz")
        started = time.monotonic()
        fitted = fit(recording, args.evaluations, seed)
        torque_scale = make_task("quadruped-walk").model.actuator_forcerange[:, 1]
        network = fit_actuator_net(recording, torque_scale, ActuatorFitConfig(seed=seed))
        fits.append(
            {
                "seed": seed,
                "params": {name: getattr(fitted.physics, name) for name in BOUNDS},
                "fit_error_rad": fitted.error_rad,
                "model_error_rad": replay_error(recording, JointPhysics()),
                "known_error_rad": replay_error(recording, dataclasses.replace(KNOWN, hang=False)),
                "fit_seconds": time.monotonic() - started,
                "states": len(recording.state_time),
                "actuator_net_torque_error": network.net_error,
                "pd_law_torque_error": network.pd_error,
            }
        )
    table = Table(title=f"system identification: the hanging Go2 peer, {args.seconds:g} s excitation per seed")
    for column in ("parameter", "peer (true)", "go2.xml", *(f"fit, seed {f['seed']}" for f in fits), "mean |error|"):
        table.add_column(column)
    errors = {}
    for name in BOUNDS:
        true, values = getattr(KNOWN, name), [f["params"][name] for f in fits]
        errors[name] = float(np.mean([abs(v - true) for v in values]))
        relative = f" ({errors[name] / true:.0%})" if true else ""
        fitted = (f"{v:.4g}" for v in values)
        table.add_row(name, f"{true:g}", f"{model_value(name):g}", *fitted, f"{errors[name]:.3g}{relative}")
    mean = lambda key: f"{np.mean([f[key] for f in fits]):.4f}"  # noqa: E731
    replays = (f"{f['fit_error_rad']:.4f}" for f in fits)
    table.add_row("replay error, rad RMS", mean("known_error_rad"), mean("model_error_rad"), *replays, "")
    torques = (f"{f['actuator_net_torque_error']:.3f} (PD law {f['pd_law_torque_error']:.3f})" for f in fits)
    table.add_row("actuator net: held-out torque error, N·m RMS", "", "", *torques, "")
    console.print(table)
    summary = {"known": {name: getattr(KNOWN, name) for name in BOUNDS}, "mean_abs_error": errors, "fits": fits}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
