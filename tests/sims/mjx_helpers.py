"""Native/MJX environment pairs for the MJX tests, built once per session (MJX compiles once)."""

from __future__ import annotations

import dataclasses

from policyforge.sims import SimConfig, make_env

_ENVS: dict[str, object] = {}


def env_pair(task: str, num_envs: int = 8, **sim_options):
    """(native, mjx) envs of the same config, built once per test session (MJX compiles once)."""
    key = f"{task}/{num_envs}/{sim_options}"
    if key not in _ENVS:
        config = SimConfig(task=task, num_envs=num_envs, **sim_options)
        _ENVS[key] = (make_env(config, seed=0), make_env(dataclasses.replace(config, backend="mjx"), seed=0))
    return _ENVS[key]
