"""Properties of the whole config tree — RunConfig with every section, each task's options, TourConfig.

Every numeric field (ints, floats, [low, high] ranges, layer-size lists), given hostile values (NaN, ±inf, 0, −1,
huge, tiny) or ordinary ones near its default, is either refused before training with a `ConfigError` that names
it, or a small run with it builds, trains and evaluates with finite losses, weights and metrics.

`python tests/test_config_properties.py` prints how many float fields accept NaN, ±inf and −1 at load (issue 18
measured 15, 29 and 15 of RunConfig's before every field was range-checked).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rich.console import Console

from policyforge.algos import runner as runner_module
from policyforge.algos.registry import AlgoConfig
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import ConfigError, Tagged, from_dict
from policyforge.policies.base import PolicyConfig
from policyforge.sims.tasks import TASKS
from policyforge.tour import TourConfig

SCALE = float(os.environ.get("POLICYFORGE_PROPERTY_SCALE", "1"))
"""Multiplies every property's example count (CI: 1; a thorough local search: e.g. 20)."""


# -- the config tree's numeric leaves ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One numeric field of a config tree."""

    path: str
    """Dotted path from the root config, e.g. `algo.gamma`, `sim.task_options.max_speed`."""
    kind: str
    """`int`, `float`, `range` ([low, high] floats), `sizes` (a list of ints), `indices` (camera indices) or
    `weights` (name → float)."""
    default: Any
    """The dataclass default (None for optional fields off by default)."""
    root: type = RunConfig
    task: str = "pendulum-swingup"
    """The sim.task whose options hold it (task options), else the base task."""
    policy: str = ""
    """The policy class whose section holds it (paths under `policy.`)."""
    algo: str = ""
    """The algorithm whose section holds it (paths under `algo.`)."""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _kind(tp: Any) -> str | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        return _kind(arms[0]) if len(arms) == 1 else None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int or tp is float:
        return tp.__name__
    if origin is tuple and args and all(a is float for a in args):
        return "range"
    if origin is list and args == (int,):
        return "sizes"
    if origin is dict and args[1:] == (float,):
        return "weights"
    return None


