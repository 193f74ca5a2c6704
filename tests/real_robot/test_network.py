"""Network exposure: every protocol peer we launch and every driver talk on the interface they are told to use
(the loopback for the peers) and accept nothing from any other — checked in the kernel's socket tables."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from policyforge.config import ConfigError
from policyforge.real_robot import dds, netbind
from policyforge.real_robot.peers.feetech_sim import FeetechBusPeer
from policyforge.real_robot.peers.process import free_domain_id, stop_process
from tests.real_robot.sockets import BoundSocket, process_sockets

GO2_DRIVER = """
import sys
from policyforge.real_robot.go2 import Go2, Go2Config
with Go2(Go2Config(domain_id=int(sys.argv[1]))) as robot:
    print("states", robot.stats["states"], flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@contextlib.contextmanager
def running(command: list[str], **kwargs) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kwargs)
    try:
        yield process
    finally:
        stop_process(process)


def sockets_once(pid: int, condition, timeout: float = 30.0) -> list[BoundSocket]:
    """The sockets of `pid` once `condition(sockets)` holds (a peer opens its ports after its imports)."""
    deadline = time.monotonic() + timeout
    while True:
        found = process_sockets(pid)
        if condition(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def exposed(found: list[BoundSocket]) -> list[BoundSocket]:
    """The sockets that accept connections or packets from beyond the loopback."""
    return [s for s in found if s.listening and not s.loopback_only]


def test_the_go2_peer_and_driver_are_reachable_only_on_the_loopback():
    domain = free_domain_id()
    peer_command = [sys.executable, "-m", "policyforge.real_robot.peers.go2_sim", "--domain-id", str(domain)]
    driver_command = [sys.executable, "-c", GO2_DRIVER, str(domain)]
    with (
        running(peer_command) as peer,
        running(driver_command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as driver,
    ):
        assert driver.stdout.readline().startswith("states")  # they found each other over DDS
        for process in (peer, driver):
            found = sockets_once(process.pid, lambda found: len(found) >= 3)
            dds_ports = [s for s in found if s.port in dds.domain_ports(domain)]
            assert dds_ports and all(s.listening for s in dds_ports), found  # DDS's own receive sockets
            assert exposed(found) == [], found
        driver.stdin.close()


def test_the_ur_peer_listens_only_on_the_loopback(tmp_path):
    command = [sys.executable, "-m", "policyforge.real_robot.peers.rtde_sim", "--stats", str(tmp_path / "ur.json")]
    with running(command) as peer:
        found = sockets_once(peer.pid, lambda found: {29999, 30003, 30004} <= {s.port for s in found})
    assert {29999, 30003, 30004} <= {s.port for s in found if s.listening}, found
    assert all(s.address == "127.0.0.1" for s in found), found


def test_franky_sim_listens_on_the_loopback_but_its_udp_socket_on_every_interface():
    """franky-sim (third party, launched with --hostname 127.0.0.1) binds its TCP ports to 127.0.0.1, but the UDP
    socket it opens for each client (robot states out, motion commands in) to 0.0.0.0 whatever the hostname
    (franky_sim/franka_server.py: `bind(("0.0.0.0", 0))`). Our Franka driver's own UDP socket (libfranka's) is
    bound to the interface that reaches the robot (`Franka.connect`)."""
    from policyforge.real_robot.franka import Franka, FrankaConfig

    command = [str(Path(sys.executable).with_name("franky-sim")), "-s", "mujoco", "--hostname", "127.0.0.1"]
    with running(command, stdout=subprocess.DEVNULL) as peer:
        robot = Franka(FrankaConfig())
        robot.connect(timeout=90.0)  # franky-sim starts in ~2 s idle, far slower on a loaded machine
        try:
            found = sockets_once(peer.pid, lambda found: any(s.protocol == "udp" for s in found))
            driver = process_sockets(os.getpid())
        finally:
            robot.disconnect()
    assert {1337, 1338} <= {s.port for s in found if s.listening and s.address == "127.0.0.1"}, found
    assert [(s.protocol, s.address) for s in exposed(found)] == [("udp", "0.0.0.0")], found
    assert exposed(driver) == [], driver


def test_the_feetech_peer_opens_no_socket():
    before = netbind.socket_fds()
    peer = FeetechBusPeer([1, 2])
    try:
        assert netbind.socket_fds() == before
    finally:
        peer.close()


def test_on_a_robot_interface_dds_keeps_multicast_and_binds_to_that_interface():
    """Hardware: the robot discovers by multicast on its Ethernet link; no traffic is sent here (no domain is
    created on it), only the configuration and the socket binding are checked."""
    interface = next((name for _, name in socket.if_nameindex() if name != "lo"), None)
    if interface is None:
        pytest.skip("no network interface besides the loopback")
    config = dds.domain_config(0, interface)
    assert f'<NetworkInterface name="{interface}"/>' in config and "<AllowMulticast>default" in config
    assert "localhost" not in config
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", 0))
        assert netbind.bind_wildcard_sockets({sock.fileno()}, interface) == [sock.getsockname()[1]]
        (mine,) = [s for s in process_sockets(os.getpid()) if s.port == sock.getsockname()[1]]
        assert mine.device == interface and not mine.loopback_only


def test_an_unknown_interface_is_named():
    with pytest.raises(ConfigError, match=r"interface: no network interface 'eth9' on this computer"):
        dds.participant(free_domain_id(), "eth9")
