"""The algorithm half of the contracts (issue 19): a run config's `algo` is one tagged section, `algo: {class: NAME,
...}`, whose class an algorithm module registers with one line; older layouts (`algo: ppo` beside a `ppo:` section)
are still read; and an algorithm written in one module (tests/algos/toy_algorithm.py) trains through `policyforge
train`, resumes and learns."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

from policyforge.algos.registry import AlgoConfig
from policyforge.algos.runner import RunConfig
from policyforge.cli import main
from policyforge.config import ConfigError, from_dict, load, to_dict
from tests.algos import toy_algorithm
from tests.algos.plugins import install_distribution

SAC_POLICY = {"class": "gaussian", "squash": True}

# -- the section ------------------------------------------------------------------------------------------------


def test_an_algorithm_section_is_one_registered_class():
    sac = from_dict(RunConfig, {"algo": {"class": "sac", "batch_size": 64}, "policy": SAC_POLICY})
    assert sac.algo.tag == "sac" and sac.algo.batch_size == 64 and sac.run_dir.name == "pendulum-swingup-sac"
    assert to_dict(sac)["algo"]["class"] == "sac" and from_dict(RunConfig, to_dict(sac)) == sac
    assert from_dict(RunConfig, {"algo": {"epochs": 3}}).algo.tag == "ppo"  # no class: PPO
    assert from_dict(RunConfig, {}).algo.tag == "ppo"


def test_a_setting_of_another_algorithm_is_an_error_naming_it():
    with pytest.raises(ConfigError, match=r"^algo.buffer_size: unknown key; allowed: rollout_steps, epochs"):
        from_dict(RunConfig, {"algo": {"class": "ppo", "buffer_size": 1000}})  # SAC's
    with pytest.raises(ConfigError, match=r"^algo.rollout_steps: unknown key"):
        from_dict(RunConfig, {"algo": {"class": "bc", "rollout_steps": 8}})
    # beside a tagged section, a top-level section of the old layout is no longer read: an unknown key
    with pytest.raises(ConfigError, match=r"^sac: unknown key.*; allowed: name, out_dir, seed, algo"):
        from_dict(RunConfig, {"algo": {"class": "ppo"}, "sac": {"batch_size": 64}})


def test_an_unknown_algorithm_names_the_registered_ones():
    with pytest.raises(ConfigError, match=r"^algo.class: got 'sca' \(did you mean 'sac'\?\); allowed: ") as err:
        from_dict(RunConfig, {"algo": {"class": "sca"}})
    assert {"bc", "ppo", "sac"} <= set(err.value.reason.split("allowed: ")[1].split(", "))
    with pytest.raises(ConfigError, match=r"^algo.class: got 'dqn'; allowed: "):
        load(RunConfig, None, ["algo=dqn"])


def test_a_bare_class_name_is_that_class_with_its_defaults():
    """`algo: sac` in a file, `algo=sac` or `policy=flow` on the command line: no warning, that class's defaults."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no old-layout warning
        by_name = from_dict(RunConfig, {"algo": "sac", "policy": SAC_POLICY})
        assert by_name == from_dict(RunConfig, {"algo": {"class": "sac"}, "policy": SAC_POLICY})
        overridden = load(RunConfig, "configs/pendulum-swingup-ppo.yaml", ["algo=bc", "policy=flow"])
    assert (overridden.algo.tag, overridden.policy.tag) == ("bc", "flow")
    assert overridden.algo == type(overridden.algo)() and overridden.policy == type(overridden.policy)()
    with pytest.raises(ConfigError, match=r"^algo.batch_size: algo is not a section.*algo='\{class: sac, batch_size"):
        load(RunConfig, None, ["algo=sac", "algo.batch_size=64"])


OLD = {  # a run config.yaml saved before either section was tagged: every algorithm's section, one selected
    "algo": "sac",
    "policy_class": "gaussian",
    "policy": {"hidden": [32], "squash": True},
    "flow": {"steps": 3},
    "ppo": {"epochs": 9, "rollout_steps": 8},
    "sac": {"batch_size": 64, "gamma": 0.97},
    "bc": {"dataset": "data/x"},
}
NEW = {"algo": {"class": "sac", "batch_size": 64, "gamma": 0.97}, "policy": {"class": "gaussian", "hidden": [32],
       "squash": True}}  # fmt: skip


def test_a_run_config_of_the_old_algorithm_layout_is_read_with_one_warning():
    with pytest.warns(UserWarning) as caught:
        old = from_dict(RunConfig, OLD)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert "old layout" in message and "algo: {class: sac, ...}" in message and "policy: {class: gaussian" in message
    assert old == from_dict(RunConfig, NEW)  # the other algorithms' sections, ignored then, are dropped
    with pytest.warns(UserWarning, match=r"algo: \{class: ppo, \.\.\.\}"):  # no `algo:`: the old default, PPO
        assert from_dict(RunConfig, {"ppo": {"epochs": 9}}).algo.epochs == 9


