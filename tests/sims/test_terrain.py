"""Rough ground for the quadruped (`sim.task_options.terrain_tiles` + `sim.randomization.terrain_roughness`): tiles
raised per env within the range and redrawn on reset, unraised tiles are the flat floor, raised ones tilt the
standing robot, both backends agree, roughness without tiles is refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policyforge.config import ConfigError
from policyforge.sims.config import RandomizationConfig, SimConfig
from policyforge.sims.make import make_env
from policyforge.sims.parity import oscillating_actions
from policyforge.sims.task import NumpySampler
from policyforge.sims.xmath import projected_gravity

TILES = {"terrain_tiles": 6}


def rough(roughness: float | None, num_envs: int = 3, tiles: dict | None = None, **sim):
    randomization = RandomizationConfig(terrain_roughness=roughness)
    options = TILES if tiles is None else tiles
    config = SimConfig(task="quadruped-walk", num_envs=num_envs, task_options=options, randomization=randomization)
    env = make_env(SimConfig(**{**config.__dict__, **sim}), seed=0)
    env.reset(seed=0)
    return env


def tile_tops(env) -> np.ndarray:
    """[N, T] heights of the terrain tiles' top faces, m."""
    ids = env.randomizer.terrain
    return env.batch.expand("geom_pos")[:, ids, 2] + env.task.model.geom_size[ids, 2]


def test_tiles_are_raised_per_env_within_the_roughness_and_redrawn_on_reset():
    env = rough(0.08)
    tops = tile_tops(env)
    assert tops.shape == (3, 32) and tops.min() >= 0.0 and tops.max() <= 0.08
    assert tops.std(axis=1).min() > 0.015  # uniform on [0, 0.08]: 0.023
    assert np.abs(tops[0] - tops[1]).max() > 0.02  # each env its own ground
    np.testing.assert_allclose(tops, env.vars["dr_terrain"], atol=1e-12)  # in the task variables
    env.reset_envs([1])
    after = tile_tops(env)
    np.testing.assert_array_equal(after[[0, 2]], tops[[0, 2]])
    assert np.abs(after[1] - tops[1]).max() > 0.02


def dropped_at(env, xy: tuple[float, float], lift: float = 0.06):
    """`env` reset with its quadrupeds `lift` m above the start's height at `xy` (off the start pad)."""
    initial = env.task.reset(NumpySampler(np.random.default_rng(1)), env.num_envs, np)
    initial.qpos[:, :2], initial.qpos[:, 2] = xy, initial.qpos[:, 2] + lift
    env.reset_to(initial)
    return env


def standing_gravity(env, steps: int = 50) -> np.ndarray:
    """Gravity in each trunk's frame [N, 3] after standing still for `steps` control steps."""
    for _ in range(steps):
        env.step(torch.zeros(env.num_envs, 12))
    return projected_gravity(env.state.phys["qpos"][:, 3:7], np)


def test_unraised_tiles_are_the_flat_floor_and_raised_ones_tilt_the_robot():
    """Each foot on its own tile (the robot over a corner where four meet)."""
    corner = (1.0, 1.0)
    flat = standing_gravity(dropped_at(rough(None, tiles={}), corner))
    unraised, raised = (standing_gravity(dropped_at(rough(h), corner)) for h in (None, 0.06))

    def tilt_from_flat(gravity):
        return np.arccos(np.clip(np.sum(gravity * flat, axis=1), -1.0, 1.0))

    assert tilt_from_flat(unraised).max() < 0.002, tilt_from_flat(unraised)
    assert tilt_from_flat(raised).min() > 0.01, tilt_from_flat(raised)


def test_the_start_stays_flat():
    """Tiles under a standing robot's feet at the start are never raised: it starts standing, not inside a tile."""
    flat, on_rough = (standing_gravity(rough(h), steps=10) for h in (None, 0.2))
    assert np.abs(flat - on_rough).max() < 1e-9
    names = [rough(None).task.model.geom(i).name for i in range(rough(None).task.model.ngeom)]
    assert sum(name.startswith("start_pad_") for name in names) == 4  # 6 × 6 tiles of 0.5 m: the four at the centre


def test_roughness_without_tiles_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"sim.randomization.terrain_roughness: .*terrain_tiles"):
        rough(0.05, tiles={})
    with pytest.raises(ConfigError, match="terrain_roughness"):
        RandomizationConfig(terrain_roughness=0.5)


@pytest.mark.slow
def test_rough_ground_runs_the_same_on_mjx():
    """Quadrupeds dropped onto a raised tile (each env its own height) move alike on both backends."""
    move_then_stand = [*oscillating_actions(15, 4, 12, 0.3), *np.zeros((25, 4, 12))]
    options = {"terrain_tiles": 3, "terrain_tile_size": 0.8}  # room for the robot's drift on one tile
    randomization = RandomizationConfig(terrain_roughness=0.05)
    envs = [
        make_env(
            SimConfig(task="quadruped-walk", num_envs=4, task_options=options, randomization=randomization, backend=b)
        )
        for b in ("native", "mjx")
    ]
    initial = envs[0].task.reset(NumpySampler(np.random.default_rng(1)), 4, np)
    initial.vars.update(envs[0].randomizer.sample(NumpySampler(np.random.default_rng(2)), 4, np))
    initial.qpos[:, :2], initial.qpos[:, 2] = (0.8, 0.8), initial.qpos[:, 2] + 0.05  # over the corner tile
    qpos = []
    for backend, env in zip(("native", "mjx"), envs, strict=True):
        env.reset_to(initial)
        for action in move_then_stand:
            env.step(torch.as_tensor(action))
        qpos.append(np.array(env.phys["qpos"] if backend == "native" else env.state.data.qpos))
    tile = envs[0].task.model.geom("terrain_8").id  # the corner tile (0.8, 0.8)
    assert np.abs(envs[0].batch.expand("geom_pos")[:, tile, 2] + 0.1 - initial.vars["dr_terrain"][:, -1]).max() < 1e-12
    # float32 MJX after a 5 cm drop: measured 4e-3 at worst, 1e-5 typical
    assert np.abs(qpos[0] - qpos[1]).max() < 1e-2, np.abs(qpos[0] - qpos[1]).max()
    flat = make_env(SimConfig(task="quadruped-walk", num_envs=4))
    flat.reset_to(initial._replace(vars={k: v for k, v in initial.vars.items() if not k.startswith("dr_")}))
    for action in move_then_stand:
        flat.step(torch.as_tensor(action))
    raised_by, heights = qpos[1][:, 2] - flat.phys["qpos"][:, 2], initial.vars["dr_terrain"][:, -1]
    assert np.ptp(heights) > 0.01 and np.abs(raised_by - heights).max() < 0.01, (raised_by, heights)  # on its tile
