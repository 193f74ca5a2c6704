"""GAE against values computed by hand."""

import torch

from policyforge.algos.gae import gae


def test_gae_matches_hand_computed_values():
    gamma, lam = 0.9, 0.8
    # one env, three steps; the episode ends (done) after step 1, so step 1 bootstraps nothing
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    dones = torch.tensor([[False], [True], [False]])
    next_value = torch.tensor([2.0])
    # deltas: δ2 = 3 + 0.9·2 − 1.5 = 3.3;  δ1 = 2 + 0 − 1 = 1;  δ0 = 1 + 0.9·1 − 0.5 = 1.4
    # advantages: A2 = 3.3;  A1 = δ1 = 1 (no propagation across the end);  A0 = 1.4 + 0.72·1 = 2.12
    advantages, returns = gae(rewards, values, dones, next_value, gamma, lam)
    torch.testing.assert_close(advantages, torch.tensor([[2.12], [1.0], [3.3]]))
    torch.testing.assert_close(returns, advantages + values)


def test_gae_with_lambda_one_is_the_discounted_return_minus_value():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    values = torch.zeros(3, 2)
    dones = torch.zeros(3, 2, dtype=torch.bool)
    advantages, _ = gae(rewards, values, dones, torch.tensor([10.0, 0.0]), gamma=0.5, lam=1.0)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1 + 0.5 + 0.25 + 1.25, 1 + 0.5 + 2.5, 1 + 5.0]))
    torch.testing.assert_close(advantages[:, 1], torch.tensor([0.5 + 0.5, 1 + 1.0, 2.0]))