def numeric_fields(cls: type, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(dotted path, kind, default) of every numeric field of dataclass `cls`, recursively (a tagged section, a
    residual's `base`, by its default's class)."""
    hints, instance = typing.get_type_hints(cls), cls()
    for field in dataclasses.fields(cls):
        tp = hints[field.name]
        if dataclasses.is_dataclass(tp) or isinstance(getattr(instance, field.name), Tagged):
            yield from numeric_fields(type(getattr(instance, field.name)), f"{prefix}{field.name}.")
        elif kind := _kind(tp):
            kind = "indices" if field.name == "views" else kind  # camera indices: 0 is one, [] is all
            yield f"{prefix}{field.name}", kind, getattr(instance, field.name)


def all_leaves() -> list[Leaf]:
    """RunConfig's numeric fields, every policy class's (under policy), every algorithm's (under algo), every
    task's options (under sim.task_options) and TourConfig's."""
    leaves = [Leaf(path, kind, default) for path, kind, default in numeric_fields(RunConfig)]
    tagged = ("policy.", "algo.")
    leaves = [leaf for leaf in leaves if not leaf.path.startswith(tagged)]  # the default classes'; all below
    for name, algo_config in AlgoConfig.registry.items():
        if algo_config.__module__.startswith("policyforge."):  # a test's algorithm has its own tests
            leaves += [
                Leaf(path, kind, default, algo=name) for path, kind, default in numeric_fields(algo_config, "algo.")
            ]
    for name, policy_config in PolicyConfig.registry.items():
        if not policy_config.__module__.startswith("policyforge."):
            continue  # a class a test registers (tests/algos/toy_policy.py) has its own tests
        for path, kind, default in numeric_fields(policy_config, "policy."):
            if not path.startswith("policy.base."):  # a residual's base: its own class's leaves, and init_policy's
                leaves.append(Leaf(path, kind, default, policy=name))
    for name, task in TASKS.items():
        for path, kind, default in numeric_fields(task.config_class, "sim.task_options."):
            leaves.append(Leaf(path, kind, default, task=name))
    leaves += [Leaf(path, kind, default, root=TourConfig) for path, kind, default in numeric_fields(TourConfig)]
    return leaves


LEAVES = all_leaves()


# -- small runs every field can be tried in ------------------------------------------------------------------

TINY_NET = {"hidden": [16]}
CHUNKED = {"chunk": {"horizon": 2, "act_steps": 2}, "denoiser": {"hidden": [16], "time_dim": 8}}
RESIDUAL_BASE_DIFFUSION = {"class": "diffusion", **CHUNKED, "train_timesteps": 10, "inference_steps": 3}
POLICIES: dict[str, dict[str, Any]] = {
    "gaussian": {"class": "gaussian", **TINY_NET},
    "diffusion": RESIDUAL_BASE_DIFFUSION,
    "flow": {"class": "flow", **CHUNKED, "steps": 3, "noise_hidden": [16]},
    "residual": {"class": "residual", "hidden": [16], "base": RESIDUAL_BASE_DIFFUSION},
    "vla": {
        "class": "vla",
        "chunk": {"horizon": 2, "act_steps": 2},
        "steps": 3,
        "noise_hidden": [16],
        "width": 16,
        "heads": 2,
        "prefix_layers": 1,
        "expert_layers": 1,
        "time_dim": 8,
        "vision": {"encoder": "scratch", "scratch_channels": 8},
    },
}
"""Each policy class's small section."""
ALGOS: dict[str, dict[str, Any]] = {
    "ppo": {"class": "ppo", "rollout_steps": 4, "epochs": 2, "minibatches": 2, "critic_hidden": [16]},
    "sac": {
        "class": "sac",
        "buffer_size": 1000,
        "batch_size": 8,
        "learning_starts": 4,
        "steps_per_iteration": 4,
        "critic_hidden": [16],
    },
    "bc": {"class": "bc", "gradient_steps": 6, "steps_per_iteration": 3, "batch_size": 8, "warmup_steps": 2},
    "distill": {
        "class": "distill",
        "rollout_steps": 4,
        "epochs": 2,
        "minibatches": 2,
        "critic_hidden": [16],
        "batch_size": 8,
        "updates_per_iteration": 2,
        "buffer_size": 100,
    },
    "reward_model": {
        "class": "reward_model",
        "gradient_steps": 6,
        "steps_per_iteration": 3,
        "batch_size": 4,
        "model": {"image_channels": 8, "image_features": 8, "hidden": 16},
    },
}
"""Each algorithm's small section."""
IMAGE_ROLLOUTS = {"families": ["touch"], "episode_seconds": 0.2}
"""The instructed arm's options in the reward model's small run and its dataset."""
BASES: dict[str, dict[str, Any]] = {
    "ppo-gaussian": {"algo": ALGOS["ppo"], "policy": POLICIES["gaussian"]},
    "ppo-diffusion": {"algo": ALGOS["ppo"], "policy": POLICIES["diffusion"]},
    "ppo-dppo": {
        "policy": POLICIES["diffusion"],
        "algo": {
            **ALGOS["ppo"],
            "ratio": "per_step",
            "trainable_steps": 2,
            "denoising_discount": 0.99,
            "clip_ratio_first": 0.1,
            "log_prob_clamp": [-5.0, 2.0],
            "bc_coef": 0.1,
        },
    },
    "ppo-flow": {"algo": {**ALGOS["ppo"], "entropy_coef": 0.01}, "policy": POLICIES["flow"]},
    "ppo-flow-grpo": {
        "policy": {**POLICIES["flow"], "chain_noise": "sde", "stochastic_steps": "one"},
        "algo": {**ALGOS["ppo"], "advantage": "grpo", "group_size": 2, "rollout_steps": 8},
    },
    "ppo-residual": {"algo": ALGOS["ppo"], "policy": POLICIES["residual"]},
    "ppo-vla": {  # a VLA reads images and instructions: the instructed arm, one small camera
        "algo": ALGOS["ppo"],
        "policy": POLICIES["vla"],
        "sim": {
            "task": "arm-instructed",
            "task_options": {"episode_seconds": 0.2},
            "image": {"cameras": ["front"], "width": 16, "height": 16},
        },
    },
    "sac": {"algo": ALGOS["sac"], "policy": {**POLICIES["gaussian"], "squash": True, "state_dependent_std": True}},
    "bc-gaussian": {"algo": ALGOS["bc"], "policy": POLICIES["gaussian"]},
    "bc-diffusion": {"algo": ALGOS["bc"], "policy": POLICIES["diffusion"]},
    "bc-flow": {"algo": ALGOS["bc"], "policy": {**POLICIES["flow"], "variant": "shortcut"}},
    "distill-dagger": {"algo": {**ALGOS["distill"], "mode": "dagger"}, "policy": POLICIES["gaussian"]},
    "distill-rpd": {"algo": {**ALGOS["distill"], "mode": "rpd"}, "policy": POLICIES["gaussian"]},
    "reward-model": {  # frames of the instructed arm's task camera and its instructions
        "algo": ALGOS["reward_model"],
        "policy": POLICIES["gaussian"],
        "sim": {
            "task": "arm-instructed",
            "task_options": IMAGE_ROLLOUTS,
            "image": {"cameras": ["task"], "width": 16, "height": 16},
        },
    },
}
"""Algorithm × policy-class combinations, each cheap: pendulum-swingup, 2 envs, 16-unit networks, a few steps."""
COMMON: dict[str, Any] = {
    "sim": {"task": "pendulum-swingup", "num_envs": 2, "task_options": {"episode_seconds": 0.5}},
    "runner": {"total_env_steps": 16, "eval_envs": 2, "video": "none", "tensorboard": False, "checkpoint_every": 1},
}
TASK_BASES = {"arm-reach": {"episode_seconds": 0.2}, "quadruped-walk": {"episode_seconds": 0.1}}
"""Short episodes of the other tasks whose options are trained with ppo-gaussian."""
TYPICAL = {
    "algo.clip_ratio_first": 0.1,
    "algo.log_prob_clamp": (-5.0, 2.0),
    "algo.trainable_steps": 2,
    "sim.randomization.friction": (0.8, 1.2),
    "sim.randomization.mass_scale": (0.8, 1.2),
    "sim.randomization.kp_scale": (0.8, 1.2),
    "sim.randomization.kd_scale": (0.8, 1.2),
    "sim.randomization.com_offset": 0.02,
}
"""Ordinary values of fields that are off (null) by default."""


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def base_config(base: str, leaf: Leaf, resources: dict[str, str] | None = None) -> dict[str, Any]:
    """The plain config of small run `base` for trying `leaf` (its task set; datasets and init runs from
    `resources`)."""
    if leaf.root is TourConfig:
        return {"out_dir": (resources or {}).get("out", "runs/tour")}
    config = _merge(COMMON, BASES[base])
    if leaf.task != "pendulum-swingup":
        config["sim"]["task"], config["sim"]["task_options"] = leaf.task, dict(TASK_BASES.get(leaf.task, {}))
    resources = resources or {}
    if config["algo"]["class"] == "bc":
        config["algo"]["dataset"] = resources.get("dataset", "data/pendulum-swingup")
    if config["algo"]["class"] == "distill":
        config["algo"]["teacher"] = resources.get("teacher", "runs/teacher")
    if config["algo"]["class"] == "reward_model":
        config["algo"]["dataset"] = resources.get("image_dataset", "data/arm-instructed")
    if base == "ppo-residual":
        config["init_policy"] = resources.get("residual_base", "runs/base")
    return config


def bases_for(leaf: Leaf) -> list[str]:
    """The small runs in which `leaf` is used."""
    if leaf.root is TourConfig:
        return ["tour"]
    if leaf.task != "pendulum-swingup":
        return ["ppo-gaussian"]
    by_policy = {
        "gaussian": ["ppo-gaussian", "sac", "bc-gaussian"],
        "diffusion": ["ppo-diffusion", "ppo-dppo", "bc-diffusion"],
        "flow": ["ppo-flow", "ppo-flow-grpo", "bc-flow"],
        "residual": ["ppo-residual"],
        "vla": ["ppo-vla"],
    }
    if leaf.policy:
        return by_policy[leaf.policy]
    if leaf.algo:
        return [name for name, base in BASES.items() if base["algo"]["class"] == leaf.algo]
    return list(BASES)


def value_at(config: dict[str, Any], leaf: Leaf) -> Any:
    """The leaf's value in a plain config (the base's, else the default, else a typical value)."""
    node: Any = config
    for key in leaf.path.split("."):
        if not isinstance(node, dict) or key not in node:
            node = None
            break
        node = node[key]
    if node is None:
        node = leaf.default if leaf.default is not None else TYPICAL.get(leaf.path)
    return node


def with_value(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `config` with dotted `path` set to `value`."""
    config = copy.deepcopy(config)
    node = config
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


# -- hostile and ordinary values -----------------------------------------------------------------------------

HOSTILE_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -1.0, 1e300, 3e38, -3e38, 1e30, 1e9, -1e9, 1e-30, 1e-300, 5e-324)
HOSTILE_INTS = (0, -1, 2**31, 2**62, -(2**62), 10**30)
NEVER_VALID = {
    "float": (math.nan, math.inf, -math.inf, 1e300, -1e300),
    "int": (-1, -(2**62)),
    "range": ([math.nan, 1.0], [1.0, math.inf], [-math.inf, 1.0], [2.0, 1.0], [1e300, 1e301]),
    "sizes": ([0], [-1], [16, 0], [2**62]),
    "indices": ([-1], [2**62], [0, 0]),
    "weights": ({"tracking_lin_vel": math.nan}, {"tracking_lin_vel": math.inf}),
}
"""Values no field of a kind may accept: non-finite numbers (in float32), negative counts, reversed ranges, layers of
no or absurd width."""
HOSTILE = {
    "float": HOSTILE_FLOATS,
    "int": HOSTILE_INTS,
    "range": (*NEVER_VALID["range"], [-1.0, 1.0], [0.0, 0.0], [1e-300, 1.0]),
    "sizes": (*NEVER_VALID["sizes"], []),
    "indices": (*NEVER_VALID["indices"], [], [0]),
    "weights": tuple({"tracking_lin_vel": value} for value in HOSTILE_FLOATS),
}
"""Hostile values of each kind of leaf, every one tried at load for every leaf."""


def float_values(usual: float | None) -> st.SearchStrategy[float]:
    usual = usual if usual else 1.0
    near = st.floats(0.5, 2.0).map(lambda factor: usual * factor)
    return st.one_of(st.sampled_from(HOSTILE_FLOATS), st.just(usual), near, st.floats(-1e6, 1e6))


def int_values(usual: int | None) -> st.SearchStrategy[int]:
    usual = usual or 0
    near = st.integers(max(0, usual // 2), usual * 2 + 3)
    return st.one_of(st.sampled_from(HOSTILE_INTS), st.just(usual), near)


def values_for(kind: str, usual: Any) -> st.SearchStrategy[Any]:
    """Hostile and ordinary values for a leaf of `kind` whose ordinary value is `usual`."""
    if kind == "float":
        return float_values(usual)
    if kind == "int":
        return int_values(usual)
    if kind == "range":
        low, high = usual if usual is not None else (0.5, 1.5)
        either = st.tuples(float_values(low), float_values(high)).map(list)
        return st.one_of(st.just([high, low]), either, st.tuples(float_values(low), st.just(high)).map(list))
    if kind == "indices":
        return st.one_of(st.just([]), st.lists(st.sampled_from(HOSTILE_INTS[:2]), max_size=2))
    if kind == "sizes":
        usual = usual or [16]
        entry = int_values(usual[0])
        return st.one_of(st.just(list(usual)), st.lists(entry, max_size=3))
    if kind == "weights":
        return float_values(1.0).map(lambda weight: {"tracking_lin_vel": weight})
    raise ValueError(kind)


# -- the properties -------------------------------------------------------------------------------------------


def names_the_field(err: ConfigError, leaf: Leaf) -> bool:
    """Whether an error is about `leaf`: its path is the leaf's (or an element of it), or it names the field."""
    return err.path == leaf.path or err.path.startswith(leaf.path + "[") or leaf.name in f"{err.path} {err.reason}"


def load(leaf: Leaf, config: dict[str, Any]) -> Any:
    """The config loaded, or the ConfigError refusing it (asserted to name the leaf); other exceptions propagate."""
    try:
        return from_dict(leaf.root, config)
    except ConfigError as err:
        assert names_the_field(err, leaf), f"{leaf.path}: refused, but the error names another field: {err}"
        return err


def hostile_loads(leaf: Leaf, value: Any, base: str) -> None:
    config = base_config(base, leaf)
    outcome = load(leaf, with_value(config, leaf.path, value))
    never_valid = any(value is v or value == v for v in NEVER_VALID[leaf.kind])  # `is`: NaN ≠ NaN
    assert not never_valid or isinstance(outcome, ConfigError), f"{leaf.path}={value!r} ({base}) was accepted"


@pytest.mark.parametrize(
    "leaf", LEAVES, ids=lambda leaf: f"{leaf.root.__name__}.{leaf.path}@{leaf.policy or leaf.algo or leaf.task}"
)
def test_every_hostile_value_is_refused_naming_the_field_or_loads(leaf):
    """Values no field can use are refused; other hostile values are refused naming the field, or load."""
    for base in bases_for(leaf):
        for value in HOSTILE[leaf.kind]:
            hostile_loads(leaf, value, base)


@settings(max_examples=int(500 * SCALE), derandomize=True, deadline=None)
@given(data=st.data())
def test_any_value_of_any_field_loads_or_is_refused_naming_it(data):
    leaf = data.draw(st.sampled_from(LEAVES), label="leaf")
    base = data.draw(st.sampled_from(bases_for(leaf)), label="base")
    usual = value_at(base_config(base, leaf), leaf)
    hostile_loads(leaf, data.draw(values_for(leaf.kind, usual), label="value"), base)


# -- training with accepted values ---------------------------------------------------------------------------

TRAINED_LEAVES = [leaf for leaf in LEAVES if leaf.root is RunConfig]


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict[str, str]:
    """Rollouts of the instructed arm's task camera for the reward model, a pendulum dataset (demonstrated by a tiny
    PPO run, also the distillation runs' teacher) for BC, and a tiny diffusion run as a residual's base."""
    from policyforge.data.collect import collect

    out = tmp_path_factory.mktemp("property-runs")
    runner_module.plot_learning_curves = _no_plot  # restored below; the plots are not what is tested here
    paths = {"out": str(out)}
    for name, extra in (
        ("expert", {"policy": POLICIES["gaussian"], "algo": ALGOS["ppo"]}),
        ("residual-base", {"policy": RESIDUAL_BASE_DIFFUSION, "algo": ALGOS["ppo"]}),
    ):
        config = _merge(COMMON, {"name": name, "out_dir": str(out), **extra})
        runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
        runner.train()
        runner.close()
    collect(
        "pendulum-swingup",
        4,
        out / "demos",
        num_envs=2,
        policy=out / "expert",
        progress=False,
        task_options={"episode_seconds": 0.5},
    )
    collect(
        "arm-instructed",
        2,
        out / "image-rollouts",
        num_envs=2,
        action_noise=0.6,
        cameras=["task"],
        image_size=16,
        progress=False,
        task_options=IMAGE_ROLLOUTS,
    )
    paths.update(
        {"dataset": str(out / "demos"), "residual_base": str(out / "residual-base"), "teacher": str(out / "expert")}
    )
    paths["image_dataset"] = str(out / "image-rollouts")
    yield paths
    runner_module.plot_learning_curves = _PLOT


_PLOT = runner_module.plot_learning_curves


def _no_plot(run_dir: Path, title: str) -> Path:
    return Path(run_dir) / "plots" / "not-drawn.png"


ITERATIONS = 2
"""Iterations each property run trains (a field that asks for a longer run is capped)."""


TIME_LIMIT_S = 120
"""A property run lasting longer than this has hung (they take well under a second)."""


def _hung(signum: int, frame: Any) -> None:
    raise TimeoutError(f"the run took over {TIME_LIMIT_S} s: a value the config accepts makes it hang")


def train_briefly(config: RunConfig) -> tuple[Runner, dict[str, Any]]:
    """Build a run (ConfigErrors propagate) and train it for at most ITERATIONS iterations, then evaluate."""
    threads, runner = torch.get_num_threads(), None
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(TIME_LIMIT_S)
    try:
        runner = Runner.start(config, Console(quiet=True))
        algo, per_iteration = runner.algo, runner.algo.steps_per_iteration(runner.env)
        full_length = algo.total_steps
        algo.total_steps = lambda default: min(full_length(default), ITERATIONS * per_iteration)
        return runner, runner.train()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if runner is not None:
            runner.close()
        torch.set_num_threads(threads)


def assert_finite(runner: Runner, summary: dict[str, Any], what: str) -> None:
    """Every weight, optimiser statistic, logged metric and evaluation result of a run is finite."""
    for name, tensor in _tensors(runner.algo.state_dict()):
        if tensor.is_floating_point():
            assert torch.isfinite(tensor).all(), f"{what}: {name} holds non-finite values"
    for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines():
        for key, value in json.loads(line).items():
            assert not isinstance(value, float) or math.isfinite(value), f"{what}: logged {key} = {value}"
    for key, value in summary.items():
        assert not isinstance(value, float) or math.isfinite(value), f"{what}: {key} = {value}"


def _tensors(state: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, list | tuple):
        for i, value in enumerate(state):
            yield from _tensors(value, f"{prefix}[{i}]")


_RUNS = iter(range(10**9))


def trains_or_is_refused(leaf: Leaf, value: Any, base: str, resources: dict[str, str]) -> None:
    """The property: refused before training with an error naming the leaf, or trains with finite numbers."""
    config = base_config(base, leaf, resources)
    config.update({"name": f"{base}-{next(_RUNS)}", "out_dir": resources["out"]})
    loaded = load(leaf, with_value(config, leaf.path, value))
    if isinstance(loaded, ConfigError):
        event("refused at load")
        return
    what = f"{leaf.path}={value!r} ({base})"
    try:
        runner, summary = train_briefly(loaded)
    except ConfigError as err:
        assert names_the_field(err, leaf), f"{what}: refused at build, but the error names another field: {err}"
        event("refused at build")
        return
    assert_finite(runner, summary, what)
    event("trained")


@settings(
    max_examples=int(100 * SCALE),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_accepted_value_trains_with_finite_numbers(data, resources):
    leaf = data.draw(st.sampled_from(TRAINED_LEAVES), label="leaf")
    base = data.draw(st.sampled_from(bases_for(leaf)), label="base")
    usual = value_at(base_config(base, leaf, resources), leaf)
    trains_or_is_refused(leaf, data.draw(values_for(leaf.kind, usual), label="value"), base, resources)


# -- the figure of issue 18 ----------------------------------------------------------------------------------

PROBES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-1": -1.0}


def floats_accepting(leaves: list[Leaf]) -> dict[str, list[str]]:
    """For each probe value, the float fields among `leaves` that load with it (in the first small run that uses
    the field: its class's section, so that no field is refused only as another class's unknown key)."""
    accepted: dict[str, list[str]] = {probe: [] for probe in PROBES}
    for leaf in leaves:
        if leaf.kind != "float":
            continue
        config = base_config(bases_for(leaf)[0], leaf)
        for probe, value in PROBES.items():
            try:
                from_dict(leaf.root, with_value(config, leaf.path, value))
            except ConfigError:
                continue
            accepted[probe].append(f"{leaf.path}@{leaf.task}" if "task_options" in leaf.path else leaf.path)
    return accepted


TREES = {
    "RunConfig sections (issue 18's probe)": [
        leaf for leaf in LEAVES if leaf.root is RunConfig and "task_options" not in leaf.path
    ],
    "task options of every task": [leaf for leaf in LEAVES if "task_options" in leaf.path],
    "TourConfig": [leaf for leaf in LEAVES if leaf.root is TourConfig],
}


@pytest.mark.parametrize("tree", TREES)
def test_no_float_field_accepts_nan_inf_or_minus_one(tree):
    assert floats_accepting(TREES[tree]) == {probe: [] for probe in PROBES}


if __name__ == "__main__":
    for tree, leaves in TREES.items():
        accepted = floats_accepting(leaves)
        fields = sum(leaf.kind == "float" for leaf in leaves)
        print(f"{tree}: {fields} float fields; accepted at load: { {p: len(v) for p, v in accepted.items()} }")
        for probe, paths in accepted.items():
            print(f"  {probe}: {', '.join(paths) or '-'}")
