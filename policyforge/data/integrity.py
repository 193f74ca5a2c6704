"""A dataset's files checked against its metadata, and episodes metadata rebuilt from the data files.

Nothing here deletes data that metadata does not explain (the discipline of SQLite's and LevelDB's recovery):
- debris, the only files a writer may delete: temp files of atomic writes, and the data / video files at the
  "next file" position after the last committed episode, which only an interrupted episode writes;
- unexplained: any other data or video file no committed episode names, or info.json counting more episodes than
  meta/episodes lists. The metadata is incomplete: `rebuild_rows` recovers the episodes of a dataset written one
  episode per file (as `DemoWriter` writes) from the data files themselves, or raises DatasetError saying what is
  inconsistent;
- damaged: a committed episode whose data file is missing, unreadable or short of its rows, or whose video is
  not a whole MP4 (`check_committed`): DatasetError naming the file and the episode.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
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

TEMP_PREFIXES = (".file-", ".info.", ".stats.", ".tasks.")
"""Temp files `io.atomic_path` leaves beside the dataset's files when a write is killed."""
SLACK_EPISODES = 2
"""Episodes the data files may hold beyond info.json's count: info.json is rewritten after each commit (one
behind after a crash), and an interrupted episode may have written all its files."""


log = logging.getLogger(__name__)


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


def committed_rows(root: Path, info: dict[str, Any], tasks: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The committed episodes' metadata rows by episode_index, and whether they had to be rebuilt from the data
    files (without statistics) because meta/episodes does not explain them; DatasetError if it cannot be."""
    rows, unreadable = layout.read_episode_rows(root)
    if not unreadable and survey(root, info, rows).explained:
        return rows, False
    rebuilt = rebuild_rows(root, info, tasks)
    check_agrees(root, rows, rebuilt)
    log.warning(
        "%s: the episodes metadata (%s) does not explain the data files%s; read %d episodes from the data files "
        "(the metadata lists %d, info.json counts %d)",
        root, layout.EPISODES_DIR, f" ({unreadable[0]} is unreadable)" if unreadable else "", len(rebuilt), len(rows),
        info.get("total_episodes", 0),
    )  # fmt: skip
    return rebuilt, True


def video_keys(info: dict[str, Any]) -> list[str]:
    return [key for key, spec in info["features"].items() if spec["dtype"] == "video"]


def data_file(root: Path, info: dict[str, Any], row: dict[str, Any]) -> Path:
    return root / info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])


def video_file(root: Path, info: dict[str, Any], key: str, row: dict[str, Any]) -> Path:
    position = {"chunk_index": row[f"videos/{key}/chunk_index"], "file_index": row[f"videos/{key}/file_index"]}
    return root / info["video_path"].format(video_key=key, **position)


def survey(root: Path, info: dict[str, Any], rows: list[dict[str, Any]]) -> Survey:
    """Sort the data and video files of the dataset at `root` against its committed episodes `rows`."""
    debris = [
        path
        for folder in ("data", "videos", "meta")
        for prefix in TEMP_PREFIXES
        for path in sorted((root / folder).rglob(prefix + "*"))
    ]
    unexplained = []
    streams = [("data", root / "data", ".parquet")]
    streams += [(f"videos/{key}", root / "videos" / key, ".mp4") for key in video_keys(info)]
    for prefix, folder, suffix in streams:
        named = {(int(r[f"{prefix}/chunk_index"]), int(r[f"{prefix}/file_index"])) for r in rows}
        last = rows[-1] if rows else None
        following = layout.next_file(last[f"{prefix}/chunk_index"], last[f"{prefix}/file_index"]) if last else (0, 0)
        for path, position in files_by_position(folder, suffix).items():
            if position not in named:
                (debris if position == following else unexplained).append(path)
    return Survey(debris, unexplained, int(info.get("total_episodes") or 0) - len(rows))


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


def rebuild_rows(root: Path, info: dict[str, Any], tasks: list[str]) -> list[dict[str, Any]]:
    """Episodes-metadata rows (without statistics) rebuilt from a dataset written one episode per file, from
    data/chunk-000/file-000 on; a last episode whose videos are incomplete is left out (it is debris).
    DatasetError if the files cannot be explained that way or hold fewer episodes than info.json counts."""
    if not tasks:
        raise _unrebuildable(root, f"{root / layout.TASKS_PATH}, the list of task instructions, is missing or empty")
    rows: list[dict[str, Any]] = []
    keys, fps = video_keys(info), int(info["fps"])
    expected, frames = (0, 0), 0
    data_files = files_by_position(root / "data", ".parquet")
    for path, position in data_files.items():
        episode = len(rows)
        if position != expected:
            gap = root / info["data_path"].format(chunk_index=expected[0], file_index=expected[1])
            raise _unrebuildable(root, f"{gap}, the data file of episode {episode}, is missing")
        length, task_index = _episode_in(path, episode, frames, len(tasks))
        row = {"episode_index": episode, "tasks": [tasks[task_index]], "length": length}
        row |= {"data/chunk_index": position[0], "data/file_index": position[1]}
        row |= {"dataset_from_index": frames, "dataset_to_index": frames + length}
        for key in keys:
            row |= {f"videos/{key}/chunk_index": position[0], f"videos/{key}/file_index": position[1]}
            row |= {f"videos/{key}/from_timestamp": 0.0, f"videos/{key}/to_timestamp": length / fps}
        incomplete = [video_file(root, info, key, row) for key in keys if mp4_problem(video_file(root, info, key, row))]
        if incomplete:
            if episode == len(data_files) - 1:
                break  # the interrupted episode: its data file is debris
            raise _unrebuildable(root, f"{incomplete[0]}, a video of episode {episode}, is missing or damaged")
        rows.append(row)
        expected, frames = layout.next_file(*position), frames + length
    counted = int(info.get("total_episodes") or 0)
    if not counted <= len(rows) <= counted + SLACK_EPISODES:
        raise _unrebuildable(root, f"{layout.INFO_PATH} counts {counted} episodes, the data files hold {len(rows)}")
    return rows


def check_agrees(root: Path, surviving: list[dict[str, Any]], rebuilt: list[dict[str, Any]]) -> None:
    """DatasetError unless the metadata rows that survived describe the same episodes as the rebuilt ones."""
    keys = ("length", "dataset_from_index", "dataset_to_index", "data/chunk_index", "data/file_index")
    for row in surviving:
        episode = row["episode_index"]
        other = rebuilt[episode] if episode < len(rebuilt) else None
        if other is None or any(row[key] != other[key] for key in keys):
            raise _unrebuildable(root, f"{layout.EPISODES_DIR} describes episode {episode} unlike its data file")


def episode_stats(root: Path, info: dict[str, Any], row: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """An episode's statistics recomputed from its data file and videos (as `DemoWriter` computes them)."""
    columns = [key for key, spec in info["features"].items() if spec["dtype"] not in ("video", "image")]
    table = pq.read_table(data_file(root, info, row), columns=columns)
    stats = {key: layout.feature_stats(layout.column_to_numpy(table.column(key))) for key in columns}
    for key in video_keys(info):
        stats[key] = layout.feature_stats(layout.read_video(video_file(root, info, key, row)), image=True)
    return stats


def layout_entries(root: Path, info: dict[str, Any]) -> tuple[list[Path], list[Path], list[str]]:
    """What is under the dataset directory `root`: (files of its layout, temp files of its writes included;
    folders of its layout, deepest first; everything else, symlinks included, relative to `root`)."""
    keys = [key for key in video_keys(info) if "/" not in key and key not in (".", "..")]
    chunked = ["data", "meta/episodes", *(f"videos/{key}" for key in keys)]
    folders = ["meta", "data", "videos", "meta/episodes", *(f"videos/{key}" for key in keys)]
    folders += [f"{folder}/chunk-*" for folder in chunked]
    files = [layout.INFO_PATH, layout.STATS_PATH, layout.TASKS_PATH, *(f"meta/{p}*" for p in TEMP_PREFIXES[1:])]
    files += [f"{folder}/chunk-*/{name}" for folder in chunked for name in ("file-*", ".file-*")]
    found_files, found_folders, foreign = [], [], []
    for directory, dirnames, filenames in os.walk(root, topdown=False):
        for name in [*filenames, *dirnames]:
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                foreign.append(relative)
            elif path.is_file() and any(_matches(relative, pattern) for pattern in files):
                found_files.append(path)
            elif path.is_dir() and any(_matches(relative, pattern) for pattern in folders):
                found_folders.append(path)
            elif path.is_file() or not any(f.startswith(relative + "/") for f in foreign):  # (a folder's foreign
                # contents, listed before it, say enough)
                foreign.append(relative + ("/" if path.is_dir() else ""))
    return found_files, found_folders, sorted(foreign)


def _matches(relative: str, pattern: str) -> bool:
    """Whether the /-separated path matches the pattern component by component (`*` never spans a '/')."""
    parts, wanted = relative.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, wanted, strict=True))


