"""A run killed with SIGKILL at any moment resumes from its last checkpoint and ends with exactly the
parameters of an uninterrupted run (fixed seed, one thread): PPO, and SAC with its replay buffer."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from policyforge.algos import checkpoint

RUNS = {  # recipe, settings, env steps per iteration
    "ppo": ("configs/pendulum-swingup-ppo.yaml", ["algo.rollout_steps=16", "algo.epochs=2",
                                                  "runner.total_env_steps=3072"], 8 * 16),
    "sac": ("configs/pendulum-swingup-sac.yaml", ["algo.steps_per_iteration=16", "algo.learning_starts=256",
                                                  "algo.batch_size=64", "runner.total_env_steps=3072"], 8 * 16),
}  # fmt: skip
COMMON = ["sim.num_envs=8", "runner.checkpoint_every=3", "runner.eval_envs=2", "runner.video=none"]


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    state = checkpoint.read(run_dir / "checkpoints" / "latest.pt")
    return {**state["algo"]["policy"], **{f"critic.{k}": v for k, v in state["algo"]["critic"].items()}}


@pytest.mark.parametrize("algo", RUNS)
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, algo):
    recipe, settings, per_iteration = RUNS[algo]
    train = [sys.executable, "-m", "policyforge.cli", "train", recipe, *settings, *COMMON, f"out_dir={tmp_path}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    subprocess.run([*train, "name=whole"], check=True, env=env, capture_output=True)

    killed = subprocess.Popen([*train, "name=killed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 120
    second = checkpoints / f"step_{6 * per_iteration:010d}.pt"  # iteration 6
    while not second.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # wait for the second checkpoint, then kill mid-iteration
    time.sleep(0.3)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = checkpoint.newest(checkpoints)[1]  # latest.pt, or the step file before it if killed in between
    assert 6 <= left["iteration"] < 24, "killed in the middle of the run"

    resume = [sys.executable, "-m", "policyforge.cli", "train", "--resume", str(tmp_path / "killed")]
    subprocess.run(resume, check=True, env=env, capture_output=True)
    whole, resumed = final_parameters(tmp_path / "whole"), final_parameters(tmp_path / "killed")
    assert whole.keys() == resumed.keys()
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), name
    lines = (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()), "no duplicated log lines"
