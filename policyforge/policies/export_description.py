"""The JSON description beside an exported graph: everything a deployer needs to drive the graph without reading
policyforge's code, written (`describe`) and read (`load_description`) in one place.

One description per exported file, named after the file's whole name: `policy.onnx` → `policy.onnx.json`,
`policy.pt` → `policy.pt.json`. Exports of earlier policyforge versions shared one `policy.json` between both
formats, so after exporting both it described whichever came last; such a `<stem>.json` is still read for the
graph whose format it names (deployed robots keep their exports) and refused, naming both files, for the other.

What a description says (a complete example: `policyforge export RUN --format onnx`, then RUN/export):

    format, runtime           "onnx" | "torchscript", and how to run it
    action_dim, obs_dim       A, D
    chunk_len, act_steps      H actions per call; the first act_steps are executed, one per control step
    n_obs_steps               T_o: inputs with a history axis hold the last T_o steps (0: no history axis)
    observation               per graph input, in input order: its observation key, shape, dtype, feature names
                              (state), camera names (images), what its values are
    history, chunk, action    the order of the history (oldest first), how an episode starts (the first frame
                              repeated), how chunks are executed, what an action in [-1, 1] commands
    task, control_dt, task_options, source, graph_sha256, base   where the policy came from, its graph's sha256,
                              a per-step residual's base graph
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from policyforge.errors import UserError
from policyforge.policies.base import Policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.residual import BASE_ACTION_KEY

SCHEMA = "policyforge-export/2"
"""Version of the description's layout; /1 (no `schema` field) shared one `<stem>.json` between formats."""
HISTORY_ORDER = "oldest_first"
EPISODE_START = "repeat_first"
FORMAT_OF_SUFFIX = {".onnx": "onnx", ".pt": "torchscript"}
GRAPH_INPUT = {IMAGE_KEY: "image", BASE_ACTION_KEY: "base_action", "instruction": "instruction"}
"""Graph input name of each observation key; the policy's state is called "obs"."""
RUNTIME = {
    "onnx": "ONNX, weights inside the file; feed the inputs by name (onnxruntime: session.run(None, {name: "
    "array})), output 'action'",
    "torchscript": "TorchScript (torch.jit.load; C++: torch::jit::load); call it with the inputs in the order of "
    "`observation`, it returns the action tensor",
}


class DescriptionError(UserError):
    """An export description that is missing, unreadable, or describes another file."""


def description_path(path: Path) -> Path:
    """Where the description of the exported graph `path` is written: beside it, `<file name>.json`."""
    path = Path(path)
    return path.with_name(f"{path.name}.json")


def rollout_layout(policy: Policy) -> dict[str, int]:
    """How `policy` is driven between decisions (the `Policy` contract): n_obs_steps (T_o; 0 = no history axis),
    chunk_len (H) and act_steps (executed actions per chunk)."""
    return {"chunk_len": policy.chunk_len, "act_steps": policy.act_steps, "n_obs_steps": policy.n_obs_steps}


