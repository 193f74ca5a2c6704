"""The Franka's digital twin of a task with objects (`arm-instructed`): the scene drawn from a seed, observed as
the simulator observes it (the privileged `critic` observation a distilled student reads), refused for the families
whose cubes move; and a student distilled from the VLA (README journey 6) deployed on franky-sim goes to the cube its
instruction names."""

from __future__ import annotations

import numpy as np
import pytest

from policyforge.real_robot.arm_adapter import ArmAdapter
from policyforge.real_robot.deploy import DeployError
from policyforge.real_robot.launch import DeployConfig, deploy
from policyforge.real_robot.robot import RobotState
from policyforge.sims import SimConfig, make_env
from policyforge.sims.task import NumpySampler
from policyforge.sims.tasks import instructions as language
from tests.real_robot.conftest import ASSETS

TOUCH_STUDENT = ASSETS / "arm-instructed-touch-student.onnx"
"""A state-only touch expert distilled from the journey-5 VLA by DAgger (`policyforge distill runs/vla-bc --task
touch`, 51,200 env steps; 53% in simulation, its teacher 47%), exported from its best checkpoint."""

TOUCH = {"families": ["touch"], "instructions": "train"}


def test_the_twin_observes_the_scene_as_the_simulator_does():
    adapter = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=7)
    env = make_env(SimConfig(task="arm-instructed", num_envs=1, task_options=TOUCH))
    initial = adapter.task.reset(NumpySampler(np.random.default_rng(7)), 1, np)  # the same draw
    expected = env.reset_to(initial)["critic"][0].numpy()
    arm = initial.qpos[0, adapter.task.arm_qpos]
    obs = adapter.observation(RobotState(0.0, arm, np.zeros(7)), np.zeros(adapter.action_dim))
    assert obs.shape == (env.obs_shapes["critic"][0],) == (adapter.obs_dim,)
    np.testing.assert_allclose(obs, expected, atol=1e-5)
    cubes = obs[22:31].reshape(3, 3)
    instructed = cubes[int(initial.vars["object"][0])]
    np.testing.assert_allclose(adapter.goal, instructed + [0, 0, 0.01], atol=1e-6)  # the touch point
    assert adapter.success_distance == 0.03
    lines = adapter.scene_lines()
    text = lines[0].removeprefix("instruction: ").strip("'")
    assert language.parse(text)[:2] == (language.FAMILIES.index("touch"), int(initial.vars["object"][0]))
    assert "({:.3f}, {:.3f}, {:.3f})".format(*instructed) in lines[1]
    other = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=8)
    assert not np.allclose(other.goal, adapter.goal)  # another seed, another scene
    env.close()


def test_an_instruction_given_at_deploy_takes_the_drawn_ones_place_with_its_goal():
    drawn = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=0)  # 'go to the blue cube'
    told = ArmAdapter(
        "arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=0, instruction="touch the red cube"
    )
    red = language.CUBE_COLOURS.index("red")
    np.testing.assert_allclose(told.scene_cubes(), drawn.scene_cubes())  # the same layout
    np.testing.assert_allclose(told.goal, told.scene_cubes()[red] + [0, 0, 0.01], atol=1e-6)
    assert told.scene_lines()[0] == "instruction: 'touch the red cube'" and int(told.vars["object"][0]) == red
    state = RobotState(0.0, told.default_pose, np.zeros(7))
    obs = told.observation(state, np.zeros(told.action_dim))
    np.testing.assert_allclose(obs[-9:-6], told.goal)  # the student reads the told goal
    with pytest.raises(DeployError, match=r"--instruction: instruction 'poke the red cube' is not one of"):
        ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", instruction="poke the red cube")
    with pytest.raises(DeployError, match=r"--instruction: 'lift the red cube' is a lift instruction.*\['touch'\]"):
        ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", instruction="lift the red cube")


def test_families_that_move_the_cubes_are_refused_naming_them():
    with pytest.raises(DeployError, match=r"families \['lift', 'push'\] move the cubes.*\['touch'\]"):
        ArmAdapter("arm-instructed", {"families": ["lift", "push", "touch"]}, np.zeros(3), obs_key="critic")


def test_a_reach_twin_is_unchanged_by_scenes():
    adapter = ArmAdapter("arm-reach", {}, np.array([0.5, 0.1, 0.3]))
    assert not adapter.has_scene and adapter.scene_lines() == []
    np.testing.assert_allclose(adapter.goal, [0.5, 0.1, 0.3])


@pytest.mark.parametrize("scene_seed", [0, 5], ids=["blue-cube", "green-cube"])
def test_a_distilled_student_goes_to_the_instructed_cube_on_the_franka_peer(scene_seed, peers_on_their_own_computer):
    config = DeployConfig(
        source=TOUCH_STUDENT, peer="sim", seconds=6.0, scene_seed=scene_seed, workspace_floor=0.01, realtime=True
    )
    done = deploy(config)
    adapter = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=scene_seed)
    cubes = adapter.scene_cubes()
    instructed = int(adapter.vars["object"][0])
    assert done.robot == "franka" and done.report.final_mode == "normal" and not done.report.interventions
    assert done.verdict.line.startswith("VERDICT:")
    closest = float(done.verdict.line.split("closest ")[1].split(" cm")[0])
    assert closest <= 8.0, done.verdict.line  # from ~33 cm at the ready pose; 1.7-5.2 cm measured, tolerance 3 cm
    ee = np.asarray(done.facts["ee_pos"])
    distances = np.linalg.norm(cubes[:, :2] - ee[:2], axis=1)
    assert np.argmin(distances) == instructed, (distances, instructed)  # above the named cube, not another


def test_a_touch_point_below_the_workspace_floor_is_refused_before_connecting_naming_the_flag(capsys):
    from policyforge.cli import main

    code = main(["deploy", str(TOUCH_STUDENT), "--peer", "sim", "--scene-seed", "0"])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "error --scene-seed: (0.601, 0.114, 0.03) is outside the franka workspace box" in printed
    assert "lower its floor with --workspace-floor" in printed and "starting the simulated" not in printed
    assert main(["deploy", str(TOUCH_STUDENT), "--peer", "sim", "--workspace-floor", "nan"]) == 2
    assert "--workspace-floor: must be a height in [-0.2, 0.8) m" in " ".join(capsys.readouterr().out.split())
