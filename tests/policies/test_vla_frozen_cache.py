"""What a VLA's frozen parts compute is computed once (PPO's epochs, BC's dataset) and gives exactly what
recomputing it gives: the same log-probabilities, losses and gradients."""

import numpy as np
import pytest
import torch

from policyforge.policies.base import IMAGE_FEATURES_KEY, IMAGE_KEY
from policyforge.policies.vla import FROZEN_PREFIX_KEY, PREFIX_KEY, VisionConfig
from tests.policies.test_vla import observations, tiny_vla

TEXTS = ["lift the red cube", "push the blue cube to the left zone", "touch the green cube", "lift the blue cube"]


def _gradients(policy, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    policy.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("setup", ["frozen_backbone", "frozen_backbone_and_early_steps", "frozen_vision"])
def test_precomputed_frozen_parts_rescore_exactly(setup):
    torch.manual_seed(0)
    backbone_frozen = setup != "frozen_vision"
    policy = tiny_vla(vision=VisionConfig(), freeze_backbone=backbone_frozen)  # pretrained EfficientNet: frozen
    if setup == "frozen_backbone_and_early_steps":
        policy.freeze_early_steps(1)
    obs = observations(policy, TEXTS)
    policy.update_normalizer(obs)  # after the frozen copy was made: its normaliser lags behind
    with torch.no_grad():  # as a rollout samples
        sample = policy.sample(obs)
    cached = policy.precompute_frozen(obs)

    assert IMAGE_KEY not in cached, "the images are replaced, not kept beside"
    assert (PREFIX_KEY in cached) == backbone_frozen and (IMAGE_FEATURES_KEY in cached) != backbone_frozen
    if setup == "frozen_backbone_and_early_steps":
        assert not torch.equal(cached[PREFIX_KEY], cached[FROZEN_PREFIX_KEY]), "the frozen steps' own prefix"
    assert not any(value.requires_grad for value in cached.values())
    direct, direct_entropy = policy.step_log_probs(obs, sample.chain)
    from_cache, cached_entropy = policy.step_log_probs(cached, sample.chain)
    torch.testing.assert_close(from_cache, direct, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached_entropy, direct_entropy)

    losses = []
    for source in (obs, cached):
        torch.manual_seed(1)
        losses.append(policy.bc_loss(source, sample.action))
    torch.testing.assert_close(losses[1], losses[0], atol=1e-6, rtol=1e-5)
    expected = _gradients(policy, policy.log_prob(obs, sample.chain)[0].sum())
    got = _gradients(policy, policy.log_prob(cached, sample.chain)[0].sum())
    assert set(got) == set(expected) and expected, "gradients reach the same parameters"
    assert all(name.startswith(("denoiser.", "noise_net.")) for name in got) == backbone_frozen
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, atol=1e-5, rtol=1e-4)


def test_nothing_is_precomputed_for_a_trained_image_encoder():
    for policy in (tiny_vla(), tiny_vla(vision=VisionConfig(train_pretrained=True))):  # scratch stem, fine-tuned
        obs = observations(policy, TEXTS[:2])
        assert policy.precompute_frozen(obs) is obs
        assert policy.frozen_image_features(obs[IMAGE_KEY]) is None


def test_bc_trains_on_each_frames_features_computed_once(tmp_path):
    from policyforge.algos.bc import DemoWindows
    from policyforge.data.dataset import Demonstrations, DemoWriter

    policy = tiny_vla(vision=VisionConfig())
    height, width = policy.image_shape[1:3]
    writer = DemoWriter(tmp_path / "demos", 25, 5, 3, ["front", "wrist"], (height, width), task_name="arm-instructed")
    rng = np.random.default_rng(0)
    for text in TEXTS[:2]:
        images = {camera: rng.integers(0, 256, (6, height, width, 3), dtype=np.uint8) for camera in ("front", "wrist")}
        states, actions = rng.normal(size=(6, 5)), rng.uniform(-1, 1, (6, 3))
        writer.add_episode(states, actions, np.zeros(6), np.arange(6) == 5, np.zeros(6, bool), images, text)
    windows = DemoWindows(Demonstrations(tmp_path / "demos"), "policy", 1, 4, ["front", "wrist"], instructions=True)
    policy.update_normalizer({"policy": windows.states})
    losses, shapes = [], []
    for use_features in (False, True):
        if use_features:
            windows.use_image_features(policy)
        torch.manual_seed(2)
        obs, actions = windows.sample(8)
        shapes.append({key: tuple(value.shape) for key, value in obs.items()})
        losses.append(policy.bc_loss(obs, actions))
    assert IMAGE_KEY in shapes[0] and IMAGE_FEATURES_KEY in shapes[1] and IMAGE_KEY not in shapes[1]
    assert shapes[1][IMAGE_FEATURES_KEY][:3] == (8, 1, 2), "[B, T_o, V, C, h, w]"
    torch.testing.assert_close(losses[1], losses[0], atol=1e-6, rtol=1e-5)
