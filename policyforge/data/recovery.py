"""Episodes metadata rebuilt from the data files, when meta/episodes does not explain them.

A dataset written one episode per file (as `DemoWriter` writes) describes itself: data file k holds episode k
alone (its `episode_index`, global `index` and `frame_index` columns), its videos sit at the same position, and
statistics can be recomputed from both (images from the decoded videos, so within 2/255 of the originals). The
rebuilt rows must agree with whatever metadata survived and count at least the episodes info.json counts;
otherwise the dataset is refused with a DatasetError that says what is inconsistent, and nothing is deleted.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from policyforge.data import integrity, layout
from policyforge.data.integrity import DatasetError

SLACK_EPISODES = 2
"""Episodes the data files may hold beyond info.json's count: info.json is rewritten after each commit (one
behind after a crash), and an interrupted episode may have written all its files."""

log = logging.getLogger(__name__)


def committed_rows(root: Path, info: dict[str, Any], tasks: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The committed episodes' metadata rows by episode_index, and whether they had to be rebuilt from the data
    files (without statistics) because meta/episodes does not explain them; DatasetError if it cannot be."""
    rows, unreadable = layout.read_episode_rows(root)
    if not unreadable and integrity.survey(root, info, rows).explained:
        return rows, False
    rebuilt = rebuild_rows(root, info, tasks)
    check_agrees(root, rows, rebuilt)
    unexplained = integrity.survey(root, info, rebuilt).unexplained
    if unexplained:
        raise _unrebuildable(root, f"{unexplained[0]} belongs to no episode the data files describe")
    log.warning(
        "%s: the episodes metadata (%s) does not explain the data files%s; read %d episodes from the data files "
        "(the metadata lists %d, info.json counts %d)",
        root, layout.EPISODES_DIR, f" ({unreadable[0]} is unreadable)" if unreadable else "", len(rebuilt), len(rows),
        info.get("total_episodes", 0),
    )  # fmt: skip
    return rebuilt, True


def rebuild_rows(root: Path, info: dict[str, Any], tasks: list[str]) -> list[dict[str, Any]]:
    """Episodes-metadata rows (without statistics) rebuilt from a dataset written one episode per file, from
    data/chunk-000/file-000 on; a last episode whose videos are incomplete is left out (it is debris).
    DatasetError if the files cannot be explained that way or hold fewer episodes than info.json counts."""
    if not tasks:
        raise _unrebuildable(root, f"{root / layout.TASKS_PATH}, the list of task instructions, is missing or empty")
    rows: list[dict[str, Any]] = []
    keys, fps = integrity.video_keys(info), int(info["fps"])
    expected, frames = (0, 0), 0
    data_files = integrity.files_by_position(root / "data", ".parquet")
    for path, position in data_files.items():
        episode = len(rows)
        if position != expected:
            gap = root / info["data_path"].format(chunk_index=expected[0], file_index=expected[1])
            raise _unrebuildable(root, f"{gap}, the data file of episode {episode}, is missing")
        length, task_index = _episode_in(path, episode, frames, len(tasks))
        files = {"data": position} | {f"videos/{key}": position for key in keys}
        row = layout.episode_row(episode, tasks[task_index], frames, length, fps, files)
        videos = [integrity.video_file(root, info, key, row) for key in keys]
        incomplete = [video for video in videos if integrity.mp4_problem(video)]
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
    table = pq.read_table(integrity.data_file(root, info, row), columns=columns)
    stats = {key: layout.feature_stats(layout.column_to_numpy(table.column(key))) for key in columns}
    for key in integrity.video_keys(info):
        frames = integrity.decode_video(integrity.video_file(root, info, key, row), row["episode_index"])
        stats[key] = layout.feature_stats(frames, image=True)
    return stats


def _episode_in(path: Path, episode: int, start: int, tasks: int) -> tuple[int, int]:
    """(length, task_index) of the one episode the data file `path` must hold: number `episode`, frames
    `start`, `start` + 1, ... in order; DatasetError otherwise."""
    try:
        table = pq.read_table(path, columns=["episode_index", "index", "frame_index", "task_index"])
    except (OSError, pa.ArrowException) as err:
        raise integrity.damaged(path, episode, f"it cannot be read ({err})") from None
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
