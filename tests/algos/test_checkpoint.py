"""Checkpoints: tensors and plain data that torch's weights-only loader reads, a sha256 that catches damage, the
previous format still readable, a run falling back to its newest intact checkpoint (and resuming from it exactly),
a run lock, and a finished run left alone."""

import collections
import hashlib
import io
import logging
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from policyforge.algos import checkpoint
from policyforge.algos.checkpoint import CheckpointError
from policyforge.cli import main

CHECKPOINT_LOG = "policyforge.algos.checkpoint"


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps messages at the terminal's width


def parameters(state: dict) -> dict[str, torch.Tensor]:
    return {**state["algo"]["policy"], **{f"critic.{k}": v for k, v in state["algo"]["critic"].items()}}


def test_a_checkpoint_is_tensors_and_plain_data_read_weights_only(finished_run):
    latest = finished_run / "checkpoints" / "latest.pt"
    assert torch.serialization.get_unsafe_globals_in_checkpoint(latest) == []
    container = torch.load(latest, weights_only=True)  # torch's default allowlist, nothing added
    assert container["format"] == checkpoint.FORMAT
    assert hashlib.sha256(container["payload"].numpy()).hexdigest() == container["sha256"]
    state = torch.load(io.BytesIO(container["payload"].numpy().tobytes()), weights_only=True)
    assert state["env_steps"] == 1024 and state["finished"] is True
    restored = checkpoint.read(latest)
    physics = restored["env"]["physics"]  # numpy in the simulator's snapshot comes back as numpy
    assert isinstance(physics, np.ndarray) and physics.dtype == np.float64 and physics.shape == (8, 18)
    assert isinstance(restored["rng"]["numpy"][1], np.ndarray) and restored["rng"]["numpy"][1].dtype == np.uint32


def test_state_round_trips_exactly(tmp_path):
    arrays = {code: (np.arange(6) % 3).astype(code).reshape(2, 3) for code in "?bBhHiIlLqQefdFD"}
    weights = collections.OrderedDict(w=torch.randn(3))
    weights._metadata = {"": {"version": 2}}  # what nn.Module.state_dict carries
    state = {
        "algo": {"policy": weights, "step": 7},
        "arrays": arrays,
        "scalars": (np.float64(1.5), np.int32(-3), np.bool_(True)),
        "rng": ("MT19937", np.arange(624, dtype=np.uint32), 624, 0, 0.0),
        "python": (3, tuple(range(625)), None),
        "big": 2**127 + 1,
        "strided": np.arange(10.0)[::-2],
    }
    back = checkpoint.read(checkpoint.write(tmp_path / "state.pt", state))
    for code, array in arrays.items():
        assert back["arrays"][code].dtype == array.dtype and np.array_equal(back["arrays"][code], array), code
    assert [type(x) for x in back["scalars"]] == [np.float64, np.int32, np.bool_] and back["scalars"][1] == -3
    assert back["rng"][0] == "MT19937" and back["rng"][2:] == (624, 0, 0.0)
    assert np.array_equal(back["rng"][1], state["rng"][1])
    assert back["python"] == state["python"] and back["big"] == 2**127 + 1
    assert np.array_equal(back["strided"], state["strided"])
    assert torch.equal(back["algo"]["policy"]["w"], weights["w"])
    assert back["algo"]["policy"]._metadata == weights._metadata
    with pytest.raises(TypeError, match="tensors and plain data only, not PosixPath"):
        checkpoint.write(tmp_path / "bad.pt", {"algo": {}, "where": tmp_path})
    assert not (tmp_path / "bad.pt").exists()


@pytest.mark.parametrize("seed", range(6))
def test_fifty_flipped_bytes_are_detected(finished_run, tmp_path, seed):
    data = bytearray((finished_run / "checkpoints" / "latest.pt").read_bytes())
    generator = np.random.default_rng(seed)
    if seed < 3:  # anywhere in the file
        positions = generator.choice(len(data), 50, replace=False)
    else:  # inside the payload, past torch's own checks
        container = torch.load(finished_run / "checkpoints" / "latest.pt", weights_only=True)
        start = bytes(data).find(container["payload"].numpy().tobytes()[:4096])
        positions = start + generator.choice(len(container["payload"]), 50, replace=False)
    for position in positions:
        data[position] ^= 0xFF
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=re.escape(str(damaged))) as error:
        checkpoint.read(damaged)
    if seed >= 3:
        assert "is damaged: its contents hash to sha256" in str(error.value)


