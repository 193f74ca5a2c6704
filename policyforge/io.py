"""Files that are never half-written: atomic writes (temp file + rename) for results, videos, checkpoints."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` atomically, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the permissions open() would
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")


def write_video(path: str | Path, frames: Sequence[np.ndarray] | np.ndarray, fps: float) -> Path:
    """Write RGB frames [T, H, W, 3] uint8 as an H.264 MP4 (ffmpeg from imageio-ffmpeg), atomically."""
    import imageio.v2 as imageio

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be [T, H, W, 3] uint8, got {frames.shape} {frames.dtype}")
    with atomic_path(path) as tmp:
        writer = imageio.get_writer(tmp, format="FFMPEG", fps=fps, codec="libx264", macro_block_size=8)
        try:
            for frame in frames:
                writer.append_data(frame)
        finally:
            writer.close()
    return Path(path)


def is_plain_name(name: str) -> bool:
    """Whether `name` can name a file or folder inside a directory policyforge manages: one path component of
    letters, digits, '.', '_' and '-', not '.' or '..'."""
    return bool(re.fullmatch(r"[A-Za-z0-9._-]+", name)) and name not in (".", "..")


def temp_target(name: str) -> str | None:
    """The file name that `name`, a temp file `atomic_path` left (a write killed before its rename), stands for:
    '.<stem>.<mkstemp's 8 random characters><suffix>' → '<stem><suffix>'; None for any other name."""
    match = re.fullmatch(r"\.(.+)\.[a-z0-9_]{8}(\.[A-Za-z0-9]+)?", name)
    return f"{match[1]}{match[2] or ''}" if match else None
