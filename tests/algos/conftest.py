import shutil
from pathlib import Path

import pytest


@pytest.fixture
def record_steps(monkeypatch):
    """record_steps(env) -> list that collects every `env.step` result from then on."""

    def start(env) -> list:
        steps, original_step = [], env.step

        def recording_step(action):
            steps.append(original_step(action))
            return steps[-1]

        monkeypatch.setattr(env, "step", recording_step)
        return steps

    return start


TINY_RUN = ["configs/pendulum-swingup-ppo.yaml", "sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2",
            "runner.total_env_steps=1024", "runner.checkpoint_every=3", "runner.eval_envs=2", "runner.video=none",
            "runner.tensorboard=false"]  # fmt: skip
"""A tiny PPO run: 8 iterations of 128 env steps, checkpoints at iterations 3, 6 and 8 (the final one)."""


@pytest.fixture(scope="session")
def tiny_run_args() -> list[str]:
    """`policyforge train` arguments of a TINY_RUN (add out_dir= and name=)."""
    return list(TINY_RUN)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished TINY_RUN (read-only: tests change a `run_copy`)."""
    from policyforge.cli import main

    out = tmp_path_factory.mktemp("runs")
    assert main(["train", *TINY_RUN, f"out_dir={out}", "name=tiny"]) == 0
    return out / "tiny"


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A copy of the finished tiny run to change."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


@pytest.fixture(scope="session")
def learning_records():
    """learning_records(run_dir) -> its metrics records without the wall-clock figures (perf/*), which differ
    between runs of the same seed."""
    from policyforge.algos.logger import read_metrics

    def records(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in read_metrics(run_dir)]

    return records


@pytest.fixture(scope="session")
def bc_flow_run(tmp_path_factory):
    """A small flow policy behaviour-cloned on arm-reach demonstrations (a run directory)."""
    from rich.console import Console

    from policyforge.algos.runner import RunConfig, Runner
    from policyforge.config import from_dict
    from policyforge.data.collect import collect

    out = tmp_path_factory.mktemp("steer")
    collect("arm-reach", 8, out / "demos", num_envs=8, seed=0, progress=False)
    config = {
        "name": "bc-flow", "out_dir": str(out), "sim": {"task": "arm-reach", "num_envs": 1},
        "algo": {"class": "bc", "dataset": str(out / "demos"), "gradient_steps": 40, "steps_per_iteration": 40},
        "policy": {"class": "flow", "chunk": {"n_obs_steps": 2, "horizon": 4, "act_steps": 2}, "steps": 3,
                   "denoiser": {"hidden": [32, 32]}},
        "runner": {"eval_envs": 4, "video": "none", "eval_every_steps": 0, "tensorboard": False},
    }  # fmt: skip
    runner = Runner.start(from_dict(RunConfig, config), Console(quiet=True))
    runner.train()
    runner.close()
    return out / "bc-flow"
