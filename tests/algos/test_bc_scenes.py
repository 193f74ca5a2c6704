"""BC's simulated scenes (`algo.scene_frames`, algos/scenes.py): fresh layouts, each labelled by its privileged
state, the same ones again on a resumed run, shaped as BC's windows, and a loss the policy learns from."""

import pytest
import torch

from policyforge.algos.bc import BCConfig
from policyforge.algos.run_config import EVAL_SEED_OFFSET
from policyforge.algos.scenes import ExpertMotion, SceneFrames
from policyforge.config import ConfigError
from policyforge.policies.base import EnvSpec
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.vla import VisionConfig, VLAConfig
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import ImageConfig

SIM = SimConfig(task="arm-instructed", image=ImageConfig(cameras=["task", "wrist"], width=32, height=32))
NAMED_CUBE = slice(-12, -10)
"""(x, y) of the instructed cube in arm-instructed's critic observation."""


def scene_policy():
    env = make_env(SIM)
    config = VLAConfig(
        chunk=ChunkConfig(n_obs_steps=2, horizon=4, act_steps=2),
        width=32, heads=2, prefix_layers=1, expert_layers=1, time_dim=16, steps=4,
        vision=VisionConfig(encoder="scratch", scratch_channels=8),
        privileged_aux_weight=1.0,
    )  # fmt: skip
    policy = config.build(EnvSpec(env.obs_shapes, env.action_dim))
    env.close()
    return policy


def test_scenes_are_fresh_layouts_labelled_by_their_privileged_state():
    policy = scene_policy()
    scenes = SceneFrames(SIM, 70, policy, seed=0)  # two batches of resets
    assert len(scenes) == 70
    assert set(scenes.obs) == {"policy", "image", "instruction", "critic"}
    named = scenes.obs["critic"][:, NAMED_CUBE]
    assert len(torch.unique(named, dim=0)) == 70, "every scene its own layout"
    assert torch.equal(SceneFrames(SIM, 70, policy, seed=0).obs["image"], scenes.obs["image"]), "a resumed run's"
    assert not torch.equal(SceneFrames(SIM, 70, policy, seed=1).obs["critic"], scenes.obs["critic"])
    evaluation = make_env(SIM, seed=EVAL_SEED_OFFSET)  # a run of seed 0 evaluates from these layouts
    first = evaluation.reset(seed=EVAL_SEED_OFFSET)["critic"][0, NAMED_CUBE]
    evaluation.close()
    assert not (named == first).all(dim=1).any(), "no evaluation layout among the scenes"

    batch = scenes.sample(16)
    assert batch["policy"].shape == (16, 2, scenes.obs["policy"].shape[1])
    assert batch["image"].shape == (16, 2, 2, 32, 32, 3)
    assert torch.equal(batch["image"][:, 0], batch["image"][:, 1]), "the one frame fills the history"
    assert batch["critic"].ndim == 2 and batch["instruction"].ndim == 2


def test_the_scene_loss_trains_what_reads_the_scene_and_not_the_action_expert():
    policy = scene_policy().train()
    scenes = SceneFrames(SIM, 16, policy, seed=0)
    policy.update_normalizer({"policy": scenes.obs["policy"], "critic": scenes.obs["critic"]})
    policy.privileged_loss(scenes.sample(8)).backward()

    def reached(prefix: str) -> bool:
        grads = [p.grad for name, p in policy.named_parameters() if name.startswith(prefix) and p.requires_grad]
        return bool(grads) and all(g is not None and g.abs().sum() > 0 for g in grads)

    assert reached("encoder.vision.") and reached("privileged_head.") and reached("encoder.film_out.")
    assert all(p.grad is None for name, p in policy.named_parameters() if name.startswith("denoiser."))


def test_scenes_with_motion_show_the_arm_at_work_and_not_always_on_the_named_cube():
    policy = scene_policy()
    still = SceneFrames(SIM, 256, policy, seed=0).obs["critic"]
    moved = SceneFrames(SIM, 256, policy, seed=0, motion_steps=150).obs["critic"]
    assert torch.equal(SceneFrames(SIM, 256, policy, seed=0, motion_steps=150).obs["critic"], moved), "resumable"

    def tcp_and_cubes(critic: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tcp = critic[:, -12:-9] - critic[:, -3:]  # the named cube − (cube − TCP)
        return tcp, critic[:, 22:31].reshape(-1, 3, 3)

    home, _ = tcp_and_cubes(still)
    tcp, cubes = tcp_and_cubes(moved)
    assert (tcp - home).norm(dim=1).gt(0.05).float().mean() > 0.5, "the arm has left its home in most scenes"
    gap = (cubes[:, :, :2] - tcp[:, None, :2]).norm(dim=2)  # [N, 3] TCP to each cube, on the table's plane
    at_cube = gap.min(dim=1).values < 0.03
    named = torch.argmax(moved[:, -18:-15], dim=1)  # the one-hot object id
    on_named = gap.argmin(dim=1) == named
    assert at_cube.sum() > 30, "the expert reaches cubes"
    share = on_named[at_cube].float().mean()
    assert 0.2 < share < 0.8, f"the TCP at the instructed cube in {share:.0%} of the scenes where it is at one"


def test_scene_motion_needs_scenes():
    with pytest.raises(ConfigError, match=r"scene_motion_steps.*scene_frames > 0"):
        BCConfig(dataset="d", scene_motion_steps=10)
    with pytest.raises(ConfigError, match=r"scene_motion_steps: task 'pendulum-swingup' has no scripted expert"):
        ExpertMotion(SimConfig(task="pendulum-swingup", num_envs=2), 2, 5, seed=0)
