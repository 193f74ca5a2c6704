"""Start a policy from another run's weights (`init_policy`): each policy class loads what it can start from
(`Policy.load_pretrained`: the whole policy, or a residual policy's base from a run of the base)."""

from __future__ import annotations

from pathlib import Path

from policyforge.algos import checkpoint
from policyforge.config import ConfigError
from policyforge.policies.base import Policy


def load_initial_policy(policy: Policy, source: str) -> None:
    """Load init_policy's weights into `policy`; ConfigError on `init_policy` if they do not fit it."""
    path = Path(source)
    if not path.exists():
        raise ConfigError("init_policy", f"{path} does not exist; give a run directory or a checkpoint file")
    try:
        policy.load_pretrained(checkpoint.load(path)["algo"]["policy"])
    except ValueError as err:
        raise ConfigError(
            "init_policy",
            f"{path} holds a different architecture than this config describes ({err}); copy the policy "
            "section of the run you start from",
        ) from err
