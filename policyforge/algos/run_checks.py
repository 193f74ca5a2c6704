"""Checks across the sections of a run config: settings valid one by one that cannot work together, refused at
load with the field to change (found by the config property test, tests/test_config_properties.py).
`RunConfig.__post_init__` calls `check_sections`; each algorithm registers its own (`AlgorithmEntry.check`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from policyforge.config import check

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig


def check_sections(config: RunConfig) -> None:
    """Raise `ConfigError` naming a field whose value the other sections rule out."""
    config.algo.entry.check(config)
    image_readers = config.policy.reads_images or config.algo.reads_images or config.sim.reward_model.enabled
    if config.sim.image.cameras and not image_readers:
        why = (
            f"the {config.policy.tag} policy reads states only: use a diffusion, flow or VLA policy, or no cameras "
            "(or a reward model that reads them: sim.reward_model.path)"
        )
        check(False, "sim.image.cameras", why)
    views = getattr(getattr(config.policy, "encoder", None), "views", [])
    if views:
        cameras = config.sim.image.cameras
        check(
            max(views) < len(cameras),
            "policy.encoder.views",
            f"sim.image.cameras has {len(cameras)} cameras (indices 0..{len(cameras) - 1}), got views {views}",
        )
    if config.sim.image.cameras and config.sim.image.render == "on_request" and config.policy.reads_images:
        why = f"the {config.policy.tag} policy reads the images every step: give sim.image.render=every_step"
        check(False, "sim.image.render", why)
    if config.policy.pretrained_part:
        check(
            bool(config.init_policy),
            "init_policy",
            f"a {config.policy.tag} policy needs its {config.policy.pretrained_part}'s weights: set init_policy to "
            f"the {config.policy.pretrained_part}'s run directory",
        )
