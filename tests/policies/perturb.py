"""Shared by the frozen-step tests of every policy class: the chain a policy draws with fixed noise, before and after
its trainable parameters move."""

import torch


def chains_before_and_after_a_step(policy, obs, seed: int = 5, scale: float = 0.3):
    """`policy.sample(obs).chain` [B, K + 1, H, A] drawn with noise seed `seed`, before and after every trainable
    parameter moves by `scale` · N(0, 1) (in place)."""

    def chain() -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.no_grad():
            return policy.sample(obs).chain

    before = chain()
    with torch.no_grad():
        for parameter in policy.parameters():
            if parameter.requires_grad:
                parameter.add_(scale * torch.randn_like(parameter))
    return before, chain()
