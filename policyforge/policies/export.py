"""Export a policy's deterministic path (`act`, normaliser included) to ONNX or TorchScript, and check it.

The exported graph maps observations (state [B, D] float32, or a history [B, T_o, D] and images [B, T_o, V, H, W, 3]
uint8 for chunked policies) to action chunks [B, H, A] in [-1, 1]; the JSON beside each exported file
(`policy.onnx.json`, `policy.pt.json`; `export_description`) says everything a deployer needs: the observation
layout, the history and chunk semantics, what actions mean. Both formats refuse inputs of the wrong shape,
naming the expected one (`export_inputs`). A per-step residual's graph maps (obs [B, D], base_action [B, A]) to
[B, 1, A]; its base's graph is written beside it (`<name>_base.onnx`, named by "base" in the JSON), and a
deployment runs the base's chunks and feeds each step's base action to the residual
(`real_robot.deploy.ExportedPolicy`).

`export_checked` is the checked export: the graph is written to a temporary directory, checked against `act` on
observations spread like the training data (`check_observations`: finite, within the policy's tolerance) and only
then moved into place, so a failed export leaves no file a deployment could pick up. `export_run` exports a
training run's policy that way (`policyforge export`, and `policyforge deploy` of a run, in-process). The
description records the graph's sha256 and where the policy came from (`"source"`: the checkpoint file and its
sha256), so that a deployment can tell an export that is out of date (`stale_reason`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from policyforge.errors import UserError
from policyforge.io import atomic_path
from policyforge.policies.base import Obs, Policy
from policyforge.policies.export_description import (
    GRAPH_INPUT,
    DescriptionError,
    describe,
    description_file,
    description_path,
    load_description,
)
from policyforge.policies.export_inputs import checked_session, checked_torchscript, torchscript_error
from policyforge.policies.residual import BASE_ACTION_KEY, ResidualPolicy
from policyforge.sims.instruction_obs import CLS_ID, INSTRUCTION_KEY, PAD_ID, SEP_ID, VOCAB_SIZE

WORD_IDS = (1000, VOCAB_SIZE)
"""Ids of ordinary WordPiece tokens (below 1000: [PAD], [unused…], [CLS], [SEP], [MASK], single characters)."""

log = logging.getLogger(__name__)

SATURATED_SHARE = 0.9
"""A policy whose action entries sit at the ±1 limits this often is called saturated (bang-bang): weights far
larger than training gives them, or observations far outside the normaliser's statistics. Trained policies here
sit there 0-15% of the time (the shipped walking policy: 15%)."""


def saturated_share(actions: np.ndarray) -> float:
    """Share of the entries of actions [..., A] at the ±1 limits (|a| ≥ 0.999); 0 for no actions."""
    actions = np.asarray(actions)
    return float(np.mean(np.abs(actions) >= 0.999)) if actions.size else 0.0


def saturation_warning(share: float, what: str) -> str | None:
    """A warning naming `what` when `share` of its actions are saturated (see SATURATED_SHARE), else None."""
    if share < SATURATED_SHARE:
        return None
    return (
        f"{what}: {share:.0%} of the policy's actions are at the ±1 limits (bang-bang): its weights may be damaged "
        "or scaled, or its observations far from training; on a robot the safety filter will clamp its steps"
    )


Format = Literal["onnx", "torchscript"]
SUFFIX = {"onnx": ".onnx", "torchscript": ".pt"}


class ExportError(UserError):
    """An export that cannot be trusted (non-finite actions, outputs that differ from `act`) or is out of date."""


def input_names(policy: Policy) -> list[str]:
    """The observation keys `act` reads, in graph-input order."""
    return list(policy.obs_keys)


class ActGraph(nn.Module):
    """`policy.act` on bare tensors, one per observation key in `policy.obs_keys` order: (obs [B, ...], then the
    image, the base action of a per-step residual, the instruction of a VLA …) → actions [B, H, A]."""

    def __init__(self, policy: Policy):
        super().__init__()
        self.policy, self.keys = policy, input_names(policy)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.policy.act(dict(zip(self.keys, inputs, strict=True)))


def export(policy: Policy, path: Path, fmt: Format, metadata: dict[str, Any] | None = None) -> Path:
    """Write the graph to `path` (atomically) and its description beside it (`description_path`: `<name>.json`).
    Chunked policies are exported with their whole deterministic sampler (a fixed number of steps) inside.
    `metadata`: what the policy was trained on (`run_metadata`), written into the description."""
    path = Path(path)
    base = {}
    if isinstance(policy, ResidualPolicy) and policy.per_step:
        base_path = path.with_name(f"{path.stem}_base{path.suffix}")
        export(policy.base, base_path, fmt, metadata)
        base = {"base": base_path.name}
    graph = ActGraph(policy).eval()
    example_obs = policy.example_obs(2)
    example = tuple(example_obs[key] for key in graph.keys)
    names = [GRAPH_INPUT.get(key, "obs") for key in graph.keys]
    with torch.no_grad(), atomic_path(path) as tmp:
        if fmt == "torchscript":
            with warnings.catch_warnings():  # deprecated in favour of torch.export, still what C++ deploys load
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                traced = checked_torchscript(torch.jit.trace(graph, example), list(example), names)
                torch.jit.save(traced, str(tmp))
        elif fmt == "onnx":
            batch = torch.export.Dim("batch", min=1)
            with _quiet_onnx_exporter():
                torch.onnx.export(
                    graph,
                    example,
                    str(tmp),
                    dynamo=True,
                    input_names=names,
                    output_names=["action"],
                    dynamic_shapes=(tuple({0: batch} for _ in example),),  # forward(*inputs): one tuple
                    external_data=False,  # one self-contained file (weights inside), whatever the temp file's name
                    verbose=False,
                )
        else:
            raise ValueError(f"unknown export format {fmt!r}; use onnx or torchscript")
    spec = {**describe(policy, fmt, example_obs, metadata), "graph_sha256": file_sha256(path), **base}
    with atomic_path(description_path(path)) as tmp:
        tmp.write_text(json.dumps(spec, indent=2) + "\n")  # ASCII (\u escapes): read in any locale
    return path


@contextlib.contextmanager
def _quiet_onnx_exporter() -> Iterator[None]:
    """torch's ONNX exporter without its notes to the user about torch's own internals ("torchvision is not
    installed. Skipping torchvision::nms", a pytree FutureWarning, batch axes merged): they concern no policy, and
    an export's result is checked against `act` anyway. Its errors still raise and log."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"(torch|copyreg)")
            # graphs of several inputs share one batch axis: torch notes that it merged their names
            warnings.filterwarnings("ignore", message="# The axis name", category=UserWarning)
            yield
    finally:
        exporter_log.setLevel(level)


def load_exported(path: Path) -> Callable[..., np.ndarray]:
    """A callable (obs, image?) numpy arrays → actions [B, H, A] (numpy) running the exported file; an input of
    the wrong shape or dtype raises ValueError naming the file, the input and its expected shape."""
    path = Path(path)
    if path.suffix == ".onnx":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # batch-1 control: extra threads only spin against the control loop
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return checked_session(session, path.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path))

    def run(*inputs: np.ndarray) -> np.ndarray:
        try:
            return module(*(torch.as_tensor(x) for x in inputs)).numpy()
        except torch.jit.Error as err:  # the graph's input check: its message is the error's last line
            raise torchscript_error(err, path.name) from None

    return run


