"""Control-loop timing on the Go2 protocol peer: jitter and overruns of `ControlLoop` at 50 Hz (one policy
action per tick) and 500 Hz (the Go2's low-level rate, policy at 50 Hz), running the exported quadruped-walk
policy through the safety filter over real DDS on the loopback — against a naive `time.sleep(period)` loop
doing the same per-tick work (observe, filter, send), which drifts.

    python bench/control_loop.py [--seconds 10] [--policy tests/real_robot/assets/quadruped-walk-policy.onnx]

Prints a table; the last line is JSON {"rate_hz", "p99_jitter_ms", "overruns", ...} for the 500 Hz loop.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from policyforge.real_robot.deploy import ExportedPolicy, QuadrupedAdapter
from policyforge.real_robot.go2 import Go2, Go2Config
from policyforge.real_robot.launch import free_domain_id, simulated_peer
from policyforge.real_robot.loop import ControlLoop, LoopConfig
from policyforge.real_robot.safety import SafetyFilter
from policyforge.sims.tasks.quadruped import QuadrupedConfig

DEFAULT_POLICY = Path("tests/real_robot/assets/quadruped-walk-policy.onnx")


def control_loop(robot: Go2, policy_path: Path, rate_hz: float, seconds: float) -> dict:
    policy = ExportedPolicy(policy_path)
    adapter = QuadrupedAdapter(QuadrupedConfig(), (0.5, 0.0, 0.0))
    config = LoopConfig(rate_hz=rate_hz, policy_rate_hz=50.0, seconds=seconds, prepare_seconds=1.0)
    start = time.monotonic()
    report = ControlLoop(robot, SafetyFilter(robot.spec), policy, adapter, config).run()
    wall = time.monotonic() - start
    return {
        "loop": "ControlLoop (deadlines)",
        "rate_hz": rate_hz,
        "achieved_hz": report.ticks / wall,
        "median_jitter_ms": report.jitter_ms["median"],
        "p99_jitter_ms": report.jitter_ms["p99"],
        "max_jitter_ms": report.jitter_ms["max"],
        "overruns": report.overruns,
        "policy_steps": report.policy_steps,
    }


def naive_loop(robot: Go2, rate_hz: float, seconds: float) -> dict:
    """`work(); sleep(period)`: lateness measured against the ideal grid start + k·period."""
    safety, adapter = SafetyFilter(robot.spec), QuadrupedAdapter(QuadrupedConfig())
    period, ticks = 1.0 / rate_hz, round(seconds * rate_hz)
    lateness, start = [], time.monotonic()
    for tick in range(ticks):
        lateness.append(time.monotonic() - (start + tick * period))
        state = robot.observe()
        robot.send(safety(adapter.pose_command(state.joint_pos), state, time.monotonic()).command)
        time.sleep(period)
    wall = time.monotonic() - start
    late_ms = np.asarray(lateness) * 1e3
    return {
        "loop": "naive sleep(period)",
        "rate_hz": rate_hz,
        "achieved_hz": ticks / wall,
        "median_jitter_ms": float(np.median(late_ms)),
        "p99_jitter_ms": float(np.percentile(late_ms, 99)),
        "max_jitter_ms": float(late_ms.max()),
        "overruns": int(np.sum(np.diff(np.floor(np.asarray(lateness) / period)) > 0)),
        "policy_steps": 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--policy", type=Path, default=DEFAULT_POLICY)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (50.0, 500.0):
            domain = free_domain_id()
            with (
                simulated_peer("go2", domain, Path(tmp) / f"peer{rate:.0f}.json"),
                Go2(Go2Config(domain_id=domain)) as robot,
            ):
                rows.append(naive_loop(robot, rate, min(args.seconds, 5.0)))
                rows.append(control_loop(robot, args.policy, rate, args.seconds))
    table = Table(title=f"control-loop timing on the Go2 DDS peer ({args.seconds:.0f} s per loop)")
    for column in ("loop", "rate Hz", "achieved Hz", "jitter median ms", "p99 ms", "max ms", "overruns"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["loop"], f"{r['rate_hz']:.0f}", f"{r['achieved_hz']:.1f}", f"{r['median_jitter_ms']:.3f}",
            f"{r['p99_jitter_ms']:.3f}", f"{r['max_jitter_ms']:.2f}", str(r["overruns"]),
        )  # fmt: skip
    Console(width=160).print(table)
    fast = next(r for r in rows if r["loop"].startswith("ControlLoop") and r["rate_hz"] == 500.0)
    print(json.dumps({**{k: fast[k] for k in ("rate_hz", "p99_jitter_ms", "overruns")}, "all": rows}))


if __name__ == "__main__":
    main()
