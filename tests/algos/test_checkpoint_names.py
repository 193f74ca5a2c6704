"""Numbered checkpoints carry the run's step count as its logs show it (env steps here; gradient steps for behaviour
cloning, in tests/algos/test_bc.py), `--checkpoint N` takes that count, and a run of an earlier policyforge, whose
numbered checkpoints carry iterations, still loads, resumes, and keeps its newest checkpoint newest."""

import re

import pytest

from policyforge.algos import checkpoint
from policyforge.algos.checkpoint import CheckpointError
from policyforge.algos.logger import read_metrics
from policyforge.cli import main
from policyforge.policies.export import run_checkpoint


def test_numbered_checkpoints_are_named_by_the_step_count_the_run_logged(finished_run):
    logged = read_metrics(finished_run)  # one record per iteration, then the final evaluation's
    numbered = sorted((finished_run / "checkpoints").glob("step_*.pt"))  # as `ls` lists them
    assert [path.name for path in numbered] == ["step_0000000384.pt", "step_0000000768.pt", "step_0000001024.pt"]
    for path in numbered:
        state = checkpoint.read(path)
        assert checkpoint.steps_of(path) == state["env_steps"] == logged[state["iteration"] - 1]["env_steps"]
        assert checkpoint.resolve(finished_run, str(state["env_steps"])) == path
    steps = [999, 20_000_000, 1024, 9_999_999]
    assert sorted(checkpoint.numbered_name(n) for n in steps) == [checkpoint.numbered_name(n) for n in sorted(steps)]


def test_a_run_with_checkpoints_named_by_iteration_resumes_and_its_new_ones_are_newest(
    finished_run, run_copy, learning_records, monkeypatch
):
    """A run of an earlier policyforge killed after iteration 6 (step_00000003.pt, step_00000006.pt, latest.pt of
    iteration 6) resumes exactly; the checkpoint it then saves by steps is the newest, before the old ones."""
    monkeypatch.setenv("COLUMNS", "1000")
    checkpoints = run_copy / "checkpoints"
    (checkpoints / "step_0000000384.pt").rename(checkpoints / "step_00000003.pt")
    (checkpoints / "step_0000000768.pt").rename(checkpoints / "step_00000006.pt")
    (checkpoints / "step_0000001024.pt").unlink()
    (checkpoints / "latest.pt").write_bytes((checkpoints / "step_00000006.pt").read_bytes())
    assert checkpoint.resolve(run_copy, "6") == checkpoints / "step_00000006.pt"  # its names' numbers still work

    assert main(["train", "--resume", str(run_copy)]) == 0
    assert learning_records(run_copy) == learning_records(finished_run)
    order = ["latest.pt", "step_0000001024.pt", "step_00000006.pt", "step_00000003.pt"]
    assert [path.name for path in checkpoint.files(run_copy)] == order
    (checkpoints / "latest.pt").unlink()
    newest, state = checkpoint.newest(run_copy)
    assert newest.name == "step_0000001024.pt" and state["finished"] and run_checkpoint(run_copy) == newest
    expected = (
        "no checkpoint at 99 steps (step_0000000099.pt); it keeps the checkpoints at 1024 steps; named by iteration "
        "by an earlier policyforge, step_00000003.pt (--checkpoint 3), step_00000006.pt (--checkpoint 6)"
    )
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        checkpoint.resolve(run_copy, "99")


def test_on_equal_numbers_the_name_carrying_steps_is_the_newer(tmp_path):
    """A run of one step per iteration resumed from a checkpoint named by iteration 5 saves step 5 again."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    for name in ("step_00000004.pt", "step_0000000005.pt", "step_00000005.pt"):
        (checkpoints / name).write_bytes(b"")
    names = [path.name for path in checkpoint.files(tmp_path)]
    assert names == ["step_0000000005.pt", "step_00000005.pt", "step_00000004.pt"]
    assert checkpoint.resolve(tmp_path, "5").name == run_checkpoint(tmp_path).name == "step_0000000005.pt"
    assert checkpoint.resolve(tmp_path, "4").name == "step_00000004.pt"
    checkpoint.save(checkpoints, {"algo": {}}, 6, keep=2)  # the oldest goes first
    assert sorted(path.name for path in checkpoints.glob("step_*.pt")) == ["step_0000000005.pt", "step_0000000006.pt"]