@torch.no_grad()
def max_export_error(policy: Policy, path: Path, obs: Obs) -> float:
    """Largest |exported(obs) − policy.act(obs)| over a batch of observations (the keys `act` reads); inf when
    either side is not finite (NaN compares as neither larger nor smaller than a tolerance)."""
    difference = np.abs(run_exported(path, policy, obs) - policy.act(obs).numpy())
    return float(difference.max()) if np.all(np.isfinite(difference)) else float("inf")


def run_exported(path: Path, policy: Policy, obs: Obs) -> np.ndarray:
    """The exported graph's actions [B, H, A] for a batch of observations (the keys `policy.act` reads)."""
    return np.asarray(load_exported(path)(*(obs[key].numpy() for key in input_names(policy))))


def check_observations(policy: Policy, batch: int = 256) -> Obs:
    """Observations to check an export with, spread like the training data: the state drawn from the
    normaliser's statistics (zeros-centred unit noise without one), images uniform over 0-255, a per-step
    residual's base action uniform over [-1, 1], a VLA's instructions random token sequences. Seeded: the same
    policy gets the same observations."""
    generator = torch.Generator().manual_seed(0)
    obs = policy.example_obs(batch)
    for key, example in obs.items():
        if example.dtype == torch.uint8:
            obs[key] = torch.randint(0, 256, example.shape, generator=generator, dtype=torch.uint8)
        elif key == BASE_ACTION_KEY:
            obs[key] = torch.rand(example.shape, generator=generator) * 2 - 1
        elif key == INSTRUCTION_KEY:
            obs[key] = random_instructions(len(example), example.shape[1], generator)
        elif key == policy.obs_key:
            obs[key] = torch.randn(example.shape, generator=generator)
            normalizer = getattr(policy, "normalizer", None)
            if normalizer is not None and normalizer.enabled:
                obs[key] = normalizer.mean.float() + normalizer.var.sqrt().float() * obs[key]
    return obs