def test_a_run_saved_in_the_old_layout_is_shown_evaluated_and_resumed(run_copy, capsys):
    """A run directory written before the algorithm section was tagged: `config show`, `eval` and `train --resume`
    read its config.yaml (with the warning); a resume that changes the config saves it in the new layout."""
    saved = yaml.safe_load((run_copy / "config.yaml").read_text())
    algo = saved.pop("algo")
    saved.update({"algo": algo.pop("class"), "ppo": algo, "sac": {"batch_size": 1}, "bc": {}})
    (run_copy / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.warns(UserWarning, match="old layout"):
        assert main(["config", "show", str(run_copy / "config.yaml")]) == 0
    assert "algo:\n" in capsys.readouterr().out
    with pytest.warns(UserWarning, match="old layout"):
        assert main(["eval", str(run_copy), "--envs", "2"]) == 0
    with pytest.warns(UserWarning, match="old layout"):
        assert main(["train", "--resume", str(run_copy), "runner.total_env_steps=1280"]) == 0
    rewritten = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert rewritten["algo"] == {"class": "ppo", **algo} and not {"ppo", "sac", "bc"} & set(rewritten)


# -- an algorithm added in one module ---------------------------------------------------------------------------

RECIPE = """\
name: vpg
sim:
  task: arm-reach
  num_envs: 32
  task_options: {control_mode: ee_delta_topdown, reward_type: dense}
policy: {class: gaussian, hidden: [64, 64], init_std: 1.0}
algo: {class: toy-vpg, rollout_steps: 32, lr: 3.0e-3, gamma: 0.9}
runner: {total_env_steps: 16384, eval_envs: 16, video: none, tensorboard: false, checkpoint_every: 4}
"""


def _final_eval(run_dir) -> dict:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]


@pytest.mark.slow  # 4-8 s on this 2-core machine, like the toy policy class's test (tests/conftest.py)
def test_an_algorithm_in_one_module_trains_resumes_and_learns(tmp_path):
    """Vanilla policy gradient, registered by toy_algorithm.py's one line, run by `policyforge train` on arm-reach
    (32 envs, 1,024 env steps per iteration): its checkpoints resume, and its evaluation return rises — from 14
    untrained to 33 after 16 iterations and 54 after 32 (seed 0; with the gradient's sign flipped it falls to 0.7)."""
    assert toy_algorithm.VanillaPGConfig.tag == "toy-vpg"
    recipe = tmp_path / "vpg.yaml"
    recipe.write_text(RECIPE)
    config = load(RunConfig, recipe, [f"out_dir={tmp_path}"])
    assert isinstance(config.algo, toy_algorithm.VanillaPGConfig) and config.algo.lr == 3e-3

    from rich.console import Console

    from policyforge.algos.runner import Runner

    untrained = Runner.start(load(RunConfig, recipe, [f"out_dir={tmp_path}", "name=untrained"]), Console(quiet=True))
    before = untrained.evaluate()["eval/return"]
    untrained.close()

    assert main(["train", str(recipe), f"out_dir={tmp_path}"]) == 0
    run = tmp_path / "vpg"
    first = _final_eval(run)
    assert first["env_steps"] == 16384 and (run / "checkpoints" / "latest.pt").is_file()
    assert "loss/policy_gradient" in (run / "metrics.jsonl").read_text()
    assert main(["train", "--resume", str(run), "runner.total_env_steps=32768"]) == 0
    second = _final_eval(run)
    steps = [json.loads(line)["env_steps"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert second["env_steps"] == 32768 and steps == sorted(steps)  # continued where it stopped, not restarted
    assert first["eval/return"] > before + 10 and second["eval/return"] > first["eval/return"] + 10, (
        before, first["eval/return"], second["eval/return"])  # fmt: skip


PLUGIN = """
import dataclasses
from policyforge.algos.registry import AlgorithmEntry, register_algorithm
from tests.algos.toy_algorithm import VanillaPGConfig, construct

@dataclasses.dataclass
class PluginPGConfig(VanillaPGConfig):
    \"\"\"The toy algorithm again, from an installed package.\"\"\"

register_algorithm("plugin-vpg", PluginPGConfig, AlgorithmEntry(construct))
"""


def test_an_algorithm_of_an_installed_package_is_found_by_its_entry_point(tmp_path, monkeypatch):
    """`[project.entry-points."policyforge.algorithms"] NAME = "module"`: `algo: {class: NAME}` loads it (a real
    distribution's metadata on sys.path)."""
    entry_points = {"plugin-vpg": "pf_algo_plugin_demo", "plugin-broken": "pf_algo_plugin_missing"}
    install_distribution(tmp_path, monkeypatch, "pf_algo_plugin_demo", PLUGIN, "policyforge.algorithms", entry_points)
    monkeypatch.setattr(AlgoConfig, "registry", dict(AlgoConfig.registry))  # leave the real one as it was
    assert "plugin-vpg" not in AlgoConfig.registry
    config = from_dict(RunConfig, {"algo": {"class": "plugin-vpg", "lr": 0.01}})
    assert config.algo.tag == "plugin-vpg" and config.algo.lr == 0.01
    assert config.algo.entry.construct is toy_algorithm.construct
    with pytest.raises(ConfigError, match=r"^algo.class: the installed plugin for 'plugin-broken' failed to load"):
        from_dict(RunConfig, {"algo": "plugin-broken"})
