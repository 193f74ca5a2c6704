"""Checks across the sections of a run config: settings valid one by one that cannot work together, refused at
load with the field to change (found by the config property test, tests/test_config_properties.py).
`RunConfig.__post_init__` calls `check_sections`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyforge.config import check_in
from policyforge.policies.chunked import MIN_STD

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def check_sections(config: RunConfig) -> None:
    """Raise `ConfigError` naming a field whose value the other sections rule out."""
    if config.algo == "ppo":
        _check_ppo(config)


def _check_ppo(config: RunConfig) -> None:
    ppo, decisions = config.ppo, config.sim.num_envs * config.ppo.rollout_steps
    check_in(ppo.minibatches, "ppo.minibatches", f"[1, sim.num_envs × ppo.rollout_steps={decisions}]")
    if config.policy_class == "diffusion":
        why = "PPO rescores log-probabilities of steps with exactly this std: DDIM's last (every one at eta 0)"
        check_in(config.diffusion.min_std, "diffusion.min_std", f"[{MIN_STD}, 1]", why)
    if config.policy_class in ("diffusion", "flow") and ppo.trainable_steps is not None:
        steps_field = "diffusion.inference_steps" if config.policy_class == "diffusion" else "flow.steps"
        steps = config.diffusion.inference_steps if config.policy_class == "diffusion" else config.flow.steps
        check_in(ppo.trainable_steps, "ppo.trainable_steps", f"[1, {steps_field}={steps}]", "or null: every step")
