"""runner.wandb: the scalars of metrics.jsonl (and TensorBoard) also go to Weights & Biases, offline by default, under
the run directory; without the optional `wandb` package the run is refused naming runner.wandb and the install."""

import json
import struct
import sys
from pathlib import Path

import pytest

from policyforge.algos.logger import read_metrics
from policyforge.cli import main

try:
    import wandb  # noqa: F401

    HAVE_WANDB = True
except ImportError:
    HAVE_WANDB = False


def wandb_history(transaction_log: Path) -> list[dict]:
    """The history rows of an offline W&B run file (`run-<id>.wandb`: a LevelDB-style log of Record protobufs in
    32 KiB blocks after a 7-byte W&B header; each chunk has a 7-byte header crc32 / length / type, type 1 a whole
    record, 2-4 its first / middle / last part)."""
    from wandb.proto import wandb_internal_pb2

    raw, block, position, pending, rows = transaction_log.read_bytes(), 32768, 7, b"", []
    assert raw[1:4] == b"W&B", "a W&B transaction log"
    while position + 7 <= len(raw):
        room = block - position % block
        if room < 7:  # a block's tail too short for a chunk header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        pending += raw[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
    return rows


@pytest.mark.skipif(not HAVE_WANDB, reason="the optional wandb extra is not installed (pip install '.[wandb]')")
def test_wandb_logs_the_same_scalars_offline_under_the_run(tmp_path, tiny_run_args, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    arguments = [*tiny_run_args, "runner.eval_every_steps=512", f"out_dir={tmp_path}", "name=w", "runner.wandb=true"]
    assert main(["train", *arguments]) == 0
    run_dir = tmp_path / "w"
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    assert f"W&B offline: {offline} (upload: wandb sync {offline})" in capsys.readouterr().out.replace("\n", "")
    (log,) = offline.glob("run-*.wandb")
    logged = [{k: v for k, v in row.items() if not k.startswith("_")} for row in wandb_history(log)]
    expected = read_metrics(run_dir)
    assert len(expected) == 9 and any("eval/return" in r for r in expected[:-1]), "8 iterations + the final eval"
    assert logged == expected


def test_wandb_without_the_package_is_a_clear_error(tmp_path, tiny_run_args, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError, as where it is missing
    assert main(["train", *tiny_run_args, f"out_dir={tmp_path}", "name=w", "runner.wandb=true"]) == 2
    message = " ".join(capsys.readouterr().out.split())
    assert "runner.wandb: is true but the wandb package is not installed: pip install wandb==0.30.0" in message
    assert not list(tmp_path.glob("w/checkpoints/*"))
