"""Small rollout datasets of arm-instructed's touch family (task camera, 32 px): noisy scripted episodes, some of
which fail, recorded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyforge.data.collect import collect

SIZE = 32
OPTIONS = {"families": ["touch"], "episode_seconds": 3.0}
"""Touch episodes of 75 steps: the scripted expert touches within ~40."""


def record(out: Path, episodes: int, seed: int, instructions: str = "train") -> Path:
    collect(
        "arm-instructed", episodes, out, num_envs=8, seed=seed, action_noise=0.6, hesitation=0.2, cameras=["task"],
        image_size=SIZE, task_options={**OPTIONS, "instructions": instructions}, progress=False,
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def rollouts(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("rollouts") / "train", 24, seed=0)


@pytest.fixture(scope="session")
def held_out_rollouts(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("rollouts") / "heldout", 8, seed=50, instructions="heldout_combination")
