"""A reward model watching a deployment (`real_robot/success_detector.py`): the twin it scores shows what the
simulator would show at the same joints, it scores on its own thread at its period whatever the loop does, and on
the Franka peer a reward model trained here sees a distilled touch student make progress towards its cube."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.real_robot.arm_adapter import ArmAdapter
from policyforge.real_robot.launch import DeployConfig, deploy
from policyforge.real_robot.robot import RobotState
from policyforge.real_robot.success_detector import SuccessDetector
from policyforge.rewards.learned import LearnedReward, LearnedRewardConfig
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import ImageConfig
from policyforge.sims.task import NumpySampler
from tests.real_robot.conftest import ASSETS

TOUCH = {"families": ["touch"], "instructions": "train"}
TOUCH_STUDENT = ASSETS / "arm-instructed-touch-student.onnx"
TOUCH_REWARD = ASSETS / "arm-instructed-reward-model"
"""The reward model of arm-instructed's four families (task and wrist cameras, 64 px) trained by
configs/reward-model.yaml on 640 noisy scripted rollouts (BENCHMARKS.md, "Reward models": its held-out figures);
its run directory's config.yaml and best.pt."""


class Recorder(LearnedReward):
    """A learned reward model that also keeps the frames it is shown."""

    def __init__(self) -> None:
        super().__init__(LearnedRewardConfig(image_channels=8, image_features=8, hidden=8), ["task", "wrist"], 48, 48)
        self.frames: list[torch.Tensor] = []

    def _score(self, frames, instructions):
        self.frames.append(frames.clone())
        return super()._score(frames, instructions)


def test_the_detector_scores_the_twin_as_the_simulator_renders_it_at_its_period():
    adapter = ArmAdapter("arm-instructed", TOUCH, np.zeros(3), obs_key="critic", scene_seed=7)
    sim = SimConfig(task="arm-instructed", num_envs=1, task_options=TOUCH,
                    image=ImageConfig(cameras=["task", "wrist"], width=48, height=48))  # fmt: skip
    env = make_env(sim)
    env.reset_to(adapter.task.reset(NumpySampler(np.random.default_rng(7)), 1, np))  # the twin's scene
    for _ in range(15):  # the arm somewhere else than its start
        env.step(torch.tensor([[0.6, -0.4, -0.8, 0.0, 1.0]]))
    joints = env.state.phys["qpos"][0, adapter.task.arm_qpos]
    expected = env.images([0])[0]
    detector = SuccessDetector(Recorder(), adapter, period_s=0.05)
    started = time.monotonic()
    with detector.watching():
        detector.on_tick(0, RobotState(0.0, joints, np.zeros(7)), None)
        time.sleep(0.5)
        while len(detector.model.frames) < 4 and time.monotonic() < started + 60:  # a busy machine scores slower
            time.sleep(0.05)
    elapsed = time.monotonic() - started
    shown = detector.model.frames
    # every 0.05 s at most (no faster than its period), and once at the end
    assert 4 <= len(shown) <= elapsed / 0.05 + 2 and len(detector.scores) == len(shown), (len(shown), elapsed)
    task_view, wrist_view = shown[-1][0, 0]  # the window's one frame
    assert torch.equal(task_view, expected[0]), "the twin at the measured joints is the simulator's frame"
    differ = (wrist_view != expected[1]).any(-1).float().mean()
    assert differ < 0.002, "the wrist view too, but for the fingers' edges (set open exactly; the simulator's 3 µm off)"
    summary = detector.summary()
    assert summary["scored"] == len(shown) and summary["instruction"] == adapter.task.instructions(adapter.vars)[0]
    env.close()


def test_a_reward_model_needs_an_instructed_arm():
    with pytest.raises(ConfigError, match=r"^reward_model: scores an instructed task"):
        deploy(DeployConfig(source=ASSETS / "arm-reach-policy.onnx", peer="sim", reward_model=TOUCH_REWARD))


@pytest.mark.slow
def test_on_the_franka_peer_the_reward_model_scores_the_deployment_at_its_period(peers_on_their_own_computer, capsys):
    from policyforge.cli import main

    code = main(["deploy", str(TOUCH_STUDENT), "--peer", "sim", "--seconds", "4", "--scene-seed", "5",
                 "--workspace-floor", "0.01", "--realtime", "--reward-model", str(TOUCH_REWARD), "--reward-every",
                 "0.25"])  # fmt: skip
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 0, printed
    scorings = int(printed.split("reward model (")[1].split(" scorings")[0])
    assert 12 <= scorings <= 26, printed  # 2 s to the ready pose + 4 s of policy at 0.25 s (fewer under load)
    assert "of the twin's camera at the measured joints" in printed
    assert "reward model: progress" in printed and "reward model: success" in printed
