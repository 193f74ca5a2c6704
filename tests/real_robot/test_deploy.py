"""`policyforge deploy` end to end on the simulated peers (each starts and stops its own peer)."""

from __future__ import annotations

from policyforge.cli import main
from policyforge.real_robot.launch import DeployConfig, deploy
from tests.real_robot.conftest import ASSETS, GO2_POLICY


def test_deploy_walks_the_go2_peer_and_records_the_episode(tmp_path, capsys):
    out = tmp_path / "episodes"
    code = main(["deploy", str(GO2_POLICY), "--robot", "go2", "--peer", "sim", "--seconds", "3", "--record", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "final mode" in printed
    from policyforge.data.dataset import Demonstrations

    episodes = Demonstrations(out)
    # 3 s at 50 Hz = 150 policy steps; on a loaded machine some actions miss their time budget (not recorded)
    assert episodes.num_episodes == 1 and episodes.num_frames >= 90
    assert episodes.column("observation.state").shape[1] == 45


def test_deploy_reaches_with_the_franka_peer():
    config = DeployConfig(source=ASSETS / "arm-reach-policy.onnx", robot="franka", peer="sim", seconds=4.0)
    report, facts = deploy(config)
    # reaching is asserted in test_franka.py; where the arm ends is not: after reaching, some joint-mode runs
    # drift away from the goal (not diagnosed yet, README: deploy limits)
    assert report.final_mode == "normal" and report.policy_steps >= 90 and facts["goal_distance"] >= 0


def test_deploy_refuses_a_policy_of_another_task(capsys):
    code = main(["deploy", str(GO2_POLICY), "--robot", "franka", "--peer", "sim"])
    assert code == 2 and "franka runs arm-reach policies; this one is for 'quadruped-walk'" in capsys.readouterr().out
