"""A dataset's files checked against its metadata: what a writer may delete, what it must not, what is damaged.

Nothing here deletes data that metadata does not explain (the discipline of SQLite's and LevelDB's recovery):
- debris, the only files a writer may delete: temp files of atomic writes to files of the layout, and the files
  of one interrupted episode, at the "next file" position after the last committed episode, whose data file holds
  exactly the episode that comes next;
- unexplained: any other data or video file no committed episode names, or info.json counting more episodes than
  meta/episodes lists: the metadata is incomplete (`recovery.py` rebuilds it, or refuses the dataset);
- damaged: a committed episode whose data file is missing, unreadable or short of its rows, or whose video is
  not a whole MP4 (`check_committed`): DatasetError naming the file and the episode.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from policyforge.data import layout
from policyforge.errors import UserError
from policyforge.io import temp_target


class DatasetError(UserError, ValueError):
    """A dataset's files are damaged or disagree with its metadata; the message names the file and what to do."""


@dataclasses.dataclass
class Survey:
    """The dataset's data and video files sorted by what explains them."""

    debris: list[Path]
    """Temp files, and files of the one episode an interrupted writer was writing: safe to delete."""
    unexplained: list[Path]
    """Data / video files that no committed episode names and that are not debris."""
    missing: int
    """Episodes info.json counts beyond those meta/episodes lists (> 0: the metadata lost rows)."""

    @property
    def explained(self) -> bool:
        return not self.unexplained and self.missing <= 0


def video_keys(info: dict[str, Any]) -> list[str]:
    return [key for key, spec in info["features"].items() if spec["dtype"] == "video"]


def data_file(root: Path, info: dict[str, Any], row: dict[str, Any]) -> Path:
    return root / info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])


def video_file(root: Path, info: dict[str, Any], key: str, row: dict[str, Any]) -> Path:
    position = {"chunk_index": row[f"videos/{key}/chunk_index"], "file_index": row[f"videos/{key}/file_index"]}
    return root / info["video_path"].format(video_key=key, **position)


def survey(root: Path, info: dict[str, Any], rows: list[dict[str, Any]]) -> Survey:
    """Sort the data and video files of the dataset at `root` against its committed episodes `rows`."""
    layout_files, _ = layout_patterns(info)
    debris, unexplained = [], []
    for folder in ("data", "videos", "meta"):
        for directory, _, names in os.walk(root / folder):
            relative = Path(directory).relative_to(root).as_posix()
            debris += [Path(directory) / name for name in sorted(names) if _is_temp(relative, name, layout_files)]
    frames = int(rows[-1]["dataset_to_index"]) if rows else 0
    interrupted = False  # whether the next data file holds the episode that comes next (its videos follow it)
    streams = [("data", root / "data", ".parquet")]
    streams += [(f"videos/{key}", root / "videos" / key, ".mp4") for key in video_keys(info)]
    for prefix, folder, suffix in streams:
        named = {(int(r[f"{prefix}/chunk_index"]), int(r[f"{prefix}/file_index"])) for r in rows}
        last = rows[-1] if rows else None
        following = layout.next_file(last[f"{prefix}/chunk_index"], last[f"{prefix}/file_index"]) if last else (0, 0)
        for path, position in files_by_position(folder, suffix).items():
            if position in named:
                continue
            if position == following and prefix == "data":
                interrupted = _holds_episode(path, len(rows), frames)
            (debris if position == following and interrupted else unexplained).append(path)
    return Survey(debris, unexplained, int(info.get("total_episodes") or 0) - len(rows))


def _holds_episode(path: Path, episode: int, start: int) -> bool:
    """Whether data file `path` holds episode `episode` alone, frames `start`, `start` + 1, ... (as `DemoWriter`
    writes the episode that comes next)."""
    try:
        table = pq.read_table(path, columns=["episode_index", "index"])
    except (OSError, pa.ArrowException):
        return False
    index = table.column("index").to_numpy()
    episodes = table.column("episode_index").to_numpy()
    return len(index) > 0 and (episodes == episode).all() and np.array_equal(index, start + np.arange(len(index)))


def files_by_position(folder: Path, suffix: str) -> dict[Path, tuple[int, int]]:
    """The chunk-XXX/file-YYY files under `folder` (not temp files), with their (chunk, file) positions."""
    found = {}
    for path in folder.glob(f"chunk-*/file-*{suffix}"):
        match = re.fullmatch(r"chunk-(\d+)/file-(\d+)" + re.escape(suffix), f"{path.parent.name}/{path.name}")
        if match:
            found[path] = (int(match[1]), int(match[2]))
    return dict(sorted(found.items(), key=lambda item: item[1]))