def _episode_in(path: Path, episode: int, start: int, tasks: int) -> tuple[int, int]:
    """(length, task_index) of the one episode the data file `path` must hold: number `episode`, frames
    `start`, `start` + 1, ... in order; DatasetError otherwise."""
    try:
        table = pq.read_table(path, columns=["episode_index", "index", "frame_index", "task_index"])
    except (OSError, pa.ArrowException) as err:
        raise damaged(path, episode, f"it cannot be read ({err})") from None
    column = {name: table.column(name).to_numpy() for name in table.column_names}
    length = table.num_rows
    task = column["task_index"][0] if length else -1
    if not (
        length
        and (column["episode_index"] == episode).all()
        and np.array_equal(column["frame_index"], np.arange(length))
        and np.array_equal(column["index"], start + np.arange(length))
        and (column["task_index"] == task).all()
        and 0 <= task < tasks
    ):
        raise _unrebuildable(path.parents[2], f"{path} does not hold episode {episode} alone, from frame {start} on")
    return length, int(task)


def _unrebuildable(root: Path, what: str) -> DatasetError:
    return DatasetError(
        f"{root}: the episodes metadata ({layout.EPISODES_DIR}) does not explain the data files, and it cannot be "
        f"rebuilt from them: {what}. Nothing was deleted. Restore the dataset's meta/ folder (or the missing files) "
        "from a copy, or record into a new directory (policyforge collect --out NEW_DIR)"
    )
