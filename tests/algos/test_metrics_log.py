"""metrics.jsonl survives failed writes: appended to while training, rewritten only atomically (a write that fails
leaves the old file whole), read past blank lines and a torn last line."""

import json
import logging
import os
import resource
import signal
import subprocess
import sys

import pytest
import torch

from policyforge.algos import checkpoint
from policyforge.algos.logger import METRICS_FILE, MetricsError, MetricsLogger, read_metrics

RECORDS = [{"env_steps": 128, "train/return": 1.5}, {"env_steps": 256, "train/return": 2.5}]


def write_lines(run_dir, lines: list[str]) -> None:
    (run_dir / METRICS_FILE).write_text("".join(line + "\n" for line in lines))


def test_blank_lines_and_a_torn_last_line_are_skipped(tmp_path, caplog):
    write_lines(tmp_path, ["", json.dumps(RECORDS[0]), "  ", json.dumps(RECORDS[1]), "", '{"env_steps": 384, "tr'])
    with caplog.at_level(logging.WARNING, "policyforge.algos.logger"):
        assert read_metrics(tmp_path) == RECORDS
    assert "ignoring its torn last line" in caplog.text


def test_a_bad_line_before_the_last_is_an_error_naming_it(tmp_path):
    write_lines(tmp_path, [json.dumps(RECORDS[0]), "{not json", json.dumps(RECORDS[1])])
    with pytest.raises(MetricsError, match=r"metrics.jsonl, line 2, is not a JSON record"):
        read_metrics(tmp_path)


def test_resuming_drops_later_records_and_repairs_the_file_by_replacing_it(tmp_path):
    later = {"env_steps": 384, "train/return": 3.5}
    write_lines(tmp_path, [json.dumps(RECORDS[0]), "", json.dumps(RECORDS[1]), json.dumps(later), '{"env_st'])
    before = (tmp_path / METRICS_FILE).stat().st_ino
    logger = MetricsLogger(tmp_path, resume_step=256, tensorboard=False)
    assert (tmp_path / METRICS_FILE).stat().st_ino != before, "rewritten in place"
    logger.log(384, {"train/return": 4.0})
    logger.close()
    assert read_metrics(tmp_path) == [*RECORDS, {"env_steps": 384, "train/return": 4.0}]
    unchanged = (tmp_path / METRICS_FILE).stat()
    MetricsLogger(tmp_path, resume_step=384, tensorboard=False).close()  # nothing to drop: left alone
    after = (tmp_path / METRICS_FILE).stat()
    assert (after.st_ino, after.st_mtime_ns) == (unchanged.st_ino, unchanged.st_mtime_ns)


def resume_with_file_size_limit(run_dir, limit: int | None, *overrides: str) -> subprocess.CompletedProcess:
    """`policyforge train --resume run_dir [overrides]` in a process whose files cannot grow past `limit` bytes."""

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    command = [sys.executable, "-m", "policyforge.cli", "train", "--resume", str(run_dir), *overrides]
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run(command, preexec_fn=limited if limit else None, capture_output=True, text=True, env=env)


def test_writes_that_fail_during_resume_lose_no_metrics(finished_run, run_copy, learning_records):
    """A run killed after logging iteration 8 but before its final checkpoint (its latest is iteration 6) is
    resumed under a file-size limit: first so small that dropping the records after iteration 6 cannot be
    written, then so that the first new record is cut short. Neither loses a record; a normal resume then ends
    exactly as the uninterrupted run."""
    checkpoints = run_copy / "checkpoints"
    (checkpoints / "latest.pt").write_bytes((checkpoints / "step_0000000768.pt").read_bytes())
    (checkpoints / "step_0000001024.pt").unlink()
    metrics = run_copy / METRICS_FILE
    original = metrics.read_text()
    kept = "".join(line + "\n" for line in original.splitlines() if json.loads(line)["env_steps"] <= 768)
    assert len(kept) < len(original)

    failed = resume_with_file_size_limit(run_copy, len(kept) // 2)
    assert failed.returncode == 2 and "File too large" in failed.stdout, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr
    assert metrics.read_text() == original

    failed = resume_with_file_size_limit(run_copy, len(kept) + 100)
    assert failed.returncode == 2 and "File too large" in failed.stdout, failed.stdout + failed.stderr
    assert metrics.read_text().startswith(kept) and len(metrics.read_text()) == len(kept) + 100  # a torn line

    done = resume_with_file_size_limit(run_copy, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert learning_records(run_copy) == learning_records(finished_run)
    whole, resumed = (
        checkpoint.read(r / "checkpoints" / "latest.pt")["algo"]["policy"] for r in (finished_run, run_copy)
    )
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)


def test_a_checkpoint_or_config_write_that_fails_is_a_clear_error_and_loses_nothing(
    finished_run, run_copy, learning_records
):
    """Resumed under a file-size limit above metrics.jsonl but below a checkpoint, the run stops at its first
    checkpoint with exit 2 naming the failure (torch's own writer would report a bare RuntimeError); a resume whose
    `runner.*` override cannot rewrite config.yaml stops the same way and leaves config.yaml whole. A normal resume
    then ends exactly as the uninterrupted run."""
    checkpoints = run_copy / "checkpoints"
    (checkpoints / "latest.pt").write_bytes((checkpoints / "step_0000000384.pt").read_bytes())
    for later in ("step_0000000768.pt", "step_0000001024.pt"):
        (checkpoints / later).unlink()
    before = {path.name: path.read_bytes() for path in checkpoints.iterdir()}
    limit = min(len(data) for data in before.values()) // 2
    assert (run_copy / METRICS_FILE).stat().st_size < limit

    failed = resume_with_file_size_limit(run_copy, limit)
    assert failed.returncode == 2 and "File too large" in failed.stdout, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stdout + failed.stderr
    assert {path.name: path.read_bytes() for path in checkpoints.iterdir()} == before

    config = (run_copy / "config.yaml").read_text()
    failed = resume_with_file_size_limit(run_copy, len(config) // 2, "runner.eval_envs=3")
    assert failed.returncode == 2 and "File too large" in failed.stdout, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stdout + failed.stderr
    assert (run_copy / "config.yaml").read_text() == config

    done = resume_with_file_size_limit(run_copy, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert learning_records(run_copy) == learning_records(finished_run)


def test_a_run_that_never_checkpointed_is_trained_from_the_beginning_on_resume(
    finished_run, run_copy, learning_records
):
    """A start whose first checkpoint could not be written (a full disk) leaves config, marker and metrics but no
    checkpoint: `--resume` trains it from the beginning (it said "no checkpoint" while `train` said "resume it")."""
    for path in (run_copy / "checkpoints").iterdir():
        path.unlink()
    done = resume_with_file_size_limit(run_copy, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "has no checkpoint yet: training it from the beginning" in done.stdout
    assert learning_records(run_copy) == learning_records(finished_run)
