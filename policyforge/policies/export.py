"""Export a policy's deterministic path (`act`, normaliser included) to ONNX or TorchScript, and check it.

The exported graph maps observations [B, D] float32 to action chunks [B, H, A] in [-1, 1]; a JSON file
beside it says which observation it expects and what the actions mean.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from policyforge.io import atomic_path
from policyforge.policies.base import Policy

Format = Literal["onnx", "torchscript"]
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}


class ActGraph(nn.Module):
    """`policy.act` on a bare observation tensor: obs [B, D] → actions [B, H, A]."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy.act({self.policy.obs_key: obs})


def export(policy: Policy, obs_dim: int, path: Path, fmt: Format, metadata: dict[str, Any] | None = None) -> Path:
    """Write the graph to `path` (atomically) and its description to `path` with suffix .json."""
    graph = ActGraph(policy).eval()
    example = torch.zeros(2, obs_dim)
    path = Path(path)
    with torch.no_grad(), atomic_path(path) as tmp:
        if fmt == "torchscript":
            with warnings.catch_warnings():  # deprecated in favour of torch.export, still what C++ deploys load
                warnings.simplefilter("ignore", DeprecationWarning)
                traced = torch.jit.freeze(torch.jit.trace(graph, example))
                torch.jit.save(traced, str(tmp))
        elif fmt == "onnx":
            batch = torch.export.Dim("batch", min=1)
            torch.onnx.export(
                graph,
                (example,),
                str(tmp),
                dynamo=True,
                input_names=["obs"],
                output_names=["action"],
                dynamic_shapes=({0: batch},),
                verbose=False,
            )
        else:
            raise ValueError(f"unknown export format {fmt!r}; use onnx or torchscript")
    spec = {
        **policy.export_spec(),
        "obs_dim": obs_dim,
        "format": fmt,
        "input": "obs [B, obs_dim] float32",
        "output": "action [B, chunk_len, action_dim] in [-1, 1]",
        **(metadata or {}),
    }
    with atomic_path(path.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def load_exported(path: Path) -> Any:
    """A callable obs [B, D] (numpy float32) → actions [B, H, A] (numpy) running the exported file."""
    path = Path(path)
    if path.suffix == ".onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return lambda obs: session.run(None, {"obs": np.asarray(obs, dtype=np.float32)})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path))
    return lambda obs: module(torch.as_tensor(np.asarray(obs, dtype=np.float32))).numpy()


@torch.no_grad()
def max_export_error(policy: Policy, path: Path, obs: torch.Tensor) -> float:
    """Largest |exported(obs) − policy.act(obs)| over a batch of observations [B, D]."""
    expected = policy.act({policy.obs_key: obs}).numpy()
    return float(np.abs(load_exported(path)(obs.numpy()) - expected).max())