def random_instructions(batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Token ids int32 [batch, length] of random instructions: [CLS], 1 to length − 2 random word ids, [SEP], then
    [PAD] (an export's check runs the text encoder inside the graph on many instructions, not one)."""
    ids = torch.randint(WORD_IDS[0], WORD_IDS[1], (batch, length), generator=generator, dtype=torch.int32)
    words = torch.randint(1, length - 1, (batch, 1), generator=generator)
    position = torch.arange(length)[None]
    ids = torch.where(position == 0, CLS_ID, torch.where(position == words + 1, SEP_ID, ids))
    return torch.where(position > words + 1, PAD_ID, ids).to(torch.int32)


def run_metadata(config: Any, env: Any) -> dict[str, Any]:
    """What a run's policy was trained on, for its export's description (`export_description.describe`): the
    task, its control period and options, the cameras of image observations, and from a policyforge task the
    policy observation's feature names and what an action commands. `config`: the run's `RunConfig`; `env`:
    an env made from it."""
    from policyforge.sims.task import Task

    metadata = {"task": config.sim.task, "control_dt": env.control_dt, "task_options": config.sim.task_options}
    if config.sim.image.cameras:
        metadata["cameras"] = list(config.sim.image.cameras)
    task = getattr(env, "task", None)  # the policyforge backends' task; `gym:` envs have none
    if isinstance(task, Task):
        metadata |= {"obs_features": task.observation_names(), "action_meaning": task.action_meaning()}
    return metadata


def export_run(
    run_dir: Path, fmt: Format, out: Path | None = None, checkpoint: Path | str | None = None
) -> tuple[Path, float, str]:
    """Export a training run's policy, checked (`export_checked` on `check_observations`), from `checkpoint`
    ("latest" or None: `run_checkpoint`; "best", a number N or a file, as `checkpoint.resolve` reads them) to
    `out` (default: RUN/export/policy.onnx|.pt), described with `run_metadata`
    and its source. Returns the exported file, the largest |exported − act| and where the policy came from
    (for messages); ExportError, with nothing written, when the policy or its export cannot be trusted. What
    `policyforge export` runs, and `policyforge deploy` of a run whose export is missing or out of date."""
    from policyforge.algos import checkpoint as checkpoints
    from policyforge.algos.runner import load_run

    run_dir = Path(run_dir)
    named = checkpoints.resolve(run_dir, None if checkpoint is None else str(checkpoint))  # latest, best, N, file
    checkpoint_file = named if named != run_dir else run_checkpoint(run_dir)
    source = describe_source(checkpoint_file, run_dir) if checkpoint_file.is_file() else None  # before loading
    from policyforge.algos.steering import deployable

    config, policy, made = load_run(run_dir, str(checkpoint) if checkpoint else None, 1)
    policy, env = deployable(policy, made)  # a DSRL run: its steering and base as one graph
    try:
        metadata = run_metadata(config, env)
    finally:
        made.close()
    if source is not None:
        metadata["source"] = source
    out = Path(out) if out else run_dir / "export" / f"policy{SUFFIX[fmt]}"
    origin = f"{run_dir} ({source['checkpoint'] if source else checkpoint_file})"
    error = export_checked(policy, out, fmt, check_observations(policy), metadata, source=origin)
    return out, error, origin


@torch.no_grad()
def export_checked(
    policy: Policy, path: Path, fmt: Format, obs: Obs, metadata: dict[str, Any] | None = None, source: str = ""
) -> float:
    """`export`, checked before anything reaches `path`: `act(obs)` and the exported graph's actions must be finite
    and differ by at most `policy.export_tolerance`; returns that largest difference. The files are written to a
    temporary directory beside `path` and moved into place only when the check passes (graphs first, the
    descriptions last); otherwise ExportError, and nothing is written. `source`: where the policy was loaded
    from (a checkpoint), named in errors."""
    path = Path(path)
    what = f"{source}: " if source else ""
    expected = policy.act(obs).numpy()
    if not np.all(np.isfinite(expected)):
        raise ExportError(f"{what}{_not_finite(policy, expected)}; nothing was exported")
    warning = saturation_warning(saturated_share(expected), f"{source or path} on observations like its training data")
    if warning:
        log.warning(warning)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.stem}.export-") as staging:
        staged = export(policy, Path(staging) / path.name, fmt, metadata)
        actual = run_exported(staged, policy, obs)
        if not np.all(np.isfinite(actual)):
            raise ExportError(
                f"{what}the exported {fmt} graph gives non-finite actions where act() does not (an exporter bug: "
                f"please report it); nothing was written to {path}"
            )
        error = float(np.abs(actual - expected).max())
        if error > policy.export_tolerance:
            raise ExportError(
                f"{what}the exported {fmt} graph's actions differ from act() by {error:.2e} "
                f"> {policy.export_tolerance:.0e}; nothing was written to {path}"
            )
        # descriptions last, this graph's the very last: a crash part-way leaves a graph whose description does
        # not list its sha256 (stale)
        main = description_path(path).name
        for staged_file in sorted(Path(staging).iterdir(), key=lambda f: (f.suffix == ".json", f.name == main)):
            os.replace(staged_file, path.parent / staged_file.name)
    return error


def _not_finite(policy: Policy, actions: np.ndarray) -> str:
    """Why a policy's actions [B, H, A] are not all finite, and what to do."""
    bad_actions = int(np.sum(~np.isfinite(actions)))
    weights = {name: value for name, value in policy.state_dict().items() if value.is_floating_point()}
    bad = {name: int((~torch.isfinite(value)).sum()) for name, value in weights.items()}
    bad = {name: count for name, count in bad.items() if count}
    if bad:
        total = sum(value.numel() for value in weights.values())
        cause = (
            f"{sum(bad.values()):,} of its {total:,} weights are NaN/inf (in {', '.join(list(bad)[:3])}"
            f"{', …' if len(bad) > 3 else ''}): the checkpoint holds a diverged or damaged policy. Export an earlier "
            "checkpoint (--checkpoint RUN/checkpoints/step_….pt) or retrain"
        )
    else:
        cause = "its weights are finite, so the network overflows on these inputs"
    return (
        f"the policy's actions are not finite ({bad_actions:,} of {actions.size:,} NaN/inf on observations spread "
        f"like its training data); {cause}"
    )


def file_sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def run_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a run's policy is exported from by default: checkpoints/latest.pt (every save rewrites it),
    or the newest numbered checkpoint when it is missing."""
    from policyforge.algos.checkpoint import LATEST, files

    directory = Path(run_dir) / "checkpoints"
    return (files(directory) or [directory / LATEST])[0]  # latest.pt, else the numbered ones newest first


def describe_source(checkpoint: Path, run_dir: Path | None = None) -> dict[str, Any]:
    """What an export is made from, for its description: the checkpoint file (relative to `run_dir` when inside
    it), its sha256 and size in bytes. Take it before loading the checkpoint: a checkpoint rewritten in between
    then shows as a change (a needless re-export), never as an export that looks current but is not."""
    checkpoint = Path(checkpoint).resolve()
    name = str(checkpoint)
    if run_dir is not None and checkpoint.is_relative_to(Path(run_dir).resolve()):
        name = str(checkpoint.relative_to(Path(run_dir).resolve()))
    return {"checkpoint": name, "sha256": file_sha256(checkpoint), "bytes": checkpoint.stat().st_size}


def stale_reason(path: Path, checkpoint: Path, run_dir: Path | None = None) -> str | None:
    """Why the export at `path` is not the export of `checkpoint` (None: it is): no readable description, a graph
    that is not the one its description was written for, no record of its source, or another checkpoint."""
    path = Path(path)
    spec = _description(path)
    if spec is None:
        return f"{description_path(path).name} is missing or unreadable"
    for graph in [path] + ([path.with_name(spec["base"])] if spec.get("base") else []):
        recorded = (_description(graph) or {}).get("graph_sha256")
        if recorded is None:
            return f"{description_file(graph).name} records no graph_sha256 (an export of an older policyforge)"
        if not graph.is_file() or file_sha256(graph) != recorded:
            return (
                f"{graph.name} is missing or is not the graph its description was written for (an interrupted export?)"
            )
    source = spec.get("source")
    if not isinstance(source, dict):
        return f"{description_file(path).name} records no checkpoint it was made from (an older export)"
    current = describe_source(checkpoint, run_dir)
    if (source.get("checkpoint"), source.get("sha256")) != (current["checkpoint"], current["sha256"]):
        return (
            f"it was exported from {source.get('checkpoint')} (sha256 {str(source.get('sha256'))[:12]}…); the run's "
            f"checkpoint is now {current['checkpoint']} (sha256 {current['sha256'][:12]}…)"
        )
    return None


def _description(path: Path) -> dict[str, Any] | None:
    """The JSON description beside an exported graph, None when it is missing, unreadable or another file's."""
    try:
        return load_description(path)
    except DescriptionError:
        return None
