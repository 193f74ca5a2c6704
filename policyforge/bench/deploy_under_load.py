"""`policyforge deploy` of the walking policy on the simulated Go2 while every core is busy: do unsafe commands
reach the robot? The peer (`peers/go2_sim.py`, its own process, ordinary scheduling like everything else here)
audits every command it receives against the motors' limits (torque, step, position, velocity, finite values).

    policyforge bench deploy-under-load [--runs 3] [--seconds 10] [--busy CORES]

Each run is `launch.deploy` as the CLI calls it (export checks, peer start-up, connect, stand up, walk at 0.5 m/s),
on a fresh peer, once with ordinary scheduling and once with `--realtime`. Prints a table; the last line is JSON
with the totals.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.bench.control_loop import DEFAULT_POLICY, busy_processes
from policyforge.real_robot.launch import DeployConfig, deploy


def run_once(policy: Path, seconds: float, realtime: bool) -> dict:
    """One deployment on a fresh Go2 peer: the loop's figures and what the peer's audit counted."""
    config = DeployConfig(source=policy, robot="go2", peer="sim", seconds=seconds, realtime=realtime)
    done = deploy(config, say=lambda _: None)
    report, facts = done.report, done.facts
    return {
        "load_1min": os.getloadavg()[0],
        "commands": int(facts.get("commands", 0)),
        "unsafe": dict(facts.get("unsafe", {})),
        "interventions": dict(report.interventions),
        "overruns": report.overruns,
        "p99_jitter_ms": report.jitter_ms["p99"],
        "moved_m": float(facts.get("displacement", [0.0])[0]),
        "final_mode": report.final_mode,
        "realtime": list(report.realtime),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="deployments per scheduling mode")
    parser.add_argument("--seconds", type=float, default=10.0, help="policy phase of each deployment, s")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="spinning processes (default: cores)")
    parser.add_argument("--policy", type=Path, default=DEFAULT_POLICY)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    runs = []
    with busy_processes(args.busy):
        for realtime in (False, True):
            for _ in range(args.runs):
                runs.append({"realtime_flag": realtime, **run_once(args.policy, args.seconds, realtime)})
                print(f"run {len(runs)}: --realtime {realtime}: unsafe {runs[-1]['unsafe']}", flush=True)
    table = Table(title=f"policyforge deploy on the Go2 peer, {args.busy} busy processes, {args.seconds:.0f} s each")
    for column in ("--realtime", "load", "commands", "unsafe at peer", "p99 jitter ms", "overruns", "interventions"):
        table.add_column(column)
    table.add_column("moved / final mode")
    for r in runs:
        interventions = ", ".join(f"{k} {v}" for k, v in sorted(r["interventions"].items())) or "none"
        table.add_row(
            "yes" if r["realtime_flag"] else "no", f"{r['load_1min']:.1f}", str(r["commands"]),
            str(sum(r["unsafe"].values())), f"{r['p99_jitter_ms']:.2f}", str(r["overruns"]), interventions,
            f"{r['moved_m']:.2f} m / {r['final_mode']}",
        )  # fmt: skip
    Console(width=170).print(table)
    unsafe = sum(sum(r["unsafe"].values()) for r in runs)
    commands = sum(r["commands"] for r in runs)
    print(json.dumps({"runs": len(runs), "commands": commands, "unsafe_commands_reaching_peer": unsafe}))


if __name__ == "__main__":
    main()
