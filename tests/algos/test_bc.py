"""Behaviour cloning through the runner: it learns from scripted demonstrations, resumes exactly, refuses
datasets that don't fit, and its policies export."""

import json

import numpy as np
import pytest
import torch
from rich.console import Console

from policyforge.algos import bc
from policyforge.algos.logger import read_metrics
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import ConfigError, from_dict
from policyforge.data.collect import collect
from policyforge.data.dataset import Demonstrations, DemoWriter
from policyforge.data.layout import ACTION, STATE
from policyforge.policies.export import export, max_export_error

CHUNK = {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "arm-reach"
    collect("arm-reach", 16, out, num_envs=16, seed=0, action_noise=0.1, progress=False)
    return out


def bc_config(tmp_path, dataset, **overrides) -> RunConfig:
    settings = {
        "name": "bc",
        "out_dir": str(tmp_path),
        "sim": {"task": "arm-reach", "num_envs": 1},
        "policy": {"class": "flow", "chunk": CHUNK, "steps": 4, "denoiser": {"hidden": [128, 128]}},
        "algo": {
            "class": "bc",
            "dataset": str(dataset),
            "gradient_steps": 800,
            "steps_per_iteration": 200,
            "warmup_steps": 50,
        },
        "runner": {"eval_envs": 16, "video": "none", "eval_every_steps": 200, "tensorboard": False},
    }
    for key, value in overrides.items():
        section, _, field = key.partition(".")
        if field:
            settings[section] = {**settings.get(section, {}), field: value}
        else:
            settings[key] = value
    return from_dict(RunConfig, settings)


def test_flow_bc_learns_reach_from_demonstrations(tmp_path, reach_demos):
    runner = Runner.start(bc_config(tmp_path, reach_demos), Console(quiet=True))
    untrained = runner.evaluate()["eval/success"]
    summary = runner.train()
    runner.close()
    records = [json.loads(line) for line in (tmp_path / "bc" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/bc"] for r in records if "loss/bc" in r]
    assert losses[-1] < 0.5 * losses[0]
    assert summary["gradient_steps"] == 800 and "gradient_steps" in records[0]
    assert summary["eval/success"] >= 0.75 > untrained
    assert (tmp_path / "bc" / "plots" / "learning_curves.png").exists()


def test_bc_resumes_exactly(tmp_path, reach_demos, monkeypatch):
    overrides = {"algo.gradient_steps": 60, "algo.steps_per_iteration": 10, "runner.checkpoint_every": 2}
    overrides.update({"runner.eval_every_steps": 0, "runner.eval_envs": 2})
    whole = Runner.start(bc_config(tmp_path, reach_demos, name="whole", **overrides), Console(quiet=True))
    whole.train()
    gradient_steps = [record["gradient_steps"] for record in read_metrics(tmp_path / "whole")]
    numbered = sorted(path.name for path in (tmp_path / "whole" / "checkpoints").glob("step_*.pt"))
    assert numbered == [f"step_{gradient_steps[i - 1]:010d}.pt" for i in (2, 4, 6)] == [
        "step_0000000020.pt", "step_0000000040.pt", "step_0000000060.pt"
    ]  # fmt: skip
    calls = {"n": 0}
    original = bc.BC.iterate

    def crash_on_fifth(self, *args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(bc.BC, "iterate", crash_on_fifth)
    killed = Runner.start(bc_config(tmp_path, reach_demos, name="killed", **overrides), Console(quiet=True))
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    monkeypatch.setattr(bc.BC, "iterate", original)
    resumed = Runner.resume(tmp_path / "killed", Console(quiet=True))
    assert resumed.env_steps == 40  # the checkpoint of iteration 4
    resumed.train()
    for name, value in whole.algo.state_dict()["model"].items():
        assert torch.equal(value, resumed.algo.state_dict()["model"][name]), name
    for name, value in whole.algo.policy.state_dict().items():
        assert torch.equal(value, resumed.algo.policy.state_dict()[name]), name


def test_bc_refuses_a_dataset_of_another_task(tmp_path, reach_demos):
    with pytest.raises(ConfigError, match=r"algo.dataset.*arm-reach"):
        Runner.start(bc_config(tmp_path, reach_demos, sim={"task": "arm-lift-cube", "num_envs": 1}))
    with pytest.raises(ConfigError, match=r"algo.dataset.*collect"):
        Runner.start(bc_config(tmp_path, tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"^policy.class: SAC trains Gaussian policies"):
        bc_config(tmp_path, reach_demos, algo="sac")
    with pytest.raises(ConfigError, match=r"algo.scene_frames: .*FlowPolicy has none.*privileged_aux_weight"):
        Runner.start(bc_config(tmp_path, reach_demos, **{"algo.scene_frames": 100}))


def test_bc_policy_exports_with_its_sampler(tmp_path, reach_demos):
    config = bc_config(tmp_path, reach_demos, **{"algo.gradient_steps": 20, "algo.steps_per_iteration": 10})
    runner = Runner.start(config, Console(quiet=True))
    runner.train()
    policy = runner.algo.policy
    path = export(policy, tmp_path / "policy.onnx", "onnx")
    obs = {"policy": torch.as_tensor(Demonstrations(reach_demos).column(STATE)[:64]).view(32, 2, -1)}
    assert max_export_error(policy, path, obs) <= 1e-5
    runner.close()


@pytest.fixture(scope="module")
def touch_demos(tmp_path_factory):
    """Scripted touches of arm-instructed, with the critic observation (cube poses, instruction ids) recorded."""
    out = tmp_path_factory.mktemp("demos") / "touch"
    options = {"families": ["touch"], "episode_seconds": 2.4}
    collect("arm-instructed", 48, out, num_envs=16, seed=0, action_noise=0.1, progress=False, task_options=options)
    return out


def touch_config(tmp_path, dataset, obs_key: str, **overrides) -> RunConfig:
    sim = {"task": "arm-instructed", "num_envs": 1, "task_options": {"families": ["touch"], "episode_seconds": 2.4}}
    policy = {"class": "flow", "chunk": CHUNK, "steps": 4, "denoiser": {"hidden": [128, 128]}}
    policy["encoder"] = {"obs_key": obs_key}
    return bc_config(tmp_path, dataset, sim=sim, policy=policy, **overrides)


def test_bc_on_the_privileged_state_reads_the_datasets_environment_state(tmp_path, touch_demos):
    """A policy with encoder.obs_key critic learns from observation.environment_state, so it knows which cube the
    instruction names (proprioception alone does not say) and touches it; the one on proprioception does not."""
    results = {}
    for obs_key in ("critic", "policy"):
        runner = Runner.start(touch_config(tmp_path, touch_demos, obs_key, name=obs_key), Console(quiet=True))
        assert runner.algo.windows.states.shape[1] == runner.env.obs_shapes[obs_key][0]
        results[obs_key] = runner.train()["eval/success"]
        runner.close()
    assert results["critic"] >= 0.6
    assert results["policy"] <= results["critic"] - 0.3


def test_bc_on_the_privileged_state_refuses_a_dataset_without_it(tmp_path, touch_demos):
    with pytest.raises(ConfigError, match=r"policy.encoder.obs_key: got .image.; allowed: .policy., .critic."):
        touch_config(tmp_path, touch_demos, "image")
    demos = Demonstrations(touch_demos)
    states, actions = demos.column(STATE)[:20], demos.column(ACTION)[:20]
    bare = DemoWriter(tmp_path / "bare", 25, states.shape[1], actions.shape[1], task_name="arm-instructed")
    bare.add_episode(states, actions, np.zeros(20), np.zeros(20, bool), np.zeros(20, bool), instruction="touch it")
    with pytest.raises(ConfigError, match=r"algo.dataset: .*no observation.environment_state.*obs_key=policy"):
        Runner.start(touch_config(tmp_path, bare.root, "critic"), Console(quiet=True))
