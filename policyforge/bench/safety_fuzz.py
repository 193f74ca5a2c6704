"""Fault injection on the drivers + their peers: adversarial policies (NaN, huge, oscillating, stalling,
crashing) and a misbehaving link (dropped and delayed state messages, a robot computer that dies, a bus
adapter unplugged), through the safety filter and the control loop, with the peer auditing every command it
receives — the Go2 over DDS (500 Hz), a Feetech bus arm over a pseudo-terminal (30 Hz) and the Franka on
franky-sim (25 Hz; audited where the driver hands commands to franky, as franky-sim cannot report them).

    policyforge bench safety-fuzz [--robots go2 feetech ur franka] [--policy QUADRUPED.onnx] [--arm-policy ARM.onnx]

Prints a table; the last line is JSON {"commands_sent", "unsafe_commands_reaching_peer", "faults_injected",
"faults_handled"}.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.real_robot.testing.faults import fuzz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=Path("tests/real_robot/assets/quadruped-walk-policy.onnx"))
    parser.add_argument("--arm-policy", type=Path, default=Path("tests/real_robot/assets/arm-reach-policy.onnx"))
    parser.add_argument(
        "--robots", nargs="+", default=["go2", "feetech", "ur", "franka"], choices=["go2", "feetech", "ur", "franka"]
    )
    args = parser.parse_args()
    logging.getLogger("policyforge.safety").setLevel(logging.CRITICAL)  # the table says what happened
    rows, summary = fuzz(args.policy, args.arm_policy, tuple(args.robots))
    table = Table(title="fault injection: drivers + their protocol peers")
    for column in ("robot", "fault", "commands sent", "unsafe at peer", "interventions", "final mode", "handled"):
        table.add_column(column)
    for r in rows:
        interventions = ", ".join(f"{k} {v}" for k, v in sorted(r["interventions"].items()))
        table.add_row(
            r["robot"], r["scenario"], str(r["commands_sent"]), str(r["unsafe_at_peer"]), interventions,
            r["final_mode"], "yes" if r["handled"] else "NO",
        )  # fmt: skip
    Console(width=180).print(table)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
