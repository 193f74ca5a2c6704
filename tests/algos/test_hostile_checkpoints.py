"""A checkpoint whose pickle would run code is refused with a clear error by every command that loads one
(eval, train --resume, train init_policy=, collect --policy, export, deploy): nothing in it runs."""

import builtins
import hashlib
import io
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from policyforge.algos import checkpoint
from policyforge.algos.checkpoint import CheckpointError
from policyforge.cli import main

REFUSED = "is not a policyforge checkpoint, or is unsafe"


class RunsCode:
    """Unpickling this calls `function(argument)`, as a malicious checkpoint would."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


def hostile_files(marker: Path) -> dict[str, bytes]:
    """Files that create `marker` when unpickled by torch.load(weights_only=False) or pickle.load."""
    shell = RunsCode(os.system, f"touch {marker}")
    python = RunsCode(builtins.exec, f"open({str(marker)!r}, 'w').close()")
    saved = io.BytesIO()
    torch.save({"algo": {"policy": shell}, "env_steps": 0}, saved)
    inner = saved.getvalue()
    wrapped = io.BytesIO()  # the current format around a payload that runs code, with a matching sha256
    payload = torch.frombuffer(bytearray(inner), dtype=torch.uint8)
    sha256 = hashlib.sha256(inner).hexdigest()
    torch.save({"format": checkpoint.FORMAT, "sha256": sha256, "payload": payload}, wrapped)
    return {
        "pickle": pickle.dumps(shell),
        "exec": pickle.dumps(python),
        "torch.save": inner,
        "wrapped": wrapped.getvalue(),
    }


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps messages at the terminal's width


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "code-ran"


@pytest.mark.parametrize("kind", ["pickle", "exec", "torch.save", "wrapped"])
def test_a_file_that_would_run_code_is_refused(tmp_path, marker, kind):
    path = tmp_path / "evil.pt"
    path.write_bytes(hostile_files(marker)[kind])
    with pytest.raises(CheckpointError, match=re.escape(f"{path} {REFUSED}")):
        checkpoint.read(path)
    assert not marker.exists()


def make_hostile(run: Path, marker: Path) -> Path:
    """Replace every checkpoint of `run` with one that would run code."""
    for path in (run / "checkpoints").iterdir():
        path.write_bytes(hostile_files(marker)["torch.save"])
    return run


ENTRY_POINTS = {
    "eval": lambda run, evil, out, tiny: ["eval", str(run), "--envs", "2"],
    "eval --checkpoint FILE": lambda run, evil, out, tiny: ["eval", str(run), "--checkpoint", str(evil)],
    "train --resume": lambda run, evil, out, tiny: ["train", "--resume", str(run)],
    "train init_policy=RUN": lambda run, evil, out, tiny: ["train", *tiny, f"out_dir={out}", f"init_policy={run}"],
    "train init_policy=FILE": lambda run, evil, out, tiny: ["train", *tiny, f"out_dir={out}", f"init_policy={evil}"],
    "collect --policy": lambda run, evil, out, tiny: (
        ["collect", "pendulum-swingup", "--episodes", "1", "--envs", "1"]
        + ["--policy", str(run), "--out", str(out / "data")]
    ),
    "export": lambda run, evil, out, tiny: ["export", str(run), "--format", "onnx"],
    "export --checkpoint FILE": lambda run, evil, out, tiny: [
        "export",
        str(run),
        "--format",
        "onnx",
        "--checkpoint",
        str(evil),
    ],
    "deploy": lambda run, evil, out, tiny: ["deploy", str(run), "--seconds", "1"],  # exports the run's policy first
}
"""Each command that loads a checkpoint → its arguments, given a run, a hostile file, an output directory and
the tiny run's training arguments."""


@pytest.mark.parametrize("command", ENTRY_POINTS)
def test_every_command_refuses_a_hostile_checkpoint(run_copy, marker, tmp_path, capsys, tiny_run_args, command):
    evil = tmp_path / "evil.pt"
    evil.write_bytes(hostile_files(marker)["pickle"])
    if "FILE" not in command:
        make_hostile(run_copy, marker)
    assert main(ENTRY_POINTS[command](run_copy, evil, tmp_path / "out", tiny_run_args)) == 2
    assert REFUSED in capsys.readouterr().out
    assert not marker.exists()


def test_the_command_line_prints_the_refusal_without_a_traceback(run_copy, marker):
    command = [sys.executable, "-m", "policyforge.cli", "eval", str(make_hostile(run_copy, marker))]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stdout + result.stderr
    assert REFUSED in result.stdout.replace("\n", "") and not marker.exists()
