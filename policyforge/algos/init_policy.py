"""Start a policy from another run's weights (`init_policy`): the whole policy, or a residual policy's base."""

from __future__ import annotations

from pathlib import Path

from policyforge.algos import checkpoint
from policyforge.config import ConfigError
from policyforge.policies.base import Policy
from policyforge.policies.residual import ResidualPolicy

_RL_ONLY = ("noise_net.",)
"""Modules only RL uses (ReinFlow's noise network): a pre-trained policy may have one or not."""


def load_initial_policy(policy: Policy, source: str) -> None:
    """Load init_policy's weights: the whole policy, or a residual policy's base from a run of the base."""
    path = Path(source)
    if not path.exists():
        raise ConfigError("init_policy", f"{path} does not exist; give a run directory or a checkpoint file")
    weights = checkpoint.load(path)["algo"]["policy"]
    whole = not isinstance(policy, ResidualPolicy) or any(key.startswith("base.") for key in weights)
    target = policy if whole else policy.base
    frozen_steps = getattr(target, "frozen_steps", 0)
    if frozen_steps:  # load the full network, then freeze a copy of *these* weights for the early steps
        target.freeze_early_steps(0)
    own = target.state_dict()
    weights = {k: v for k, v in weights.items() if k in own or not k.startswith(_RL_ONLY)}
    try:
        missing, unexpected = target.load_state_dict(weights, strict=False)
        mismatched = [k for k in missing if not k.startswith(_RL_ONLY)] + unexpected
        if mismatched:
            raise RuntimeError(f"keys {mismatched[:4]}")
    except RuntimeError as err:
        raise ConfigError(
            "init_policy",
            f"{path} holds a different architecture than this config describes ({err}); copy the policy "
            "section of the run you start from",
        ) from err
    if frozen_steps:
        target.freeze_early_steps(frozen_steps)
