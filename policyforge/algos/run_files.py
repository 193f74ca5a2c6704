"""What policyforge writes into a run directory, and the marker that says policyforge created the directory.

`Runner.start` writes the marker (`.policyforge-run.json`: created_by, version, kind, created) into every run
directory it starts, and starts only in a directory that is new, empty, or a marked run that never checkpointed.
`reclaim` empties a marked run of one kind (`policyforge demo`'s, or a benchmark's, which start afresh) for a
new start: it deletes only the entries policyforge writes (`RUN_FILES`, `RUN_FOLDERS` and their temp files) and
refuses, deleting nothing, a directory without the marker, of another kind, or holding anything else.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import re
import shutil
from pathlib import Path
from typing import Literal

import policyforge
from policyforge.algos.logger import METRICS_FILE
from policyforge.algos.run_lock import LOCK_FILE, RunLock
from policyforge.errors import UserError
from policyforge.io import temp_target, write_json

MARKER = ".policyforge-run.json"
RunKind = Literal["train", "demo", "bench"]
RUN_FILES = ("config.yaml", METRICS_FILE, "summary.json", LOCK_FILE, MARKER)
"""Files policyforge writes at the top of a run directory (the runner, the logger, the run lock)."""
RUN_FOLDERS = {
    "checkpoints": ("*.pt",),  # step_<steps>.pt, latest.pt, best.pt
    "videos": ("*.mp4",),  # eval_<steps>.mp4, eval_cli.mp4
    "plots": ("*.png",),
    "tensorboard": ("events.out.tfevents.*",),
    "export": ("policy.*",),  # policyforge export / deploy: policy.onnx|.pt and their policy.onnx|.pt.json
}
"""Folders policyforge writes in a run directory, with the names of the files it writes in them."""


class RunDirError(UserError):
    """A run directory cannot be used or deleted: policyforge did not create it, or it holds other files."""


def plain_name_message(name: str) -> str:
    return (
        f"must be a plain name (letters, digits, '.', '_', '-'; not '.' or '..'), got {name!r}; "
        "choose where runs go with out_dir=..."
    )


def plain_name(text: str) -> str:
    """`text` with every character a plain name may not hold replaced by '-' (e.g. a gym task id's ':' and '/')."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)


def check_no_run(run_dir: Path) -> None:
    """FileExistsError if `run_dir` holds a run that has checkpointed (it is resumed, never started over); a
    start that failed before its first checkpoint (a full disk) may start again."""
    from policyforge.algos import checkpoint

    if checkpoint.files(run_dir):
        raise FileExistsError(
            f"{run_dir} already holds a run: resume it with `policyforge train --resume {run_dir}` "
            "or pick another name=..."
        )


def write_marker(run_dir: Path, kind: RunKind) -> None:
    """Mark `run_dir` as a run directory policyforge created (atomically)."""
    created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    marker = {"created_by": "policyforge", "version": policyforge.__version__, "kind": kind, "created": created}
    write_json(Path(run_dir) / MARKER, marker)


def read_marker(run_dir: Path) -> dict | None:
    """The marker of a run directory policyforge created, or None (no marker, or not one policyforge wrote)."""
    try:
        marker = json.loads((Path(run_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("created_by") == "policyforge" else None


def foreign_entries(run_dir: Path) -> list[str]:
    """Paths (relative to `run_dir`) of what policyforge does not write into a run directory, sorted."""
    foreign = []
    for entry in sorted(Path(run_dir).iterdir()):
        if entry.name in RUN_FOLDERS and entry.is_dir() and not entry.is_symlink():
            patterns = RUN_FOLDERS[entry.name]
            foreign += [
                f"{entry.name}/{item.name}"
                for item in sorted(entry.iterdir())
                if not (item.is_file() and not item.is_symlink() and _matches(item.name, patterns))
            ]
        elif not (entry.is_file() and not entry.is_symlink() and _matches(entry.name, RUN_FILES)):
            foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    return foreign


def check_startable(run_dir: Path) -> None:
    """RunDirError unless a new run may start in `run_dir`: absent, empty, or a marked run directory holding only
    run files (a start that did not get to its first checkpoint; the caller checks for checkpoints)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is a file, not a run directory: pick another name=... or out_dir=...")
    entries = [entry.name for entry in run_dir.iterdir() if entry.name != LOCK_FILE]
    if not entries:
        return
    if read_marker(run_dir) is None:
        raise RunDirError(
            f"{run_dir} already exists and policyforge did not create it (it has no {MARKER}; it holds "
            f"{_listing(sorted(entries))}): pick another name=... or out_dir=..."
        )
    foreign = foreign_entries(run_dir)
    if foreign:
        raise RunDirError(f"{run_dir} holds files a run does not write ({_listing(foreign)}): pick another name=...")


def reclaim(run_dir: Path, kind: RunKind) -> RunLock | None:
    """Empty the run directory of a previous run of `kind` for a new start, holding its lock (returned; None if
    `run_dir` does not exist). Deletes only files policyforge writes into run directories, keeping the lock and
    the marker (which the new start rewrites); RunDirError, deleting nothing, if `run_dir` is not a marked run of
    `kind` or holds anything else; RunLockedError if a process is training it."""
    run_dir = Path(run_dir)
    if not run_dir.exists() and not run_dir.is_symlink():
        return None
    if run_dir.is_symlink() or not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a run directory policyforge created; it is left alone: pick another name")
    marker = read_marker(run_dir)
    if marker is None or marker.get("kind") != kind:
        what = f"a {marker.get('kind')} run" if marker else f"not a run directory policyforge created (no {MARKER})"
        raise RunDirError(
            f"{run_dir} is {what}; `policyforge {kind}` deletes only its own {kind} runs, so it is left alone: "
            "pick another name=... or out_dir=..."
        )
    lock = RunLock(run_dir)
    try:
        foreign = foreign_entries(run_dir)
        if foreign:
            raise RunDirError(
                f"{run_dir} is a {kind} run, but it also holds files a run does not write ({_listing(foreign)}); "
                f"nothing was deleted: move them out (or delete {run_dir} yourself), or pick another name=..."
            )
        for entry in run_dir.iterdir():
            if entry.name in (LOCK_FILE, MARKER):
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    except BaseException:
        lock.release()
        raise
    return lock


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether `name`, or the file it is a temp file of, matches one of `patterns`."""
    names = [candidate for candidate in (name, temp_target(name)) if candidate]
    return any(fnmatch.fnmatchcase(candidate, pattern) for candidate in names for pattern in patterns)


def _listing(names: list[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
