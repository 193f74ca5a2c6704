"""RPD's pull toward the teacher (`algo.distill_loss`): the student's own `bc_loss`, or the squared error of its
deterministic action (Jülg et al. 2025), which moves the actions and leaves a Gaussian's std to PPO."""

import pytest
import torch

from policyforge.algos.distill import DistillConfig, teacher_loss
from policyforge.config import ConfigError, from_dict
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy


def test_the_action_error_pulls_the_actions_and_leaves_the_std_alone():
    torch.manual_seed(0)
    policy = GaussianPolicy(6, 3, GaussianConfig(hidden=[16], init_std=0.1))
    obs, labels = {"policy": torch.randn(64, 6)}, torch.rand(64, 1, 3) * 2 - 1
    error = teacher_loss(policy, "action_mse")(obs, labels)
    torch.testing.assert_close(error, (policy.act(obs) - labels).square().mean())
    error.backward()
    assert policy.log_std.grad is None or not policy.log_std.grad.any()
    assert policy.net[-1].weight.grad.abs().sum() > 0
    policy.zero_grad()
    teacher_loss(policy, "bc_loss")(obs, labels).backward()  # the log-likelihood also moves the std
    assert policy.log_std.grad.abs().sum() > 0


def test_an_unknown_pull_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="distill_loss"):
        from_dict(DistillConfig, {"teacher": "runs/x", "mode": "rpd", "distill_loss": "mse"})