def test_previous_format_loads_with_a_warning_and_resumes_exactly(finished_run, run_copy, caplog, learning_records):
    """Checkpoints of the previous format (plain torch.save, numpy arrays, no checksum) keep working."""
    checkpoints = run_copy / "checkpoints"
    old = checkpoint.read(checkpoints / "step_0000000768.pt")
    del old["finished"]
    for path in checkpoints.iterdir():
        path.unlink()
    torch.save(old, checkpoints / "latest.pt")  # what the previous format's save() wrote
    with caplog.at_level(logging.WARNING, CHECKPOINT_LOG):
        back = checkpoint.load(run_copy)
    assert "previous format, without a checksum" in caplog.text and back["env_steps"] == 768
    assert isinstance(back["env"]["physics"], np.ndarray)
    assert main(["train", "--resume", str(run_copy)]) == 0
    whole, resumed = (parameters(checkpoint.read(r / "checkpoints" / "latest.pt")) for r in (finished_run, run_copy))
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    assert learning_records(run_copy) == learning_records(finished_run)


def test_torch_files_that_are_not_checkpoints_are_refused(tmp_path):
    weights = tmp_path / "weights.pt"
    torch.save({"layer.weight": torch.zeros(2)}, weights)
    with pytest.raises(CheckpointError, match=re.escape(f"{weights} is not a policyforge checkpoint")):
        checkpoint.read(weights)
    odd = tmp_path / "odd.pt"
    torch.save({"algo": {}, "when": collections.deque([1])}, odd)  # a class outside the allowlists
    with pytest.raises(
        CheckpointError, match=re.escape(f"{odd} is not a policyforge checkpoint, or is unsafe") + ".*deque"
    ):
        checkpoint.read(odd)
    newer = tmp_path / "newer.pt"
    torch.save(
        {"format": "policyforge-checkpoint/9", "sha256": "", "payload": torch.zeros(1, dtype=torch.uint8)}, newer
    )
    with pytest.raises(CheckpointError, match="has format 'policyforge-checkpoint/9'"):
        checkpoint.read(newer)


