"""Export a policy's deterministic path (`act`, normaliser included) to ONNX or TorchScript, and check it.

The exported graph maps observations (state [B, D] float32, or a history [B, T_o, D] and images [B, T_o, V, H, W, 3]
uint8 for chunked policies) to action chunks [B, H, A] in [-1, 1]; a JSON file beside it says which inputs it
expects and what the actions mean. A per-step residual's graph maps (obs [B, D], base_action [B, A]) to [B, 1, A];
its base's graph is written beside it (`<name>_base.onnx`, named by "base" in the JSON), and a deployment runs
the base's chunks and feeds each step's base action to the residual (`real_robot.deploy.ExportedPolicy`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from policyforge.io import atomic_path
from policyforge.policies.base import Obs, Policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.residual import BASE_ACTION_KEY, ResidualPolicy

Format = Literal["onnx", "torchscript"]
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}


INPUT_NAMES = {IMAGE_KEY: "image", BASE_ACTION_KEY: "base_action"}
"""Graph input name of each observation key; the policy's state is called "obs"."""


def input_names(policy: Policy) -> list[str]:
    """The observation keys `act` reads, in graph-input order."""
    return list(policy.example_obs(1))


class ActGraph(nn.Module):
    """`policy.act` on bare tensors: (obs [B, ...], image? [B, ...]) → actions [B, H, A]."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy, self.keys = policy, input_names(policy)

    def forward(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        """`extra`: the image of image policies, the base action of per-step residuals."""
        inputs = (obs,) if extra is None else (obs, extra)
        return self.policy.act(dict(zip(self.keys, inputs, strict=True)))


def export(policy: Policy, path: Path, fmt: Format, metadata: dict[str, Any] | None = None) -> Path:
    """Write the graph to `path` (atomically) and its description to `path` with suffix .json. Chunked
    policies are exported with their whole deterministic sampler (a fixed number of steps) inside."""
    path = Path(path)
    base = {}
    if isinstance(policy, ResidualPolicy) and policy.per_step:
        base_path = path.with_name(f"{path.stem}_base{path.suffix}")
        export(policy.base, base_path, fmt, metadata)
        base = {"base": base_path.name}
    graph = ActGraph(policy).eval()
    example = tuple(policy.example_obs(2).values())
    names = [INPUT_NAMES.get(key, "obs") for key in graph.keys]
    with torch.no_grad(), atomic_path(path) as tmp:
        if fmt == "torchscript":
            with warnings.catch_warnings():  # deprecated in favour of torch.export, still what C++ deploys load
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                traced = torch.jit.freeze(torch.jit.trace(graph, example))
                torch.jit.save(traced, str(tmp))
        elif fmt == "onnx":
            batch = torch.export.Dim("batch", min=1)
            torch.onnx.export(
                graph,
                example,
                str(tmp),
                dynamo=True,
                input_names=names,
                output_names=["action"],
                dynamic_shapes=tuple({0: batch} for _ in example),
                external_data=False,  # one self-contained file (weights inside), whatever the temp file's name
                verbose=False,
            )
        else:
            raise ValueError(f"unknown export format {fmt!r}; use onnx or torchscript")
    spec = {
        **policy.export_spec(),
        "format": fmt,
        "obs_dim": int(example[0].shape[-1]),
        "inputs": {name: [*value.shape[1:]] for name, value in zip(names, example, strict=True)},
        "input": "obs [B, ...] float32 (state, normalised inside); image [B, ...] uint8 for image policies",
        "output": "action [B, chunk_len, action_dim] in [-1, 1]",
        **base,
        **(metadata or {}),
    }
    with atomic_path(path.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def load_exported(path: Path) -> Callable[..., np.ndarray]:
    """A callable (obs, image?) numpy arrays → actions [B, H, A] (numpy) running the exported file."""
    path = Path(path)
    if path.suffix == ".onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # batch-1 control: extra threads only spin against the control loop
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda *inputs: session.run(None, dict(zip(names, inputs, strict=True)))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path))
    return lambda *inputs: module(*(torch.as_tensor(x) for x in inputs)).numpy()


@torch.no_grad()
def max_export_error(policy: Policy, path: Path, obs: Obs) -> float:
    """Largest |exported(obs) − policy.act(obs)| over a batch of observations (the keys `act` reads)."""
    expected = policy.act(obs).numpy()
    inputs = [obs[key].numpy() for key in input_names(policy)]
    return float(np.abs(load_exported(path)(*inputs) - expected).max())
