"""Typed configs: YAML + overrides, and errors that name the field path and what is allowed."""

import dataclasses

import pytest

from policyforge.config import ConfigError, field_docs, from_dict, load, to_dict
from policyforge.sims import RandomizationConfig, SimConfig


@dataclasses.dataclass
class RunConfig:
    """A run: a simulation and a seed."""

    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    """The simulation."""
    seed: int = 0
    """Random seed."""


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("sim:\n  task: arm-reach\n  num_envs: 8\n  randomization:\n    friction: [0.5, 1.5]\nseed: 3\n")
    cfg = load(RunConfig, path, ["sim.num_envs=32", "sim.task_options.control_mode=joint_delta"])
    assert cfg.sim.task == "arm-reach" and cfg.sim.num_envs == 32 and cfg.seed == 3
    assert cfg.sim.randomization.friction == (0.5, 1.5)
    assert cfg.sim.task_options == {"control_mode": "joint_delta"}
    assert from_dict(RunConfig, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    "override,message",
    [
        ("sim.num_env=4", r"sim.num_env: unknown key \(did you mean 'num_envs'\?\); allowed: task, backend"),
        ("sim.num_envs=many", r"sim.num_envs: expected an integer, got 'many'"),
        ("sim.num_envs=0", r"sim.num_envs: must be ≥ 1, got 0"),
        ("sim.backend=bullet", r"sim.backend: got 'bullet'; allowed: 'mujoco'"),
        ("sim.randomization.friction=[1.5, 0.5]", r"sim.randomization.friction: must be \[low, high\]"),
        ("sim.randomization.friction=[1.0]", r"sim.randomization.friction: expected 2 values, got 1"),
        ("seed", r"seed: an override must look like key=value"),
    ],
)
def test_bad_values_fail_with_the_field_path(override, message):
    with pytest.raises(ConfigError, match=message):
        load(RunConfig, None, [override])


def test_every_field_is_documented():
    for cls in (SimConfig, RandomizationConfig, RunConfig):
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(field_docs(cls)) == names, cls


def test_every_task_option_is_documented():
    from policyforge.sims import TASKS

    for task in TASKS.values():
        docs = {}
        for cls in reversed(task.config_class.__mro__[:-1]):
            docs.update(field_docs(cls))
        assert set(docs) == {f.name for f in dataclasses.fields(task.config_class)}, task.name


def test_exponent_floats_without_a_dot_are_numbers():
    cfg = load(RunConfig, None, ["sim.randomization.friction=[5e-1, 1e0]"])
    assert cfg.sim.randomization.friction == (0.5, 1.0)
