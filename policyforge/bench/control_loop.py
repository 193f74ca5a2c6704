"""Control-loop timing on the Go2 protocol peer: jitter and overruns of `ControlLoop` at 500 Hz (the Go2's
low-level rate; the exported quadruped-walk policy at 50 Hz, through the safety filter, over real DDS on the
loopback), on an idle and on a loaded machine (one busy process per core, started and stopped here), each
without and with the loop's real-time options (`LoopConfig`: CPU affinity, SCHED_FIFO, mlockall, GC frozen).

    policyforge bench control-loop [--seconds 10] [--rate 500] [--priority 80] [--cpu LAST]

Jitter = how late each tick wakes behind its deadline `start + k·period`; overruns = ticks that woke more than
a period late and were skipped. "Idle" means no busy process of ours: the load average printed with each row
says what else ran. Prints a table; the last line is JSON with the figures at the loop rate, per case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.real_robot.deploy import ExportedPolicy, QuadrupedAdapter
from policyforge.real_robot.go2 import Go2, Go2Config
from policyforge.real_robot.loop import ControlLoop, LoopConfig
from policyforge.real_robot.peers.process import free_domain_id, simulated_peer
from policyforge.real_robot.safety import SafetyFilter
from policyforge.sims.tasks.quadruped import QuadrupedConfig

DEFAULT_POLICY = Path("tests/real_robot/assets/quadruped-walk-policy.onnx")
PEER_PRIORITY = 70
"""SCHED_FIFO priority of the simulated robot (below the loop's 80 by default)."""


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes spinning on the CPU (`while True: pass`) while inside."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0 if count else 0.0)  # let the scheduler spread them
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def own_computer_for_the_robot() -> bool:
    """Give the simulated robot (our child processes) CPU 0 under SCHED_FIFO, as a real Go2 has its own computer:
    otherwise the busy processes and a real-time loop starve it and every state arrives stale. False where not
    permitted (its states then age with the machine's load)."""
    children = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _parent(int(pid)) == os.getpid()]
    try:
        for pid in children:
            os.sched_setaffinity(pid, {0})
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(PEER_PRIORITY))
    except OSError:
        return False
    return True


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def run_case(policy_path: Path, rate_hz: float, seconds: float, options: dict, busy: int, workdir: Path) -> dict:
    """One ControlLoop run on a fresh Go2 peer, with `busy` processes spinning once it is connected (the peer's
    start-up is not what is measured); its timing figures."""
    domain = free_domain_id()
    policy = ExportedPolicy(policy_path)
    adapter = QuadrupedAdapter(QuadrupedConfig(), (0.5, 0.0, 0.0))
    config = LoopConfig(rate_hz=rate_hz, policy_rate_hz=50.0, seconds=seconds, prepare_seconds=1.0, **options)
    with simulated_peer("go2", domain, workdir / f"peer-{domain}.json"):
        robot = Go2(Go2Config(domain_id=domain))
        robot.connect(timeout=60.0)  # the peer's start-up takes seconds on a loaded machine
        own_computer_for_the_robot()
        try:
            with busy_processes(busy):
                load = os.getloadavg()[0]
                report = ControlLoop(robot, SafetyFilter(robot.spec), policy, adapter, config).run()
            sent = robot.stats["commands"]
        finally:
            robot.disconnect()
    return {
        "rate_hz": rate_hz,
        "achieved_hz": sent / (report.ticks / rate_hz),  # commands per second of the loop's deadline grid
        "median_jitter_ms": report.jitter_ms["median"],
        "p99_jitter_ms": report.jitter_ms["p99"],
        "max_jitter_ms": report.jitter_ms["max"],
        "overruns": report.overruns,
        "ticks": report.ticks,
        "policy_steps": report.policy_steps,
        "policy_late": report.interventions.get("policy_late", 0),
        "stale_state": report.interventions.get("stale_state", 0),
        "final_mode": report.final_mode,
        "realtime": list(report.realtime),
        "load_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="policy phase of each run, s")
    parser.add_argument("--rate", type=float, default=500.0, help="loop rate, Hz")
    parser.add_argument("--policy", type=Path, default=DEFAULT_POLICY)
    parser.add_argument("--priority", type=int, default=80, help="SCHED_FIFO priority with the options")
    parser.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1, help="CPU the loop is kept on")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("policyforge.safety").setLevel(logging.ERROR)  # the table says what matters here
    realtime = {"cpu_affinity": (args.cpu,), "realtime_priority": args.priority, "lock_memory": True}
    realtime["freeze_gc"] = True
    cases = {}
    with tempfile.TemporaryDirectory(prefix="policyforge-bench-") as tmp:
        for load, busy in (("idle", 0), ("loaded", os.cpu_count() or 1)):
            for name, options in (("off", {}), ("on", realtime)):
                cases[f"{load}/{name}"] = run_case(args.policy, args.rate, args.seconds, options, busy, Path(tmp))
    title = (
        f"ControlLoop at {args.rate:.0f} Hz on the Go2 DDS peer, {args.seconds:.0f} s per run, {os.cpu_count()} CPUs"
    )
    table = Table(title=title)
    for column in ("machine", "real-time options", "load (1 min)", "achieved Hz", "median ms", "p99 ms", "max ms"):
        table.add_column(column)
    table.add_column("overruns")
    table.add_column("policy steps (late)")
    table.add_column("stale-state ticks")
    for case, r in cases.items():
        table.add_row(
            case.split("/")[0], ", ".join(r["realtime"]) or "none", f"{r['load_1min']:.1f}", f"{r['achieved_hz']:.1f}",
            f"{r['median_jitter_ms']:.3f}", f"{r['p99_jitter_ms']:.3f}", f"{r['max_jitter_ms']:.2f}",
            f"{r['overruns']} of {r['ticks']}", f"{r['policy_steps']} ({r['policy_late']})", str(r["stale_state"]),
        )  # fmt: skip
    Console(width=160).print(table)
    on = cases["loaded/on"]
    figures = {k: on[k] for k in ("rate_hz", "p99_jitter_ms", "overruns")}
    facts = {"cpus": os.cpu_count(), "root": os.geteuid() == 0, "sched_fifo": "sched_fifo" in on["realtime"]}
    print(json.dumps({**figures, **facts, "cases": cases}))


if __name__ == "__main__":
    main()
