"""Demonstration datasets in the LeRobotDataset v3.0 layout (`layout.py`): a crash-safe writer and a reader.

`DemoWriter` writes one episode per data file and per video file. Every file goes through a temp file +
rename, and an episode exists only once the episodes-metadata parquet lists it: that rewrite is the commit
point, so a crash mid-episode leaves a dataset that reads as the episodes committed before it. Reopening a
dataset appends to it (after checking fps, shapes, cameras and the "policyforge" facts match, and that every
committed episode's files are whole) and removes the debris of an interrupted episode, and nothing else
(`integrity.py`): episodes metadata that does not explain the data files is rebuilt from them (`recovery.py`),
or the dataset is refused with a DatasetError. `Demonstrations` reads committed episodes only, ours or LeRobot's
(several episodes per file included), into numpy arrays.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from policyforge.data import integrity, layout, recovery
from policyforge.data.integrity import DatasetError
from policyforge.data.layout import ACTION, ENV_STATE, STATE
from policyforge.io import is_plain_name, write_json

EPISODES_PER_META_FILE = 500
"""Rows per episodes-metadata file: each commit rewrites only the last one."""

log = logging.getLogger(__name__)


class Demonstrations:
    """Read-only view of a LeRobotDataset v3.0 directory (committed episodes only).

    Frames are numbered 0..N-1 in episode order; `episode_bounds[e]` is episode e's [from, to) range of them.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        info_path = self.root / layout.INFO_PATH
        if self.root.exists() and not self.root.is_dir():
            raise DatasetError(f"{self.root} is a file; a dataset is a directory (the one that holds meta/info.json)")
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"no demonstration dataset at {self.root}: record one with `policyforge collect <task> --out {root}`"
            )
        if not info_path.is_file():
            raise DatasetError(
                f"{self.root} is not a LeRobotDataset: {info_path} is missing; give the directory that holds "
                "meta/info.json, meta/episodes/ and data/ (e.g. one written by `policyforge collect`)"
            )
        try:
            self.info: dict[str, Any] = layout.read_json(info_path)
        except ValueError as err:
            raise DatasetError(f"{info_path} is not valid JSON ({err}): restore it from a copy") from None
        version = str(self.info.get("codebase_version"))
        if not version.startswith("v3."):
            raise DatasetError(
                f"{self.root} is a LeRobotDataset {version}; this reader needs v3.0: convert it with LeRobot's "
                "convert_dataset_v21_to_v30 script (--repo-id=<id> --root=<dir>)"
            )
        tasks_path = self.root / layout.TASKS_PATH
        self.tasks: list[str] = layout.read_tasks(tasks_path) if tasks_path.is_file() else []
        """Instructions by task_index."""
        self.rows, self.recovered = recovery.committed_rows(self.root, self.info, self.tasks)
        """Committed episodes (rows of meta/episodes), by episode_index; `recovered`: rebuilt from the data files
        (without statistics) because meta/episodes did not explain them (a `DemoWriter` writes them back)."""

    @property
    def fps(self) -> int:
        return int(self.info["fps"])

    @property
    def num_episodes(self) -> int:
        return len(self.rows)

    @property
    def num_frames(self) -> int:
        return int(sum(row["length"] for row in self.rows))

    @property
    def episode_bounds(self) -> np.ndarray:
        """[E, 2] int64: each episode's [from, to) frame range."""
        starts = np.cumsum([0] + [int(row["length"]) for row in self.rows])
        return np.stack([starts[:-1], starts[1:]], axis=1).astype(np.int64)

    @property
    def cameras(self) -> list[str]:
        """Camera names (`front` for `observation.images.front`; LeRobot keys outside that prefix as they are)."""
        keys = [key for key, spec in self.info["features"].items() if spec["dtype"] in ("video", "image")]
        return [key.removeprefix(layout.IMAGE_PREFIX) for key in keys]

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json: per feature min / max / mean / std / count."""
        path = self.root / layout.STATS_PATH
        raw = layout.read_json(path) if path.is_file() else {}
        return {key: {name: np.asarray(value) for name, value in entry.items()} for key, entry in raw.items()}

    def column(self, name: str, episodes: Sequence[int] | None = None) -> np.ndarray:
        """A per-frame column over `episodes` (default all), in frame order: e.g. `observation.state` float32
        [N, D], `action` [N, A], `next.reward` float32 [N], `next.success` bool [N], `episode_index` int64 [N]."""
        spec = self.info["features"].get(name)
        if spec is None or spec["dtype"] in ("video", "image"):
            columns = [key for key, s in self.info["features"].items() if s["dtype"] not in ("video", "image")]
            raise ValueError(f"{self.root} has no frame column {name!r}; columns: {', '.join(columns)}")
        parts = [self._episode_rows(row, name) for row in self._select(episodes)]
        dtype = np.dtype(spec["dtype"]) if spec["dtype"] != "string" else object
        if not parts:
            return np.zeros((0, *([] if list(spec["shape"]) == [1] else spec["shape"])), dtype)
        return np.concatenate(parts).astype(dtype, copy=False)

    def images(self, camera: str, episodes: Sequence[int] | None = None) -> np.ndarray:
        """Decoded frames of `camera` over `episodes` (default all), in frame order: [N, H, W, 3] uint8."""
        key = camera if camera in self.info["features"] else layout.camera_key(camera)
        spec = self.info["features"].get(key)
        if spec is None or spec["dtype"] not in ("video", "image"):
            raise ValueError(f"{self.root} has no camera {camera!r}; cameras: {self.cameras}")
        if spec["dtype"] == "image":  # LeRobot datasets may embed PNG frames in the data files
            import imageio.v3 as iio

            encoded = [self._episode_rows(row, key) for row in self._select(episodes)]
            return np.stack([iio.imread(item["bytes"]) for part in encoded for item in part])
        clips, decoded_path, frames = [], None, np.zeros(0)
        for row in self._select(episodes):
            path = self.root / self.info["video_path"].format(
                video_key=key, chunk_index=row[f"videos/{key}/chunk_index"], file_index=row[f"videos/{key}/file_index"]
            )
            if path != decoded_path:  # episodes sharing a file are consecutive: decode each file once
                frames, decoded_path = integrity.decode_video(path, row["episode_index"]), path
            start = round(row[f"videos/{key}/from_timestamp"] * self.fps)
            clip = frames[start : start + row["length"]]
            if len(clip) != row["length"]:
                raise integrity.damaged(
                    path, row["episode_index"], f"it decodes to {len(frames)} frames, the episode needs frames "
                    f"{start}..{start + row['length'] - 1}"
                )  # fmt: skip
            clips.append(clip)
        height, width = spec["shape"][:2]
        return np.concatenate(clips) if clips else np.zeros((0, height, width, 3), np.uint8)

    def _select(self, episodes: Sequence[int] | None) -> list[dict[str, Any]]:
        if episodes is None:
            return self.rows
        bad = [e for e in episodes if not 0 <= e < len(self.rows)]
        if bad:
            raise IndexError(f"episodes {bad} out of range: {self.root} holds {len(self.rows)} episodes")
        return [self.rows[e] for e in episodes]

    def _episode_rows(self, row: dict[str, Any], name: str) -> np.ndarray:
        """Column `name` of one episode's frames, found by the global `index` in its data file (which may hold
        other episodes, or uncommitted rows)."""
        path = self.root / self.info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        try:
            table = pq.read_table(path, columns=list(dict.fromkeys(["index", name])))
        except (OSError, pa.ArrowException) as err:
            raise integrity.damaged(path, row["episode_index"], f"it cannot be read ({err})") from None
        index = table.column("index").to_numpy()
        order = np.argsort(index, kind="stable")
        start, stop = np.searchsorted(index[order], [row["dataset_from_index"], row["dataset_to_index"]])
        if stop - start != row["length"]:
            raise integrity.damaged(
                path, row["episode_index"], f"it holds {stop - start} of the episode's frames, its metadata says "
                f"{row['length']}"
            )  # fmt: skip
        return layout.column_to_numpy(table.column(name))[order[start:stop]]


class DemoWriter:
    """Appends episodes to a LeRobotDataset v3.0 directory, one atomic commit each (module docstring).

    Opening an existing dataset continues it; one written with another fps, state/action size, camera set,
    image size, task or `info_extra` value is refused with a ValueError naming the field.
    """

    def __init__(
        self,
        root: str | Path,
        fps: int,
        state_dim: int,
        action_dim: int,
        cameras: Sequence[str] = (),
        image_hw: tuple[int, int] = (96, 96),
        task_name: str = "",
        info_extra: dict[str, Any] | None = None,
        *,
        robot_type: str | None = None,
        session: dict[str, Any] | None = None,
        env_state_dim: int = 0,
    ):
        """`fps`: frames per second (integer, as LeRobot requires); `cameras`: names, stored as
        `observation.images.<name>`; `image_hw`: (height, width); `task_name`, `info_extra`: policyforge's facts,
        kept in info.json under "policyforge"; `session`: facts of this writing session only (e.g. a seed),
        listed under "policyforge.sessions" with the first episode it wrote; `env_state_dim`: size of the
        privileged state every episode then gives (`observation.environment_state`; 0: none)."""
        if int(fps) != fps or fps <= 0:
            raise ValueError(f"fps must be a positive integer (LeRobot's timestamps are frame_index / fps), got {fps}")
        self.root = Path(root)
        self.cameras = list(cameras)
        for camera in self.cameras:  # each names a folder, videos/observation.images.<camera>
            if not is_plain_name(layout.camera_key(camera)):
                raise ValueError(f"camera names are plain names (letters, digits, '.', '_', '-'), got {camera!r}")
        self.fps, self.state_dim, self.action_dim = int(fps), state_dim, action_dim
        self.env_state_dim = env_state_dim
        self.image_hw = tuple(image_hw)
        spec = layout.features(state_dim, action_dim, self.cameras, self.image_hw, self.fps, env_state_dim)
        extra = json.loads(json.dumps({"task": task_name, **(info_extra or {})}))  # as info.json will hold it
        if (self.root / layout.INFO_PATH).exists():
            existing = Demonstrations(self.root)
            _check_compatible(existing.info, self.fps, spec, extra, self.root)
            self.info, self.rows, self.tasks = existing.info, existing.rows, existing.tasks
            integrity.check_committed(self.root, self.info, self.rows)
            if existing.recovered:
                self._write_recovered_metadata()
            stored = self.info.setdefault("policyforge", {})
            stored.update({key: value for key, value in extra.items() if key not in stored})
            found = integrity.survey(self.root, self.info, self.rows)
            if not found.explained:  # `committed_rows` explained every file or refused: one appeared since
                changed = found.unexplained[0] if found.unexplained else self.root / layout.INFO_PATH
                raise DatasetError(
                    f"{changed} changed while {self.root} was opened; nothing was deleted: open it again"
                )
            for path in found.debris:
                path.unlink(missing_ok=True)
        else:
            if self.root.exists() and any(self.root.iterdir()):
                raise FileExistsError(
                    f"{self.root} holds files but no {layout.INFO_PATH}, so it is not a dataset: write to a new or "
                    "empty directory"
                )
            self.info, self.rows, self.tasks = layout.empty_info(self.fps, spec, robot_type, extra), [], []
        self.stats = layout.dataset_stats(self.rows)
        self._session = dict(session) if session else None
        self._write_summary()

    @property
    def num_episodes(self) -> int:
        return len(self.rows)

    @property
    def num_frames(self) -> int:
        return int(self.rows[-1]["dataset_to_index"]) if self.rows else 0

    def add_episode(
        self,
        states: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        successes: np.ndarray,
        images: dict[str, np.ndarray] | None = None,
        instruction: str | None = None,
        env_states: np.ndarray | None = None,
    ) -> int:
        """Write and commit one episode; returns its index. `states` [T, D] (what the policy saw before acting),
        `actions` [T, A], `rewards`, `dones`, `successes` [T] (after each action), `images` {camera: [T, H, W, 3]
        uint8}, `instruction`: the language task (default: the task name), `env_states` [T, D_e]: the privileged
        state beside each `states` row (exactly when the writer has `env_state_dim`)."""
        frames = self._validate(states, actions, rewards, dones, successes, images or {}, env_states)
        length, episode, start = len(states), len(self.rows), self.num_frames
        instruction = instruction or self.info["policyforge"].get("task") or "demonstration"
        new_task = instruction not in self.tasks
        tasks = [*self.tasks, instruction] if new_task else self.tasks
        columns = {
            STATE: np.asarray(states, np.float32),
            ACTION: np.asarray(actions, np.float32),
            **({ENV_STATE: np.asarray(env_states, np.float32)} if self.env_state_dim else {}),
            "next.reward": np.asarray(rewards, np.float32),
            "next.done": np.asarray(dones, bool),
            "next.success": np.asarray(successes, bool),
            "timestamp": (np.arange(length) / self.fps).astype(np.float32),
            "frame_index": np.arange(length),
            "episode_index": np.full(length, episode),
            "index": start + np.arange(length),
            "task_index": np.full(length, tasks.index(instruction)),
        }
        files = {"data": self._next_file("data")}
        chunk, file = files["data"]
        layout.write_parquet(
            layout.frame_table(columns), self.root / layout.DATA_PATH.format(chunk_index=chunk, file_index=file)
        )
        for camera in self.cameras:
            key = layout.camera_key(camera)
            chunk, file = files[f"videos/{key}"] = self._next_file(f"videos/{key}")
            path = self.root / layout.VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            layout.write_video(path, frames[camera], self.fps)
        row = layout.episode_row(episode, instruction, start, length, self.fps, files)
        stats = {key: layout.feature_stats(value) for key, value in columns.items()}
        stats |= {layout.camera_key(c): layout.feature_stats(frames[c], image=True) for c in self.cameras}
        if new_task:
            layout.write_parquet(layout.tasks_table(tasks), self.root / layout.TASKS_PATH)
        self._commit(row | layout.stats_to_columns(stats))
        self.tasks = tasks
        self.stats = layout.merge_stats(self.stats, stats)
        if self._session is not None:
            self.info["policyforge"].setdefault("sessions", []).append({"first_episode": episode, **self._session})
            self._session = None
        self._write_summary()
        return episode

    def _validate(self, states, actions, rewards, dones, successes, images, env_states) -> dict[str, np.ndarray]:
        length = len(states)
        expected = {
            "states": (states, (length, self.state_dim)),
            "actions": (actions, (length, self.action_dim)),
            "rewards": (rewards, (length,)),
            "dones": (dones, (length,)),
            "successes": (successes, (length,)),
        }
        if self.env_state_dim or env_states is not None:
            expected["env_states"] = (env_states, (length, self.env_state_dim))
        for name, (value, shape) in expected.items():
            if value is None or np.shape(value) != shape or length == 0:
                got = "none" if value is None else list(np.shape(value))
                raise ValueError(f"{name} must be {list(shape)} (T ≥ 1 frames), got {got}")
        for name in ("states", "actions", "rewards", *(["env_states"] if "env_states" in expected else [])):
            bad = np.argwhere(~np.isfinite(np.asarray(expected[name][0], np.float64)))
            if len(bad):
                raise ValueError(f"{name} hold NaN or inf (first at index {bad[0].tolist()})")
        if sorted(images) != sorted(self.cameras):
            raise ValueError(f"images must have exactly the cameras {self.cameras}, got {sorted(images)}")
        shape = (length, *self.image_hw, 3)
        for camera, value in images.items():
            if np.shape(value) != shape or np.asarray(value).dtype != np.uint8:
                raise ValueError(f"images[{camera!r}] must be {list(shape)} uint8, got {list(np.shape(value))}")
        return {camera: np.asarray(value) for camera, value in images.items()}

    def _next_file(self, prefix: str) -> tuple[int, int]:
        """(chunk, file) for the next episode's data or video: one past the last committed episode's."""
        if not self.rows:
            return 0, 0
        return layout.next_file(int(self.rows[-1][f"{prefix}/chunk_index"]), int(self.rows[-1][f"{prefix}/file_index"]))

    def _commit(self, row: dict[str, Any]) -> None:
        """The commit point: rewrite the last episodes-metadata file with `row` added, atomically."""
        chunk, file = 0, 0
        previous = None
        if self.rows:
            chunk, file = (
                int(self.rows[-1]["meta/episodes/chunk_index"]),
                int(self.rows[-1]["meta/episodes/file_index"]),
            )
            in_file = sum(
                1 for r in self.rows if (r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) == (chunk, file)
            )
            if in_file >= EPISODES_PER_META_FILE:
                chunk, file = layout.next_file(chunk, file)
            else:
                previous = pq.read_table(self.root / layout.EPISODES_PATH.format(chunk_index=chunk, file_index=file))
        row = row | {"meta/episodes/chunk_index": chunk, "meta/episodes/file_index": file}
        table = pa.Table.from_pylist([row])
        if previous is not None:  # LeRobot's rows may have more or wider columns: missing ones become null
            table = pa.concat_tables([previous, table], promote_options="permissive")
        layout.write_parquet(table, self.root / layout.EPISODES_PATH.format(chunk_index=chunk, file_index=file))
        self.rows.append(row)

    def _write_summary(self) -> None:
        """info.json counts and stats.json, derived from the committed episodes (so a reopen repairs them)."""
        self.info["total_episodes"] = len(self.rows)
        self.info["total_frames"] = self.num_frames
        self.info["total_tasks"] = len(self.tasks)
        self.info["splits"] = {"train": f"0:{len(self.rows)}"} if self.rows else {}
        write_json(self.root / layout.INFO_PATH, self.info)
        write_json(self.root / layout.STATS_PATH, self.stats)

    def _write_recovered_metadata(self) -> None:
        """Write episodes metadata rebuilt from the data files (`Demonstrations.recovered`), statistics
        recomputed, in files of EPISODES_PER_META_FILE rows as `_commit` lays them out."""
        position = (0, 0)
        for first in range(0, len(self.rows), EPISODES_PER_META_FILE):
            group = self.rows[first : first + EPISODES_PER_META_FILE]
            for row in group:
                row |= layout.stats_to_columns(recovery.episode_stats(self.root, self.info, row))
                row |= {"meta/episodes/chunk_index": position[0], "meta/episodes/file_index": position[1]}
            path = self.root / layout.EPISODES_PATH.format(chunk_index=position[0], file_index=position[1])
            layout.write_parquet(pa.Table.from_pylist(group), path)
            position = layout.next_file(*position)
        log.warning("%s: rebuilt the episodes metadata of %d episodes from the data files", self.root, len(self.rows))


def _check_compatible(info: dict, fps: int, spec: dict, extra: dict, root: Path) -> None:
    """Refuse to append to a dataset written with other settings, naming the first field that differs."""

    def refuse(field: str, have: Any, want: Any) -> None:
        raise ValueError(
            f"{root} holds a dataset with {field} = {have!r}, this writer has {want!r}: write to another directory, "
            "or delete it first (policyforge collect --overwrite)"
        )

    if info.get("fps") != fps:
        refuse("fps", info.get("fps"), fps)
    names = {STATE: "observation.state (state_dim)", ACTION: "action (action_dim)"}
    for key in [*spec, *(k for k in info["features"] if k not in spec)]:
        have, want = info["features"].get(key), spec.get(key)
        if have is None or want is None:
            refuse(f"feature {key}", "present" if have else "absent", "present" if want else "absent")
        elif (have["dtype"], list(have["shape"])) != (want["dtype"], list(want["shape"])):
            describe = "{dtype} {shape}".format
            refuse(names.get(key, key), describe(**have), describe(dtype=want["dtype"], shape=list(want["shape"])))
    stored = info.get("policyforge") or {}
    for key, value in extra.items():
        if key in stored and stored[key] != value:
            refuse(f"policyforge.{key}", stored[key], value)
