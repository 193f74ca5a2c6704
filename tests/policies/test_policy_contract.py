"""The policy contract, checked for every policy class: act is sample without noise, log_prob rescores a
sampled chain exactly, gradients reach the trainable parameters only, exports reproduce act."""

import pytest
import torch

from policyforge.policies.export import export, max_export_error
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy

OBS_DIM, ACTION_DIM, BATCH = 7, 3, 64


def gaussian(**overrides) -> GaussianPolicy:
    return GaussianPolicy(OBS_DIM, ACTION_DIM, GaussianConfig(hidden=[32, 32], **overrides))


POLICIES = {
    "gaussian": lambda: gaussian(),
    "gaussian_tanh": lambda: gaussian(squash=True, state_dependent_std=True, init_std=0.5),
}


def observations(policy) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    obs = {"policy": 3.0 + 2.0 * torch.randn(BATCH, OBS_DIM)}
    policy.update_normalizer(obs)  # non-trivial normaliser statistics
    return obs


@pytest.fixture(params=list(POLICIES))
def policy(request):
    torch.manual_seed(1)
    return POLICIES[request.param]()


def test_act_is_sample_without_noise(policy):
    obs = observations(policy)
    assert torch.equal(policy.act(obs), policy.sample(obs, noise_scale=0.0).action)
    noisy = policy.sample(obs).action
    assert noisy.shape == (BATCH, 1, ACTION_DIM) and not torch.allclose(noisy, policy.act(obs))
    assert noisy.abs().max() <= 1.0


def test_log_prob_rescores_the_sampled_chain(policy):
    obs = observations(policy)
    sample = policy.sample(obs)
    log_prob, entropy = policy.log_prob(obs, sample.chain)
    torch.testing.assert_close(log_prob, sample.log_prob, rtol=1e-5, atol=1e-5)
    assert log_prob.shape == entropy.shape == (BATCH,) and torch.isfinite(log_prob).all()


def test_gradients_reach_trainable_parameters_only(policy):
    obs = observations(policy)
    sample = policy.sample(obs)
    log_prob, _ = policy.log_prob(obs, sample.chain.detach())
    log_prob.sum().backward()
    for name, parameter in policy.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert all(not buffer.requires_grad for buffer in policy.buffers())


def test_bc_loss_fits_demonstrations(policy):
    torch.manual_seed(2)
    obs = {"policy": torch.randn(256, OBS_DIM)}
    target = torch.tanh(obs["policy"][:, :ACTION_DIM])[:, None, :] * 0.8
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    first = float(policy.bc_loss(obs, target))
    for _ in range(300):
        loss = policy.bc_loss(obs, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss) < first - 1.0
    assert (policy.act(obs) - target).abs().mean() < 0.1


@pytest.mark.parametrize("fmt,suffix", [("onnx", ".onnx"), ("torchscript", ".pt")])
def test_export_reproduces_act(policy, fmt, suffix, tmp_path):
    obs = observations(policy)
    path = export(policy, OBS_DIM, tmp_path / f"policy{suffix}", fmt, {"task": "test"})
    assert path.with_suffix(".json").exists()
    fresh = 3.0 + 2.0 * torch.randn(500, OBS_DIM)
    assert max_export_error(policy, path, fresh) <= 1e-5
    assert max_export_error(policy, path, obs["policy"][:1]) <= 1e-5  # batch size 1 too
