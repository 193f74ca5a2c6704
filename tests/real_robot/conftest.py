"""Fixtures for driver tests: a simulated robot speaking the real protocol on the loopback, per test."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from policyforge.real_robot.peers.process import (
    free_domain_id,
    read_facts,
    robot_computer_for_the_peers,
    simulated_peer,
)

ASSETS = Path(__file__).parent / "assets"
GO2_POLICY = ASSETS / "quadruped-walk-policy.onnx"
"""A PPO expert of quadruped-walk (configs/quadruped-walk-ppo.yaml, 6M env steps), exported to ONNX."""
PEER_START_S = 90.0
"""How long a peer may take to start before a test fails: generous, for a loaded machine."""


class Peer:
    """A running Go2 peer: its DDS domain and its facts."""

    def __init__(self, domain_id: int, facts_path: Path):
        self.domain_id, self.facts_path = domain_id, facts_path

    def facts(self) -> dict:
        return read_facts(self.facts_path)

    def wait_for(self, condition, timeout: float = 10.0) -> dict:
        """The peer's facts once `condition(facts)` holds; fails after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            facts = self.facts()
            if facts and condition(facts):
                return facts
            time.sleep(0.1)
        raise AssertionError(f"peer facts never satisfied the condition: {self.facts()}")


@contextlib.contextmanager
def running_go2_peer(tmp_path: Path, *flags: str):
    """A Go2 peer (`go2_sim` with `flags`) on a free DDS domain, once it serves."""
    domain = free_domain_id()
    with simulated_peer("go2", domain, tmp_path / "peer.json", extra_args=flags) as facts_path:
        peer = Peer(domain, facts_path)
        # it publishes states from its first facts on; its start-up took 4 s at load 3 and 25 s at load 8
        peer.wait_for(lambda facts: True, timeout=PEER_START_S)
        yield peer


@pytest.fixture
def go2_peer(tmp_path):
    with running_go2_peer(tmp_path) as peer:
        yield peer


@pytest.fixture
def peers_on_their_own_computer():
    """While the test runs, give every simulated robot it starts `robot_computer_for_the_peers` (checked every
    0.2 s, so a peer that `deploy` starts itself gets it too)."""
    stop = threading.Event()

    def keep_giving() -> None:
        while not stop.wait(0.2):
            robot_computer_for_the_peers()

    thread = threading.Thread(target=keep_giving, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()
