"""A run killed with SIGKILL at any moment resumes from its last checkpoint and ends with exactly the
parameters of an uninterrupted run (fixed seed, one thread)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from policyforge.algos import checkpoint

TRAIN = [sys.executable, "-m", "policyforge.cli", "train", "configs/pendulum-swingup-ppo.yaml"]
SMALL = ["sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2", "runner.total_env_steps=3072",
         "runner.checkpoint_every=3", "runner.eval_envs=2", "runner.video=none"]  # fmt: skip


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    state = checkpoint.read(run_dir / "checkpoints" / "latest.pt")
    return {**state["algo"]["policy"], **{f"critic.{k}": v for k, v in state["algo"]["critic"].items()}}


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    subprocess.run([*TRAIN, *SMALL, f"out_dir={tmp_path}", "name=whole"], check=True, env=env, capture_output=True)

    killed = subprocess.Popen([*TRAIN, *SMALL, f"out_dir={tmp_path}", "name=killed"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.time() + 120
    second = checkpoints / f"step_{6 * 8 * 16:010d}.pt"  # iteration 6: 8 envs × 16 rollout steps per iteration
    while not second.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # wait for the second checkpoint, then kill mid-iteration
    time.sleep(0.3)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = checkpoint.newest(checkpoints)[1]  # latest.pt, or the step file before it if killed in between
    assert 6 <= left["iteration"] < 24, "killed in the middle of the run"

    subprocess.run([*TRAIN[:-1], "--resume", str(tmp_path / "killed")], check=True, env=env, capture_output=True)
    whole, resumed = final_parameters(tmp_path / "whole"), final_parameters(tmp_path / "killed")
    assert whole.keys() == resumed.keys()
    for name in whole:
        assert torch.equal(whole[name], resumed[name]), name
    lines = (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len((tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()), "no duplicated log lines"
