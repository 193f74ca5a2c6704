"""The simulated protocol peers as processes: started on the loopback for a deploy dry run, a test or a bench,
their fixed ports checked first, their facts (a JSON file the peer rewrites) read, stopped and waited for."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from policyforge.config import ConfigError
from policyforge.real_robot.deploy import DeployError

PEER_START_S = 60.0
"""How long a simulated peer may take to start, s: the Go2 peer's first facts came after 3.7–4.0 s on a 2-core
machine at load 3, close to the driver's 5 s connect timeout, which its start-up raced (deploy waits for them)."""
PEERS = {"go2": "peers/go2_sim.py", "franka": "franky-sim", "ur": "peers/rtde_sim.py"}
"""The simulated protocol peer of each robot (`simulated_peer`), by name."""


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
    if robot == "franka":  # franky-sim: a MuJoCo FR3 serving the libfranka protocol (O_T_EE mended: franky_peer)
        command = [sys.executable, "-m", "policyforge.real_robot.peers.franky_peer", "-s", "mujoco"]
        command += ["--hostname", "127.0.0.1"]
    elif robot == "ur":  # our simulated UR controller: RTDE 30004, dashboard 29999, script port 30003
        command = [sys.executable, "-m", "policyforge.real_robot.peers.rtde_sim", "--stats", str(stats_path)]
        command += list(extra_args)
    elif robot == "go2":
        command = [sys.executable, "-m", "policyforge.real_robot.peers.go2_sim", "--domain-id", str(domain_id)]
        command += ["--stats", str(stats_path)] + (["--seconds", str(seconds)] if seconds else []) + list(extra_args)
    else:
        raise ConfigError("robot", f"no simulated peer for {robot!r}; peers: ['franka', 'go2', 'ur']")
    check_peer_ports_free(robot)
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
        stop_process(process)


PEER_PORTS = {"franka": (1337,), "ur": (30004, 29999, 30003)}
"""The fixed TCP ports a simulated peer listens on, 127.0.0.1 (libfranka's command port; RTDE, dashboard, script)."""


def check_peer_ports_free(robot: str) -> None:
    """Refuse to start a peer whose fixed ports another process holds: the driver would reach that one instead (a
    franky-sim orphaned by a killed run once answered a whole test session with its own arm's pose, 2026-12-05)."""
    for port in PEER_PORTS.get(robot, ()):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a just-closed peer's TIME_WAIT is fine
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise DeployError(
                    f"--peer sim: port {port} on 127.0.0.1 is in use, so the simulated {robot} cannot start there and "
                    f"the driver would talk to whatever holds it (a peer left by an earlier run?): find it with "
                    f"`ss -ltnp 'sport = :{port}'` and stop it"
                ) from None


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds; waits for it either way."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def read_facts(stats_path: Path) -> dict:
    """The peer's latest facts (empty before its first write)."""
    return json.loads(stats_path.read_text()) if stats_path.exists() else {}


def free_domain_id() -> int:
    """A DDS domain id unlikely to be in use by another test or robot on this host."""
    return random.SystemRandom().randint(100, 230)


def wait_for_facts(facts_path: Path, timeout: float = PEER_START_S) -> None:
    """Wait until a simulated peer writes its first facts (it publishes robot states from then on)."""
    deadline = time.monotonic() + timeout
    while not read_facts(facts_path):
        if time.monotonic() > deadline:
            raise DeployError(
                f"the simulated peer wrote no facts to {facts_path} within {timeout:.0f} s: did it start?"
            )
        time.sleep(0.1)


def robot_computer_for_the_peers(priority: int = 90) -> int:
    """Run the threads of this process's child processes (the simulated robots: franky-sim stands for the
    Franka's own controller) under SCHED_FIFO above the loop's 80, where permitted; returns how many threads got
    it. On a loaded machine a starved simulated arm lags and then overshoots commands a real Franka, on its own
    computer, follows."""
    done = 0
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                os.sched_setscheduler(int(task), os.SCHED_FIFO, os.sched_param(priority))
                done += 1
    return done