def describe(
    policy: Policy, fmt: str, inputs: dict[str, torch.Tensor], metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The description of `policy`'s graph in format `fmt`. `inputs`: the example observations the graph was
    traced with, by observation key in graph-input order, [B, ...]. `metadata` (what the policy was trained
    on, `export.run_metadata`): `obs_features` (the D names of obs["policy"]), `cameras` and `action_meaning` go
    into the layout, everything else (task, control_dt, task_options, source) to the top level."""
    metadata = dict(metadata or {})
    features = metadata.pop("obs_features", None)
    cameras = metadata.pop("cameras", None)
    meaning = metadata.pop("action_meaning", None)
    rollout = rollout_layout(policy)
    state = inputs[policy.obs_key]
    if features is None or policy.obs_key != "policy":  # not known here (no task), or not the task's `policy` names
        features = [f"{policy.obs_key}[{i}]" for i in range(state.shape[-1])]
    if len(features) != state.shape[-1]:
        raise ValueError(f"{len(features)} observation feature names for observations of size {state.shape[-1]}")
    observation = {}
    for key, example in inputs.items():
        entry = {"observation_key": key, "shape": ["B", *example.shape[1:]], "dtype": str(example.dtype)[6:]}
        if key == policy.obs_key:
            history = ["history"] if example.dim() == 3 else []
            entry |= {"axes": ["batch", *history, "feature"], "features": list(features)}
            entry["values"] = "raw, as the task observes them (the graph normalises them itself)"
        elif key == IMAGE_KEY:
            entry["axes"] = ["batch", "history", "camera", "height", "width", "rgb"]
            entry["cameras"] = list(cameras) if cameras else None
            entry["values"] = "RGB 0-255, rows top to bottom, one image per camera in the order of `cameras`"
        elif key == BASE_ACTION_KEY:
            entry["axes"] = ["batch", "action"]
            entry["values"] = (
                "this step's action of the base policy in [-1, 1]: run the graph named by `base` as its own "
                "description says (its chunks, history and act_steps) and take the action it executes now"
            )
        elif key == "instruction":
            entry["axes"] = ["batch", "token"]
            entry["values"] = (
                "the instruction's token ids: all-MiniLM-L6-v2 WordPiece, [CLS]=101 … [SEP]=102 then [PAD]=0 "
                "(policyforge.sims.instruction_obs.InstructionTokenizer); the text encoder is inside the graph"
            )
        observation[GRAPH_INPUT.get(key, "obs")] = entry
    return {
        "schema": SCHEMA,
        "format": fmt,
        "runtime": RUNTIME[fmt],
        **policy.export_spec(),
        **rollout,
        "obs_dim": int(state.shape[-1]),
        "inputs": {name: entry["shape"][1:] for name, entry in observation.items()},  # older readers
        "observation": observation,
        "history": _history(rollout["n_obs_steps"]),
        "chunk": {
            "description": f"each call plans chunk_len={rollout['chunk_len']} actions from the inputs at the current "
            f"step; execute the first act_steps={rollout['act_steps']} of them, one per control step, then call "
            "again with the inputs of that step. A new episode discards the rest of the chunk and restarts the "
            "history"
        },
        "action": {
            "graph_output": "action",
            "shape": ["B", rollout["chunk_len"], policy.action_dim],
            "dtype": "float32",
            "range": [-1.0, 1.0],
            "meaning": meaning or "the task's control() turns each action into actuator commands",
        },
        **metadata,
    }


def _history(n_obs_steps: int) -> dict[str, str]:
    """The history part of a description: its order and how an episode starts."""
    if not n_obs_steps:
        description = "no history axis: each input is the current step's observation"
    else:
        description = (
            f"inputs with a history axis hold the last n_obs_steps={n_obs_steps} steps' observations, oldest "
            f"first (index {n_obs_steps - 1} is the current step); an episode's first observation fills every "
            "slot (it is repeated), then each step drops the oldest and appends the newest"
        )
    return {"order": HISTORY_ORDER, "episode_start": EPISODE_START, "description": description}


def description_file(path: Path) -> Path:
    """The description to read for the exported graph `path`: `<file name>.json`, or for an export of an older
    policyforge (which wrote none) its `<stem>.json`."""
    current, legacy = description_path(path), Path(path).with_suffix(".json")
    return current if current.exists() or not legacy.exists() else legacy


def load_description(path: Path) -> dict[str, Any]:
    """The description of the exported graph `path`, parsed. DescriptionError naming the file when it is missing,
    unreadable, not an object, or an older shared `<stem>.json` that describes the other format's graph."""
    path = Path(path)
    file = description_file(path)
    fix = f"export it again with `policyforge export RUN` (it writes {path.name} and {description_path(path).name})"
    try:
        spec = json.loads(file.read_text())
    except FileNotFoundError:
        raise DescriptionError(f"{description_path(path)} is missing: {fix}") from None
    except (OSError, ValueError) as err:
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:300]
        raise DescriptionError(f"{file} is not a readable export description ({reason}): {fix}") from None
    if not isinstance(spec, dict):
        raise DescriptionError(f"{file} is not a readable export description (not a JSON object): {fix}")
    expected = FORMAT_OF_SUFFIX.get(path.suffix)
    if file != description_path(path) and expected is not None and spec.get("format") != expected:
        raise DescriptionError(
            f"{file} describes a {spec.get('format')} export, not {path.name} ({expected}): older policyforge "
            f"versions shared one {file.name} between formats, so it describes the format exported last; {fix}"
        )
    return spec
