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
