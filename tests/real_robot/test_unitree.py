"""Unitree's own software as peers: the SDK's motion-switcher client and its low-level example against our Go2
peer, and `deploy` against Unitree's simulator (unitree_mujoco) through its own DDS bridge.

The last two need checkouts of Unitree's repositories, which CI cannot fetch (no network but the package
registries): they run where `POLICYFORGE_UNITREE_SDK2_PYTHON` / `POLICYFORGE_UNITREE_MUJOCO` name clones of
unitreerobotics/unitree_sdk2_python / unitree_mujoco (README, "Unitree's simulator"), and are skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from policyforge.cli import main
from policyforge.real_robot.go2 import Go2, Go2Config
from policyforge.real_robot.peers.go2_sim import FACTS_PERIOD_S
from policyforge.real_robot.peers.process import free_domain_id, simulated_peer, stop_process
from policyforge.real_robot.peers.unitree_mujoco import SETTLE_S
from policyforge.real_robot.robot import Command
from tests.real_robot.conftest import ASSETS, GO2_POLICY, PEER_START_S, Peer, running_go2_peer

SDK_CHECKOUT = os.environ.get("POLICYFORGE_UNITREE_SDK2_PYTHON")
MUJOCO_CHECKOUT = os.environ.get("POLICYFORGE_UNITREE_MUJOCO")

DAMPING = Command(np.zeros(12), np.zeros(12), np.zeros(12), np.zeros(12), np.full(12, 3.0))

MOTION_SWITCHER_CLIENT = """
import json, sys
from unitree_sdk2py.core.channel import ChannelFactoryInitialize
from unitree_sdk2py.comm.motion_switcher.motion_switcher_client import MotionSwitcherClient
ChannelFactoryInitialize(int(sys.argv[1]), "lo")
client = MotionSwitcherClient()
client.SetTimeout(10.0)
client.Init()
answers = [client.CheckMode()]
for line in sys.stdin:  # one call per line the test sends, so it can look at the peer in between
    answers.append(client.ReleaseMode() if line.strip() == "release" else client.CheckMode())
print(json.dumps(answers), flush=True)
"""


@pytest.fixture
def peer_in_sport_mode(tmp_path):
    with running_go2_peer(tmp_path, "--motion-mode", "normal") as peer:
        yield peer


def test_unitrees_motion_switcher_client_releases_the_peers_mode_and_only_then_commands_move_it(peer_in_sport_mode):
    peer = peer_in_sport_mode
    client = subprocess.Popen(
        [sys.executable, "-c", MOTION_SWITCHER_CLIENT, str(peer.domain_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with Go2(Go2Config(domain_id=peer.domain_id)) as robot:  # commands while the sport mode holds the robot
            for _ in range(100):
                robot.send(DAMPING)
            peer.wait_for(lambda f: f["commands_in_motion_mode"] >= 50)
            time.sleep(3 * FACTS_PERIOD_S)  # the rest of them arrive
            held = peer.facts()
            assert held["commands"] == 0
            client.stdin.write("release\ncheck\n")
            client.stdin.close()
            answers = json.loads(client.stdout.readline())
            for _ in range(100):
                robot.send(DAMPING)
            moved = peer.wait_for(lambda f: f["commands"] >= 50)
    finally:
        stop_process(client)
    assert answers == [[0, {"form": "0", "name": "normal"}], [0, None], [0, {"form": "0", "name": ""}]]
    assert moved["motion_switcher_calls"] == {"1001": 2, "1003": 1}
    assert moved["commands_in_motion_mode"] == held["commands_in_motion_mode"]


@pytest.mark.skipif(not SDK_CHECKOUT, reason="POLICYFORGE_UNITREE_SDK2_PYTHON: no unitree_sdk2_python checkout")
def test_unitrees_low_level_stand_example_runs_unmodified_against_the_peer(tmp_path):
    """example/go2/low_level/go2_stand_example.py: asks the motion switcher, then 5.8 s of LowCmds at 500 Hz that
    fold, stand and splay the legs. It talks on DDS domain 0 (hard-coded), so the peer does too."""
    example = Path(SDK_CHECKOUT) / "example" / "go2" / "low_level"
    with simulated_peer("go2", 0, tmp_path / "peer.json") as facts:
        peer = Peer(0, facts)
        peer.wait_for(lambda facts: True, timeout=PEER_START_S)
        done = subprocess.run(
            [sys.executable, "go2_stand_example.py", "lo"],
            cwd=example,
            input="\n",  # "Press Enter to continue..."
            capture_output=True,
            text=True,
            timeout=120,
        )
        facts = peer.wait_for(lambda f: f["commands"] > 2000)
    assert "Done!" in done.stdout, done.stdout + done.stderr
    assert facts["motion_switcher_calls"] == {"1001": 1} and facts["bad_crc_commands"] == 0
    # its last target: legs splayed and folded (_targetPos_3), which the peer's joints reached
    splayed = np.array([-0.35, 1.36, -2.65, 0.35, 1.36, -2.65, -0.5, 1.36, -2.65, 0.5, 1.36, -2.65])
    assert np.abs(np.array(facts["joint_pos"]) - splayed).max() < 0.15, facts["joint_pos"]


@pytest.mark.skipif(not MUJOCO_CHECKOUT, reason="POLICYFORGE_UNITREE_MUJOCO: no unitree_mujoco checkout")
@pytest.mark.parametrize("policy", [GO2_POLICY, ASSETS / "quadruped-walk-student.onnx"], ids=["ppo", "student"])
def test_deploy_walks_the_go2_on_unitrees_simulator(tmp_path, capsys, policy):
    """The shipped walking policy, and the proprioceptive-history student of the sim-to-real recipe, through the
    DDS driver on Unitree's own MuJoCo simulator and bridge (crc 0, frozen tick, zeros first): each stands up and
    walks backwards (their scene has steps 1.1 m ahead) without falling."""
    facts_path, domain = tmp_path / "unitree.json", free_domain_id()
    command = [sys.executable, "-m", "policyforge.real_robot.peers.unitree_mujoco", "--checkout", MUJOCO_CHECKOUT]
    command += ["--domain-id", str(domain), "--stats", str(facts_path)]
    simulator = subprocess.Popen(command)
    try:
        on_the_floor = lambda f: f["sim_seconds"] > 2 * SETTLE_S  # noqa: E731
        Peer(domain, facts_path).wait_for(on_the_floor, timeout=PEER_START_S)
        code = main(
            ["deploy", str(policy), "--robot", "go2", "--interface", "lo", "--domain-id", str(domain),
             "--simulator-bridge", "--command=-0.4,0,0", "--seconds", "5"]
        )  # fmt: skip
        walked = json.loads(facts_path.read_text())
    finally:
        stop_process(simulator)
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "final mode │ normal" in printed, printed
    assert walked["stood"] and walked["falls"] == 0 and walked["min_upright"] > 0.9, json.dumps(walked)
    assert walked["displacement"][0] < -1.0, walked  # 0.4 m/s for 5 s is 2 m
