"""policyforge/bench/vla_estimate.py: the probe tells an estimate that follows the state from one that reads only
the images, and the true-state stand-in reaches the expert in place of the head's estimate."""

import numpy as np
import torch

from policyforge.bench import vla_estimate
from policyforge.data.dataset import DemoWriter
from policyforge.policies.vla import VisionConfig, VLAConfig, VLAPolicy
from policyforge.policies.vla_networks import pooled
from tests.policies.test_vla import CHUNK, IMAGE_SHAPE, TINY, observations

CRITIC = 16


def estimating_vla(**overrides) -> VLAPolicy:
    torch.manual_seed(0)
    vision = VisionConfig(encoder="scratch", scratch_channels=8)
    config = VLAConfig(
        chunk=CHUNK, **TINY, vision=vision, expert="mlp", expert_hidden=[32, 32], estimate_token=True, **overrides
    )
    return VLAPolicy(5, 3, config, IMAGE_SHAPE, privileged_dim=CRITIC).eval()


def test_the_probe_sees_an_estimate_follow_the_state_only_when_the_prefix_reads_it():
    texts = ["lift the red cube", "touch the blue cube", "lift the green cube", "push the red cube to the left zone"]
    critic = torch.randn(len(texts), CRITIC)
    for prefix_state in (True, False):
        policy = estimating_vla(prefix_state=prefix_state)
        obs = observations(policy, texts)
        moved = vla_estimate.follows(policy, obs, critic, step=20)
        assert moved["images_shuffled_cm"] > 0.1 and moved["error_cm"] > 0
        assert (moved["state_shuffled_cm"] > 0.1) == prefix_state, moved


def test_the_true_state_stands_in_for_the_head_estimate():
    policy = estimating_vla(prefix_state=False)
    obs = observations(policy, ["lift the red cube", "touch the blue cube"])
    truth = vla_estimate.TrueState()
    policy.privileged_head, truth.state = truth, torch.randn(2, CRITIC)
    with torch.no_grad():
        readout = policy.encode(obs)[:, -1, :-1]
        state = policy.encoder.normalizer(obs["policy"][:, None]).flatten(1)
        assert torch.allclose(readout, policy.readout_proj(torch.cat([state, truth.state], dim=1)))
        before = policy.act(obs)
        truth.state = truth.state + 1.0
        assert not torch.allclose(policy.act(obs), before), "the expert acts on the stand-in"


def test_the_demonstration_probe_measures_the_named_cube_on_each_episode_step(tmp_path):
    writer = DemoWriter(
        tmp_path / "demos", 25, 5, 3, ["task", "wrist"], (32, 32), "arm-instructed", env_state_dim=CRITIC
    )
    generator = np.random.default_rng(0)
    rest = (np.zeros(30), np.arange(30) == 29, np.zeros(30, bool))
    for _ in range(2):
        images = {c: generator.integers(0, 256, (30, 32, 32, 3), dtype=np.uint8) for c in ("task", "wrist")}
        env_state = generator.normal(size=(30, CRITIC))
        writer.add_episode(
            generator.normal(size=(30, 5)), np.zeros((30, 3)), *rest, images, "lift the red cube", env_state
        )
    policy = estimating_vla(prefix_state=False)
    rows = vla_estimate.on_demonstrations(policy, tmp_path / "demos", ["task", "wrist"])
    assert [row["step"] for row in rows] == [0, 20], "steps past every episode's end are left out"
    windows = vla_estimate.Windows(vla_estimate.Demonstrations(tmp_path / "demos"), ["task", "wrist"], [0, 1], 4)
    obs, _ = windows.batch(torch.tensor([20, 50]))
    with torch.no_grad():
        estimate = policy.privileged_head(pooled(policy.encode(obs)[:, :-1]))
    truth = windows.env_states[[20, 50]]  # the normaliser is the identity before BC fits it
    assert abs(rows[1]["error_cm"] - 100 * float((estimate - truth)[:, -12:-9].norm(dim=1).mean())) < 1e-3