DAMAGE = {
    "empty": lambda path: path.write_bytes(b""),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "deleted": lambda path: path.unlink(),
    "flipped": lambda path: path.write_bytes(path.read_bytes()[:-5000] + bytes(50) + path.read_bytes()[-4950:]),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_latest_falls_back_to_the_newest_numbered_checkpoint(run_copy, damage, caplog, capsys):
    latest = run_copy / "checkpoints" / "latest.pt"
    DAMAGE[damage](latest)
    with caplog.at_level(logging.WARNING, CHECKPOINT_LOG):
        loaded, state = checkpoint.newest(run_copy)
        assert main(["eval", str(run_copy), "--envs", "2"]) == 0
    assert loaded.name == "step_0000001024.pt" and state["env_steps"] == 1024
    assert "eval/return" in capsys.readouterr().out
    assert f"{latest} is " in caplog.text and "trying an older checkpoint" in caplog.text
    assert f"loaded {run_copy / 'checkpoints' / 'step_0000001024.pt'}, the newest intact checkpoint" in caplog.text


def test_resume_from_an_older_numbered_checkpoint_is_exact(finished_run, run_copy, caplog, learning_records):
    """latest.pt gone and the final checkpoint (iteration 8) cut short: the run resumes from iteration 6's, drops
    the metrics logged after it, and ends exactly as the uninterrupted run did."""
    (run_copy / "checkpoints" / "latest.pt").unlink()
    DAMAGE["truncated"](run_copy / "checkpoints" / "step_0000001024.pt")
    with caplog.at_level(logging.WARNING, CHECKPOINT_LOG):
        assert main(["train", "--resume", str(run_copy)]) == 0
    assert "step_0000001024.pt is damaged or not a checkpoint" in caplog.text
    whole, resumed = (parameters(checkpoint.read(r / "checkpoints" / "latest.pt")) for r in (finished_run, run_copy))
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    assert learning_records(run_copy) == learning_records(finished_run)


def test_no_intact_checkpoint_is_a_clear_error(run_copy, tmp_path, capsys):
    checkpoints = checkpoint.files(run_copy)  # latest.pt and the numbered ones (best.pt is never resumed from)
    for path in checkpoints:
        DAMAGE["empty"](path)
    assert main(["eval", str(run_copy)]) == 2
    out = capsys.readouterr().out
    assert f"no intact checkpoint in {run_copy}" in out
    assert all(f"{path.name} is empty" in out for path in checkpoints)
    (tmp_path / "fresh").mkdir()
    with pytest.raises(CheckpointError, match=r"no checkpoint in .*was the run started"):
        checkpoint.load(tmp_path / "fresh")


def test_one_process_trains_a_run_at_a_time_and_a_killed_one_frees_it(run_copy, capsys):
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "policyforge.cli",
            "train",
            "--resume",
            str(run_copy),
            "runner.total_env_steps=10000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lock = run_copy / "train.lock"
    try:
        deadline = time.time() + 120
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)) and time.time() < deadline:
            assert first.poll() is None, "the first resume ended early"
            time.sleep(0.05)
        assert main(["train", "--resume", str(run_copy), "runner.total_env_steps=2048"]) == 2
        assert f"is being trained by process {first.pid}" in capsys.readouterr().out
    finally:
        first.kill()  # SIGKILL: the kernel drops its lock
        first.wait()
    longer = checkpoint.load(run_copy)["env_steps"] + 128
    assert main(["train", "--resume", str(run_copy), f"runner.total_env_steps={longer}"]) == 0
    assert checkpoint.read(run_copy / "checkpoints" / "latest.pt")["env_steps"] == longer


def test_resuming_a_finished_run_changes_nothing_and_says_how_to_train_longer(run_copy, capsys):
    def contents():
        files = [p for p in run_copy.rglob("*") if p.is_file() and p.name != "train.lock"]
        return {str(p.relative_to(run_copy)): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}

    before = contents()
    assert main(["train", "--resume", str(run_copy), "runner.eval_envs=4"]) == 2
    out = capsys.readouterr().out
    assert f"resuming {run_copy} at" not in out
    assert "has finished (runner.total_env_steps=1,024, evaluated)" in out
    assert f"policyforge train --resume {run_copy} runner.total_env_steps=N" in out
    assert contents() == before
    assert main(["train", "--resume", str(run_copy), "runner.total_env_steps=1152"]) == 0


@pytest.mark.parametrize("backend", ["mujoco", pytest.param("mjx", marks=pytest.mark.slow)])
def test_simulator_snapshots_round_trip_through_a_checkpoint(tmp_path, backend):
    """Every array of both backends' snapshots (float64 physics, uint32 PRNG keys, bools, counters) comes back
    with its dtype, and the restored simulation steps exactly as the original."""
    from policyforge.sims import SimConfig, make_env

    env = make_env(SimConfig(task="pendulum-swingup", num_envs=4, backend=backend))
    env.reset(seed=1)
    actions = torch.linspace(-1, 1, 12).reshape(12, 1, 1).expand(12, 4, 1).contiguous()
    for action in actions[:5]:
        env.step(action)
    snapshot = env.get_state()
    restored = checkpoint.read(checkpoint.write(tmp_path / "snapshot.pt", {"algo": {}, "env": snapshot}))["env"]
    leaves = torch.utils._pytree.tree_leaves
    assert [(type(a), getattr(a, "dtype", None)) for a in leaves(snapshot)] == [
        (type(b), getattr(b, "dtype", None)) for b in leaves(restored)
    ]
    first = [env.step(action)[0]["policy"].clone() for action in actions[5:]]
    env.set_state(restored)
    second = [env.step(action)[0]["policy"].clone() for action in actions[5:]]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    env.close()
