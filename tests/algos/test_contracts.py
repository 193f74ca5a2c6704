"""The contracts a policy class and an algorithm plug into (issue 19): algorithms, evaluation, export and
deployment know policies only through `policies.base.Policy` — checked on the real import graph — and a policy class
written in one module with one registration line trains with PPO and BC, evaluates, exports and deploys."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

import policyforge
import policyforge.policies
from policyforge import config as config_io
from policyforge.algos.runner import RunConfig, Runner, load_run
from policyforge.cli import main
from policyforge.config import ConfigError, from_dict
from policyforge.policies.base import Policy, PolicyConfig
from policyforge.policies.export import export, max_export_error
from tests.algos import toy_policy
from tests.algos.plugins import install_distribution

PACKAGE = Path(policyforge.__file__).parent
KNOWS_NO_POLICY_CLASS = ("algos", "real_robot")
"""Packages that may reach policies only through the contract (policies.base and the modules built on it alone)."""


def policy_class_modules() -> set[str]:
    """Modules of policyforge.policies that define a policy class or a policy config (found by importing them)."""
    found = set()
    for info in pkgutil.iter_modules(policyforge.policies.__path__, "policyforge.policies."):
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            concrete = issubclass(value, Policy | PolicyConfig) and value not in (Policy, PolicyConfig)
            if concrete and value.__module__ == info.name:
                found.add(info.name)
    return found


def imports_of(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every import statement of a module, wherever it stands (functions too): (line, module, names)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def policy_class_imports(root: Path, forbidden: set[str]) -> list[str]:
    """`file:line module` of each import under `root` that reaches a policy-class module, directly or as a name
    imported from the policies package."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        for line, module, names in imports_of(path):
            targets = {module} | {f"{module}.{name}" for name in names}
            if module == "policyforge.policies":  # a name re-exported by the package: where it is defined
                targets |= {getattr(getattr(policyforge.policies, name, None), "__module__", "") for name in names}
            if targets & forbidden:
                hits.append(f"{path.relative_to(root.parent)}:{line} {module}")
    return hits


def test_algorithms_and_deployment_import_no_policy_class():
    forbidden = policy_class_modules()
    assert {"policyforge.policies.gaussian", "policyforge.policies.residual", "policyforge.policies.flow"} <= forbidden
    for package in KNOWS_NO_POLICY_CLASS:
        assert policy_class_imports(PACKAGE / package, forbidden) == []


def test_the_architecture_check_fails_on_an_algos_import_of_a_policy_class(tmp_path):
    """The check above can fail: an algos module importing from policies/residual.py (even inside a function)."""
    algos = Path(shutil.copytree(PACKAGE / "algos", tmp_path / "algos"))
    ppo = algos / "ppo.py"
    ppo.write_text(
        ppo.read_text() + "\n\ndef _peek():\n    from policyforge.policies.residual import BASE_ACTION_KEY\n"
    )
    assert policy_class_imports(algos, policy_class_modules()) == [
        f"algos/ppo.py:{_lines(ppo)} policyforge.policies.residual"
    ]


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_policy_kind_is_reached_for_outside_policies():
    """What the issue's grep checks: no getattr on a policy, no isinstance against a policy class."""
    pattern = re.compile(r"getattr\(policy|isinstance\(.*Policy")
    for package in KNOWS_NO_POLICY_CLASS:
        for path in (PACKAGE / package).rglob("*.py"):
            hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
            assert not hits, f"{path}:{hits}"


# -- the policy section ----------------------------------------------------------------------------------------


def test_a_policy_section_is_one_registered_class():
    flow = from_dict(RunConfig, {"policy": {"class": "flow", "steps": 4}})
    assert flow.policy.tag == "flow" and flow.policy.steps == 4
    assert config_io.to_dict(flow)["policy"]["class"] == "flow"
    assert from_dict(RunConfig, config_io.to_dict(flow)) == flow
    unknown = r"^policy.class: got 'flw' \(did you mean 'flow'\?\); allowed: diffusion, flow, gaussian, residual"
    with pytest.raises(ConfigError, match=unknown):
        from_dict(RunConfig, {"policy": {"class": "flw"}})
    # a setting of another class is an error, not silently ignored
    with pytest.raises(ConfigError, match=r"^policy.steps: unknown key"):
        from_dict(RunConfig, {"policy": {"class": "gaussian", "steps": 4}})
    assert from_dict(RunConfig, {"policy": {"hidden": [8]}}).policy.tag == "gaussian"  # no class: the default's
    residual = from_dict(RunConfig, {"init_policy": "x", "policy": {"class": "residual", "base": {"class": "flow"}}})
    assert residual.policy.base.tag == "flow"


def test_a_run_config_of_the_old_layout_is_read_with_a_warning():
    old = {"policy_class": "residual", "residual": {"base_class": "flow", "scale": 0.3}, "flow": {"steps": 3},
           "diffusion": {"inference_steps": 7}, "init_policy": "x"}  # fmt: skip
    with pytest.warns(UserWarning, match="old layout"):
        config = from_dict(RunConfig, old)
    assert (config.policy.tag, config.policy.scale, config.policy.base.tag, config.policy.base.steps) == (
        "residual", 0.3, "flow", 3)  # fmt: skip