def check_committed(root: Path, info: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """DatasetError unless every committed episode's data file is readable and holds its rows (parquet metadata
    only) and each of its videos is a whole MP4 (its boxes end at the end of the file)."""
    needed: dict[Path, tuple[int, int]] = {}  # data file → (frames the episodes naming it need, first episode)
    for row in rows:
        path = data_file(root, info, row)
        frames, first = needed.get(path, (0, row["episode_index"]))
        needed[path] = (frames + int(row["length"]), first)
    for path, (frames, episode) in needed.items():
        try:
            held = pq.ParquetFile(path).metadata.num_rows
        except (OSError, pa.ArrowException) as err:
            raise damaged(path, episode, f"it cannot be read ({err})") from None
        if held < frames:
            raise damaged(path, episode, f"it holds {held} frames, its episodes {frames}")
    checked = set()
    for row in rows:
        for key in video_keys(info):
            path = video_file(root, info, key, row)
            if path not in checked:
                problem = mp4_problem(path)
                if problem:
                    raise damaged(path, row["episode_index"], problem)
                checked.add(path)


def damaged(path: Path, episode: int, problem: str) -> DatasetError:
    """The error for a committed episode's damaged file."""
    return DatasetError(
        f"{path}, a file of episode {episode}, is damaged: {problem}. Restore the file from a copy of the "
        "dataset, or record into a new directory (policyforge collect --out NEW_DIR): policyforge neither reads nor "
        "appends to a dataset with a damaged episode"
    )


def decode_video(path: Path, episode: int) -> np.ndarray:
    """Every frame of a video file [T, H, W, 3] uint8; DatasetError naming the file and `episode` if it cannot."""
    try:
        return layout.read_video(path)
    except (OSError, RuntimeError, StopIteration) as err:
        problem = f"it cannot be decoded ({str(err).strip() or type(err).__name__})"
        raise damaged(path, episode, problem) from None


def mp4_problem(path: Path) -> str | None:
    """Why `path` is not a whole MP4 (missing, truncated, no moov/mdat box), or None. Reads box headers only."""
    try:
        size = path.stat().st_size
        boxes, offset = set(), 0
        with path.open("rb") as file:
            while offset < size:
                file.seek(offset)
                header = file.read(16)
                if len(header) < 8:
                    return f"it is truncated (a box header at byte {offset} is cut off)"
                length, kind = struct.unpack(">I4s", header[:8])
                if length == 1 and len(header) == 16:
                    length = struct.unpack(">Q", header[8:])[0]
                elif length == 0:
                    length = size - offset
                if length < 8:
                    return f"it is corrupt (a box of {length} bytes at byte {offset})"
                boxes.add(kind)
                offset += length
    except OSError as err:
        return f"it cannot be read ({err.strerror or err})"
    if offset != size:
        return f"it is truncated ({size} bytes; its last box ends at byte {offset})"
    if not {b"moov", b"mdat"} <= boxes:
        return "it is not a whole MP4 (no moov or mdat box)"
    return None


def layout_patterns(info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(files, folders) of the dataset's layout as /-separated patterns relative to its root (`*`: one name)."""
    keys = [key for key in video_keys(info) if "/" not in key and key not in (".", "..")]
    chunked = ["data", "meta/episodes", *(f"videos/{key}" for key in keys)]
    folders = ["meta", "data", "videos", "meta/episodes", *(f"videos/{key}" for key in keys)]
    folders += [f"{folder}/chunk-*" for folder in chunked]
    files = [layout.INFO_PATH, layout.STATS_PATH, layout.TASKS_PATH, "data/chunk-*/file-*.parquet"]
    files += ["meta/episodes/chunk-*/file-*.parquet", *(f"videos/{key}/chunk-*/file-*.mp4" for key in keys)]
    return files, folders


def layout_entries(root: Path, info: dict[str, Any]) -> tuple[list[Path], list[Path], list[str]]:
    """What is under the dataset directory `root`: (files of its layout, temp files of its writes included;
    folders of its layout, deepest first; everything else, symlinks included, relative to `root`)."""
    files, folders = layout_patterns(info)
    found_files, found_folders, foreign = [], [], []
    for directory, dirnames, filenames in os.walk(root, topdown=False):
        for name in [*filenames, *dirnames]:
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            parent = relative.rpartition("/")[0]
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                foreign.append(relative)
            elif path.is_file() and (_matches_any(relative, files) or _is_temp(parent, name, files)):
                found_files.append(path)
            elif path.is_dir() and _matches_any(relative, folders):
                found_folders.append(path)
            elif path.is_file() or not any(f.startswith(relative + "/") for f in foreign):  # (a folder's foreign
                # contents, listed before it, say enough)
                foreign.append(relative + ("/" if path.is_dir() else ""))
    return found_files, found_folders, sorted(foreign)


def _is_temp(folder: str, name: str, files: list[str]) -> bool:
    """Whether `name` in `folder` (relative to the root) is a temp file of an atomic write to a layout file."""
    target = temp_target(name)
    return target is not None and _matches_any(f"{folder}/{target}".lstrip("/"), files)


def _matches_any(relative: str, patterns: list[str]) -> bool:
    """Whether the /-separated path matches a pattern component by component (`*` never spans a '/')."""
    parts = relative.split("/")
    return any(
        len(parts) == len(wanted) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, wanted, strict=True))
        for wanted in (pattern.split("/") for pattern in patterns)
    )
