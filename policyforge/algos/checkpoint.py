"""Checkpoints that hold data, never code, and that a crash or a damaged byte cannot turn into a wrong resume.

A checkpoint file (format `policyforge-checkpoint/2`) is `torch.save({"format", "sha256", "payload"})`: the payload
is a uint8 tensor holding the bytes of `torch.save(state)`, and `state` holds tensors and plain Python data only
(dict, list, tuple, str, int, float, bool, None; numpy arrays are stored as tensors and come back as numpy arrays).
Both levels are read with `torch.load(weights_only=True)`, torch's restricted unpickler: a file that would import
anything outside torch's default allowlist (as a pickle that runs code must) is refused, and nothing in it runs. The
payload's sha256 is checked before it is unpickled, so a damaged file is reported, never loaded.

`save` writes `step_<steps>.pt` (the run's step count as its logs show it: env steps, or gradient steps for
behaviour cloning; 10 digits, so that `ls` lists them in order), then `latest.pt`, each atomically. `load` of a run
directory tries latest.pt, then the numbered checkpoints newest first, skipping unusable ones with a warning naming
each file and why. Runs of policyforge before checkpoints carried steps named them by iteration (`step_<iteration>.pt`,
8 digits); they still load and resume, and as an iteration is never more than the run's steps, they stay older than
the checkpoints a resume adds.
`best.pt` (`save_best`) holds the policy of the run's best evaluation so far and that evaluation's figures; it is
for evaluating and exporting (`resolve(run, "best")`), never resumed from. Files of
the previous format (a plain `torch.save` of the state with numpy arrays, no checksum) still load, weights-only with
numpy's array constructors allowlisted (torch's documented way), with a warning that damage to them goes unnoticed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
import pickle
import random
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policyforge.errors import UserError
from policyforge.io import atomic_path

FORMAT = "policyforge-checkpoint/2"
LATEST = "latest.pt"
BEST = "best.pt"
_NUMPY = "__numpy__"
"""Key of the dict that stands for a numpy array (or scalar) in a saved state: {_NUMPY: tensor, "scalar": bool}."""
_PLAIN = (torch.Tensor, str, bytes, int, float, bool, type(None), torch.dtype, torch.device)
_LEGACY_NUMPY = [
    np._core.multiarray._reconstruct,
    np.ndarray,
    np.dtype,
    *{type(np.dtype(code)) for code in "?bBhHiIlLqQefdFD"},
]
"""What a previous-format checkpoint's numpy arrays need beyond torch's default allowlist: numpy's array and dtype
constructors (torch does not allowlist them by default, as it does not control numpy's code; they build data only)."""

log = logging.getLogger(__name__)


class CheckpointError(UserError):
    """A checkpoint is missing, damaged, unsafe, or not a policyforge checkpoint; the message names the file."""


def rng_state() -> dict[str, Any]:
    """The global RNG states that training draws from (torch, numpy, random)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save(directory: Path, state: dict[str, Any], steps: int, keep: int) -> Path:
    """Write `step_<steps>.pt` (`steps`: the run's step count, in its step unit) and `latest.pt` atomically (a
    crash leaves the previous ones intact), then delete all but the newest `keep` numbered checkpoints."""
    path = write(directory / numbered_name(steps), state)
    with atomic_path(directory / LATEST) as tmp:
        shutil.copyfile(path, tmp)
    for old in _numbered(directory)[keep:]:
        old.unlink()
    return path


def write(path: Path, state: dict[str, Any]) -> Path:
    """Write a checkpoint file holding `state` (tensors, plain data and numpy arrays only), atomically."""
    inner = io.BytesIO()
    torch.save(_rebuild(state, _to_plain), inner)
    payload = inner.getbuffer()
    container = {
        "format": FORMAT,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload": torch.frombuffer(payload, dtype=torch.uint8),
    }
    serialized = io.BytesIO()  # torch's own file writer reports a full disk as a bare RuntimeError; Python names it
    torch.save(container, serialized)
    with atomic_path(path) as tmp:
        try:
            tmp.write_bytes(serialized.getbuffer())
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from err
    return Path(path)


def load(path: Path) -> dict[str, Any]:
    """The state in a checkpoint file, or in the newest intact checkpoint of a run or checkpoint directory."""
    return newest(path)[1]


def newest(path: Path) -> tuple[Path, dict[str, Any]]:
    """(file, state) of a checkpoint file, or of the newest intact checkpoint of a run or checkpoint directory:
    latest.pt, else the numbered checkpoints newest first; each unusable one is skipped with a warning."""
    path = Path(path)
    if not path.is_dir():
        return path, read(path)
    if not files(path):
        raise CheckpointError(f"no checkpoint in {path}: expected checkpoints/{LATEST} (was the run started?)")
    candidates = _candidates(path)  # a missing latest.pt is warned about too
    problems = []
    for candidate in candidates:
        try:
            state = read(candidate)
        except CheckpointError as err:
            log.warning("%s; trying an older checkpoint", err)
            problems.append(str(err))
            continue
        if problems:
            log.warning("loaded %s, the newest intact checkpoint of %s", candidate, path)
        return candidate, state
    raise CheckpointError(f"no intact checkpoint in {path}:\n  " + "\n  ".join(problems))


def files(path: Path) -> list[Path]:
    """The checkpoint files of a run or checkpoint directory, in the order `newest` tries them: latest.pt, then
    the numbered ones newest first ([] for a run that has not checkpointed)."""
    return [candidate for candidate in _candidates(Path(path)) if candidate.is_file()]


def _candidates(path: Path) -> list[Path]:
    """latest.pt and the numbered checkpoints, newest first, of a run or checkpoint directory (existing or not)."""
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    return [directory / LATEST, *_numbered(directory)]


def read(path: Path) -> dict[str, Any]:
    """The state in one checkpoint file; CheckpointError if it is missing, damaged, unsafe or not a checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing" if not path.exists() else f"{path} is not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is empty (a write that never finished, or a full disk)")
    container, needed_numpy = _unpickle(path, path)
    if needed_numpy or not isinstance(container, dict) or "format" not in container:
        _check_state(path, container)
        log.warning(
            "%s is a checkpoint of the previous format, without a checksum: damage to it cannot be detected "
            "(resuming the run writes checkpoints of the current format)",
            path,
        )
        return container
    if container["format"] != FORMAT:
        raise CheckpointError(f"{path} has format {container['format']!r}; this policyforge reads {FORMAT}")
    payload, expected = container.get("payload"), container.get("sha256")
    if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8 or not isinstance(expected, str):
        raise CheckpointError(f"{path} is not a policyforge checkpoint (its {FORMAT} header is malformed)")
    actual = hashlib.sha256(payload.numpy()).hexdigest()
    if actual != expected:
        raise CheckpointError(
            f"{path} is damaged: its contents hash to sha256 {actual[:16]}…, not the {expected[:16]}… they were "
            "written with (the file changed after it was saved)"
        )
    state, _ = _unpickle(path, io.BytesIO(payload.numpy()), allow_numpy=False)
    _check_state(path, state)
    return _rebuild(state, _from_plain)


RANKED_BY = ("eval/success", "eval/return")
"""How rollout evaluations compare (`Algorithm.ranked_by`)."""


def rank(figures: dict[str, float], keys: tuple[str, ...] = RANKED_BY) -> tuple[float, ...]:
    """How evaluations compare for best.pt: by `keys` in order (by default the higher success rate, then — a tie, or
    a task without success — the higher mean return); a figure an evaluation lacks counts as 0."""
    return tuple(figures.get(key, 0.0) for key in keys)


def save_best(
    directory: Path,
    policy: dict[str, Any],
    steps: int,
    step_unit: str,
    figures: dict[str, float],
    ranked_by: tuple[str, ...] = RANKED_BY,
) -> Path:
    """Write `best.pt` atomically: the `policy` state of the evaluation at `steps` (in `step_unit`) with its figures
    (`eval/success` where the task has one, `eval/return`, and those it was `ranked_by`)."""
    kept = (*_BEST_FIGURES, *ranked_by)
    best = {"step": steps, "step_unit": step_unit, **{k: v for k, v in figures.items() if k in kept}}
    return write(Path(directory) / BEST, {"algo": {"policy": policy}, "best": best})


_BEST_FIGURES = ("eval/success", "eval/return", "eval/length")


def resolve(run_dir: Path, which: str | None) -> Path:
    """The checkpoint `--checkpoint` names in a run: "latest" (or None) → the run directory (`load` takes its newest
    intact checkpoint), "best" → checkpoints/best.pt, a number N → the checkpoint at N steps (checkpoints/step_N.pt,
    N in the run's step unit as its logs show it), else a file path. In a run of policyforge from before checkpoints
    carried step counts, N is the iteration its old checkpoint names carry."""
    run_dir = Path(run_dir)
    if which in (None, "latest"):
        return run_dir
    directory = run_dir / "checkpoints"
    if which == "best":
        if not (directory / BEST).is_file():
            raise CheckpointError(
                f"{run_dir} has no checkpoints/{BEST} (a run writes it at its first evaluation; runs of policyforge "
                "before it have none): use --checkpoint latest, or a checkpoint file"
            )
        return directory / BEST
    if which.isdigit():
        kept = _numbered(directory)[::-1]  # oldest first: on a tie, the step-named one (newer) wins
        numbered = {steps_of(path): path for path in kept}
        if int(which) not in numbered:
            by_steps = [str(steps_of(path)) for path in kept if not _by_iteration(path)]
            by_iteration = [f"{path.name} (--checkpoint {steps_of(path)})" for path in kept if _by_iteration(path)]
            keeps = []
            if by_steps:
                keeps.append(f"the checkpoints at {', '.join(by_steps)} steps")
            if by_iteration:
                keeps.append(f"named by iteration by an earlier policyforge, {', '.join(by_iteration)}")
            raise CheckpointError(
                f"{run_dir} has no checkpoint at {int(which)} steps ({numbered_name(int(which))}); it keeps "
                f"{'; '.join(keeps) or 'no numbered checkpoint'}: use one of these, latest, best or a file"
            )
        return numbered[int(which)]
    return Path(which)


def numbered_name(steps: int) -> str:
    """The name of the numbered checkpoint at `steps`: step_<steps>.pt, 10 digits (20M env steps sort right)."""
    return f"step_{steps:010d}.pt"


def steps_of(path: Path) -> int:
    """The step count a numbered checkpoint's name carries (-1 for another name). A name of an earlier policyforge
    (8 digits, `_by_iteration`) carries the iteration instead, which is never more than the run's steps."""
    match = _NUMBERED.search(Path(path).name)
    return int(match.group(1)) if match else -1


_NUMBERED = re.compile(r"^step_(\d+)\.pt$")
_ITERATION_DIGITS = 8
"""Digits of the numbered checkpoints' names when they carried the iteration (before they carried steps, in 10)."""


def _by_iteration(path: Path) -> bool:
    match = _NUMBERED.search(Path(path).name)
    return match is not None and len(match.group(1)) == _ITERATION_DIGITS


def _numbered(directory: Path) -> list[Path]:
    """The numbered checkpoints of a directory, newest first: by the number in their names, and on a tie (a run of
    one step per iteration, resumed from an iteration-named checkpoint) the step-named one first."""
    return sorted(directory.glob("step_*.pt"), key=lambda path: (steps_of(path), not _by_iteration(path)), reverse=True)


def _unpickle(path: Path, data: Path | io.BytesIO, allow_numpy: bool = True) -> tuple[Any, bool]:
    """torch.load(weights_only=True) of `data` (the file `path`, or its payload); then, if numpy objects stopped it
    and `allow_numpy`, again with numpy's array constructors allowed (the previous format). Returns (object,
    whether numpy was needed)."""
    try:
        return _weights_only_load(path, data), False
    except pickle.UnpicklingError as err:
        refused = err
    if allow_numpy and "numpy" in str(refused):
        try:
            with torch.serialization.safe_globals(_LEGACY_NUMPY):
                return _weights_only_load(path, data), True
        except pickle.UnpicklingError as err:
            refused = err
    reason = str(refused)
    needed = re.search(r"GLOBAL (\S+)", reason) or re.search(r"but got <class '([^']+)'>", reason)
    detail = re.search(r"WeightsUnpickler error:\s*(.+)", reason)
    why = f"loading it would need `{needed[1]}`, which checkpoints never hold" if needed else "its pickle"
    if not needed:
        why += f" is not the restricted kind checkpoints are ({detail[1] if detail else 'refused'})"
    raise CheckpointError(
        f"{path} is not a policyforge checkpoint, or is unsafe: {why}. It was refused and nothing in it ran; do not "
        "open it with other tools unless you trust its source"
    ) from None


def _weights_only_load(path: Path, data: Path | io.BytesIO) -> Any:
    """torch.load(weights_only=True); pickle.UnpicklingError when its restricted unpickler refuses the data."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the refusal says enough
            if isinstance(data, io.BytesIO):
                data.seek(0)
            return torch.load(data, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise
    except Exception as err:  # torch's zip reader, pickle and storage code raise many types on damaged bytes
        lines = re.split(r"(?<=\.)\s", str(err).strip())[0].splitlines()  # torch's first sentence, not its advice
        raise CheckpointError(
            f"{path} is damaged or not a checkpoint ({type(err).__name__}: {lines[0] if lines else ''}); "
            "use an intact one (a run keeps its numbered checkpoints in checkpoints/step_*.pt)"
        ) from None


def _check_state(path: Path, state: Any) -> None:
    if not isinstance(state, dict) or not isinstance(state.get("algo"), dict):
        raise CheckpointError(f"{path} is not a policyforge checkpoint (it holds no training state)")


_DESCEND = object()


def _rebuild(value: Any, convert: Callable[[Any], Any]) -> Any:
    """`value` with `convert` applied top-down (it returns a replacement, or _DESCEND to look inside a container);
    containers are copied only where something inside them changed (keeping e.g. a state dict's `_metadata`)."""
    new = convert(value)
    if new is not _DESCEND:
        return new
    if isinstance(value, dict):
        items = {key: _rebuild(item, convert) for key, item in value.items()}
        if all(items[key] is value[key] for key in value):
            return value
        rebuilt = copy.copy(value)
        rebuilt.update(items)
        return rebuilt
    items = [_rebuild(item, convert) for item in value]
    if all(new is old for new, old in zip(items, value, strict=True)):
        return value
    return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)


def _to_plain(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"a checkpoint cannot hold a numpy array of dtype {array.dtype}")
        native = np.array(array, dtype=array.dtype.newbyteorder("="), order="C", copy=True)
        native = native.view(np.dtype(native.dtype.str))  # e.g. ulonglong → uint64, which torch knows
        return {_NUMPY: torch.from_numpy(native), "scalar": isinstance(value, np.generic)}
    if isinstance(value, dict | list | tuple):
        return _DESCEND
    if not isinstance(value, _PLAIN):
        raise TypeError(f"a checkpoint holds tensors and plain data only, not {type(value).__name__}")
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict) and value.keys() == {_NUMPY, "scalar"}:
        array = value[_NUMPY].numpy()
        return array[()] if value["scalar"] else array
    return _DESCEND if isinstance(value, dict | list | tuple) else value