def test_trainable_steps_of_a_single_step_policy_is_refused():
    with pytest.raises(ConfigError, match=r"^algo.trainable_steps: must be in \[1, 1\]"):
        from_dict(RunConfig, {"algo": {"trainable_steps": 2}})
    with pytest.raises(ConfigError, match=r"^algo.trainable_steps: must be in \[1, policy.steps=3\]"):
        from_dict(RunConfig, {"policy": {"class": "flow", "steps": 3}, "algo": {"trainable_steps": 4}})


# -- a policy class added in one module ---------------------------------------------------------------------------

TOY = {"class": "toy-linear", "history": 2}
WALK = {"task": "quadruped-walk", "num_envs": 4, "task_options": {"episode_seconds": 0.4}}
QUIET = {"eval_envs": 2, "video": "none", "tensorboard": False}


def test_a_policy_class_in_one_module_trains_evaluates_exports_and_deploys(tmp_path, capsys):
    assert toy_policy.ToyLinearConfig.tag == "toy-linear"
    ppo = from_dict(
        RunConfig,
        {"name": "ppo", "out_dir": str(tmp_path), "sim": WALK, "policy": TOY,
         "algo": {"rollout_steps": 8, "epochs": 1, "minibatches": 2}, "runner": {"total_env_steps": 64, **QUIET}},
    )  # fmt: skip
    runner = Runner.start(ppo, Console(quiet=True))
    before = runner.algo.policy.linear.weight.clone()
    summary = runner.train()
    runner.close()
    assert summary["env_steps"] == 64 and not torch.equal(runner.algo.policy.linear.weight, before)
    assert runner.algo.history.stacked["policy"].shape == (4, 2, 45)  # its history, stacked by the contract

    # BC on demonstrations of that policy, then evaluated with its history
    from policyforge.data.collect import collect

    collect("quadruped-walk", 2, tmp_path / "demos", num_envs=2, policy=tmp_path / "ppo", progress=False,
            task_options=WALK["task_options"])  # fmt: skip
    bc = from_dict(
        RunConfig,
        {"name": "bc", "out_dir": str(tmp_path), "sim": {**WALK, "num_envs": 1}, "policy": TOY,
         "algo": {"class": "bc", "dataset": str(tmp_path / "demos"), "gradient_steps": 40, "steps_per_iteration": 20,
                  "warmup_steps": 2, "batch_size": 16},
         "runner": QUIET},
    )  # fmt: skip
    runner = Runner.start(bc, Console(quiet=True))
    first = runner.algo.model.bc_loss(*runner.algo.windows.sample(64)).item()
    summary = runner.train()
    runner.close()
    assert runner.algo.model.bc_loss(*runner.algo.windows.sample(64)).item() < first
    assert summary["eval/length"] > 0

    # exported with its history, the graph reproduces act; deployed on the simulated Go2
    _, policy, env = load_run(tmp_path / "bc")
    env.close()
    obs = {"policy": torch.randn(8, 2, 45)}
    assert max_export_error(policy, export(policy, tmp_path / "toy.onnx", "onnx"), obs) <= 1e-5
    assert main(["export", str(tmp_path / "bc"), "--format", "onnx"]) == 0
    code = main(["deploy", str(tmp_path / "bc"), "--robot", "go2", "--peer", "sim", "--seconds", "1"])
    printed = capsys.readouterr().out
    assert code == 0 and "final mode" in printed, printed


PLUGIN = """
import dataclasses
from policyforge.policies.base import register_policy
from tests.algos.toy_policy import ToyLinearConfig

@register_policy("plugin-linear")
@dataclasses.dataclass
class PluginLinearConfig(ToyLinearConfig):
    \"\"\"The toy class again, from an installed package.\"\"\"
"""


def test_a_policy_class_of_an_installed_package_is_found_by_its_entry_point(tmp_path, monkeypatch):
    """A package that declares `[project.entry-points."policyforge.policies"] NAME = "module"` needs no import by
    the user: the run config's `class: NAME` loads it (here a real distribution's metadata on sys.path)."""
    entry_points = {"plugin-linear": "pf_plugin_demo", "plugin-broken": "pf_plugin_missing"}
    install_distribution(tmp_path, monkeypatch, "pf_plugin_demo", PLUGIN, "policyforge.policies", entry_points)
    monkeypatch.setattr(PolicyConfig, "registry", dict(PolicyConfig.registry))  # leave the real one as it was
    assert "plugin-linear" not in PolicyConfig.registry
    config = from_dict(RunConfig, {"policy": {"class": "plugin-linear", "history": 3}})
    assert config.policy.tag == "plugin-linear" and config.policy.history == 3
    with pytest.raises(ConfigError, match=r"^policy.class: the installed plugin for 'plugin-broken' failed to load"):
        from_dict(RunConfig, {"policy": {"class": "plugin-broken"}})
