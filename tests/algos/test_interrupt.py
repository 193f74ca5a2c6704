"""Ctrl-C (SIGINT) while training: no traceback, a checkpoint of the iteration it stopped at, the exact resume
command, exit status 130; a second Ctrl-C while that checkpoint is written waits for it."""

import os
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from policyforge.algos import checkpoint
from policyforge.algos.interrupt import StopRequests, TrainingInterrupted
from policyforge.algos.logger import read_metrics
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import load

TRAIN = [sys.executable, "-m", "policyforge.cli", "train"]
LONG = ["configs/pendulum-swingup-ppo.yaml", "sim.num_envs=8", "algo.rollout_steps=16", "algo.epochs=2",
        "runner.total_env_steps=10000000", "runner.checkpoint_every=100000", "runner.eval_envs=2",
        "runner.video=none", "runner.tensorboard=false"]  # fmt: skip
"""A run far too long to finish, that never checkpoints by itself."""


@pytest.mark.slow  # two processes train: about 15 s
def test_ctrl_c_saves_the_current_iteration_and_prints_the_resume_command(tmp_path):
    run_dir = tmp_path / "stopped"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([*TRAIN, *LONG, f"out_dir={tmp_path}", "name=stopped"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 180
    while len(read_metrics(run_dir)) < 2 and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # two iterations logged
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)

    assert process.returncode == 130, out + err
    assert "Traceback" not in out + err
    state = checkpoint.read(run_dir / "checkpoints" / "latest.pt")
    logged = read_metrics(run_dir)
    assert state["iteration"] == len(logged) >= 2 and state["env_steps"] == logged[-1]["env_steps"] == 128 * len(logged)
    assert list((run_dir / "checkpoints").glob("step_*.pt")) == [
        run_dir / "checkpoints" / f"step_{state['env_steps']:010d}.pt"
    ]  # written now: the run's periodic checkpoints would come every 100,000 iterations
    flat = " ".join(out.split())  # the message may wrap
    assert f"saved iteration {state['iteration']} ({state['env_steps']:,} env steps)" in flat
    assert f"continue with: policyforge train --resume {run_dir}" in flat

    longer = state["env_steps"] + 256
    resumed = subprocess.run([*TRAIN, "--resume", str(run_dir), f"runner.total_env_steps={longer}"], env=env,
                             text=True, capture_output=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming {run_dir} at {state['env_steps']:,} env steps" in " ".join(resumed.stdout.split())
    steps = [record["env_steps"] for record in read_metrics(run_dir)]
    assert steps == [128 * (i + 1) for i in range(len(logged) + 2)] + [longer]  # + the final evaluation's record
    assert checkpoint.read(run_dir / "checkpoints" / "latest.pt")["finished"]


def test_a_second_ctrl_c_while_the_checkpoint_is_written_lets_it_finish(tmp_path, tiny_run_args, monkeypatch):
    """First Ctrl-C during an iteration, the second in the middle of writing its checkpoint: the checkpoint is
    whole and the run resumes from it."""
    config = load(RunConfig, tiny_run_args[0], [*tiny_run_args[1:], f"out_dir={tmp_path}", "name=twice"])
    runner = Runner.start(config, Console(quiet=True))
    steps = iter(range(10**6))
    runner.step_hooks.append(lambda info: next(steps) == 20 and signal.raise_signal(signal.SIGINT))  # iteration 2
    write = checkpoint.write

    def interrupted_write(path, state):
        signal.raise_signal(signal.SIGINT)
        return write(path, state)

    monkeypatch.setattr(checkpoint, "write", interrupted_write)
    with pytest.raises(TrainingInterrupted, match=r"saved iteration 2 \(256 env steps\)"):
        runner.train()
    runner.close()
    monkeypatch.undo()
    assert checkpoint.read(tmp_path / "twice" / "checkpoints" / "step_0000000256.pt")["env_steps"] == 256
    resumed = Runner.resume(tmp_path / "twice", Console(quiet=True))
    assert resumed.env_steps == 256
    assert resumed.train()["env_steps"] == 1024
    resumed.close()


def test_ctrl_c_counts_only_inside_a_write_and_the_next_stops_at_once():
    before = signal.getsignal(signal.SIGINT)  # Python's handler, or SIG_IGN where a shell started us in the background
    said = []
    stops = StopRequests(said.append)
    with stops.installed():
        signal.raise_signal(signal.SIGINT)
        assert stops.requested and said == [stops.notice]
        with stops.deferred():
            signal.raise_signal(signal.SIGINT)  # would stop at once, but a checkpoint is being written
        assert stops.count == 2 and "finishes first" in said[-1]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # given back as it was
