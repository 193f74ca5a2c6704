"""The LeRobotDataset v3.0 layout on disk: path templates, the feature schema, statistics, tasks and videos.

    meta/info.json                                    schema, fps, counts, path templates (+ our "policyforge" key)
    meta/stats.json                                   min / max / mean / std / count of every feature
    meta/tasks.parquet                                instruction → task_index
    meta/episodes/chunk-000/file-000.parquet          one row per episode: length, files, frame range, stats
    data/chunk-000/file-000.parquet                   one row per frame
    videos/observation.images.<camera>/chunk-000/file-000.mp4

Field names follow LeRobot's `src/lerobot/datasets/utils.py` (codebase "v3.0"); `dataset.py` reads and writes them.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from policyforge.io import atomic_path

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
"""Files per chunk directory before the chunk index rolls over (LeRobot's default)."""
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
IMAGE_PREFIX = "observation.images."
STATE, ACTION = "observation.state", "action"
ENV_STATE = "observation.environment_state"
"""LeRobot's key for privileged simulator state (object poses, ...): training-time supervision, never a policy input
on a robot. policyforge writes the task's critic observation there."""
OBS_KEY_COLUMNS = {"policy": STATE, "critic": ENV_STATE}
"""The column holding each env observation key: `collect` writes the policy observation as the state and the
critic's (privileged) observation as the environment state."""
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
VIDEO_CRF = 0
"""x264 constant rate factor: 0 is lossless in YUV 4:4:4, so decoded RGB frames differ by ≤ 2 (colour conversion)."""


def next_file(chunk_index: int, file_index: int) -> tuple[int, int]:
    """The (chunk, file) after this one: files roll over into a new chunk every `CHUNKS_SIZE`."""
    return (chunk_index + 1, 0) if file_index + 1 >= CHUNKS_SIZE else (chunk_index, file_index + 1)


def camera_key(camera: str) -> str:
    return camera if camera.startswith(IMAGE_PREFIX) else IMAGE_PREFIX + camera


def features(
    state_dim: int,
    action_dim: int,
    cameras: Sequence[str],
    image_hw: tuple[int, int],
    fps: int,
    env_state_dim: int = 0,
) -> dict:
    """The `features` entry of info.json: dtype, shape and names of every column and video stream
    (`observation.environment_state` when `env_state_dim`)."""
    height, width = image_hw
    scalar = {"shape": [1], "names": None}
    spec: dict[str, dict[str, Any]] = {
        STATE: {"dtype": "float32", "shape": [state_dim], "names": None},
        ACTION: {"dtype": "float32", "shape": [action_dim], "names": None},
    }
    if env_state_dim:
        spec[ENV_STATE] = {"dtype": "float32", "shape": [env_state_dim], "names": None}
    for camera in cameras:
        spec[camera_key(camera)] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": "h264",
                "video.pix_fmt": "yuv444p",
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    spec["next.reward"] = {"dtype": "float32", **scalar}
    spec["next.done"] = {"dtype": "bool", **scalar}
    spec["next.success"] = {"dtype": "bool", **scalar}
    spec["timestamp"] = {"dtype": "float32", **scalar}
    for name in INDEX_FEATURES[1:]:
        spec[name] = {"dtype": "int64", **scalar}
    return spec


def empty_info(fps: int, feature_spec: dict, robot_type: str | None, extra: dict) -> dict:
    """info.json of a dataset without episodes."""
    has_video = any(spec["dtype"] == "video" for spec in feature_spec.values())
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": 0,
        "total_frames": 0,
        "total_tasks": 0,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if has_video else None,
        "features": feature_spec,
        "policyforge": extra,
    }


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write a parquet file atomically (temp file + rename)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="snappy")


# ---- statistics: per episode, then pooled over episodes --------------------------------------------------------


def feature_stats(values: np.ndarray, image: bool = False) -> dict[str, np.ndarray]:
    """min / max / mean / std / count over frames of `values` [T, ...]; images [T, H, W, 3] uint8 per channel,
    scaled to [0, 1] and shaped [3, 1, 1] as LeRobot stores them."""
    values = np.asarray(values, dtype=np.float64)
    frames = len(values)
    if image:
        values = values.reshape(-1, 3) / 255.0
    elif values.ndim == 1:
        values = values[:, None]
    stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
    }
    if image:
        stats = {key: value.reshape(3, 1, 1) for key, value in stats.items()}
    return {**stats, "count": np.array([frames])}


def pooled_stats(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Statistics of the union of frame sets, from theirs: total variance = mean of variances + variance of means."""
    counts = np.array([float(np.ravel(part["count"])[0]) for part in parts])
    weights = (counts / counts.sum()).reshape(-1, *([1] * np.ndim(parts[0]["mean"])))
    means = np.stack([part["mean"] for part in parts])
    mean = (weights * means).sum(axis=0)
    variance = (weights * (np.stack([part["std"] for part in parts]) ** 2 + (means - mean) ** 2)).sum(axis=0)
    return {
        "min": np.min([part["min"] for part in parts], axis=0),
        "max": np.max([part["max"] for part in parts], axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.array([int(counts.sum())]),
    }


def merge_stats(
    total: dict[str, dict[str, list]], episode: dict[str, dict[str, np.ndarray]]
) -> dict[str, dict[str, list]]:
    """stats.json so far (`total`) with one more episode's statistics pooled in."""
    merged = dict(total)
    for key, stats in episode.items():
        parts = [{name: np.asarray(value, np.float64) for name, value in total[key].items()}] if key in total else []
        merged[key] = {name: value.tolist() for name, value in pooled_stats([*parts, stats]).items()}
    return merged


def stats_to_columns(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """Episode statistics as the `stats/<feature>/<stat>` columns of an episodes-metadata row."""
    return {f"stats/{key}/{name}": value.tolist() for key, entry in stats.items() for name, value in entry.items()}


def stats_from_row(row: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Inverse of `stats_to_columns` for one row (columns missing or null in it are skipped)."""
    stats: dict[str, dict[str, np.ndarray]] = {}
    for column, value in row.items():
        if column.startswith("stats/") and value is not None:
            key, name = column[len("stats/") :].rsplit("/", 1)
            stats.setdefault(key, {})[name] = np.asarray(value, dtype=np.float64)
    return stats


def dataset_stats(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, list]]:
    """stats.json: every feature's statistics pooled over the episodes `rows`."""
    per_episode = [stats_from_row(row) for row in rows]
    keys = [key for key in per_episode[0] if all(key in stats for stats in per_episode)] if per_episode else []
    required = {"min", "max", "mean", "std", "count"}
    return {
        key: {name: value.tolist() for name, value in pooled_stats([stats[key] for stats in per_episode]).items()}
        for key in keys
        if all(required <= set(stats[key]) for stats in per_episode)
    }


# ---- tables ------------------------------------------------------------------------------------------------------


def read_episode_rows(root: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """Committed episodes: the rows of every readable episodes-metadata file, by episode_index; and the
    episodes-metadata files that cannot be read."""
    paths = sorted(p for p in (root / EPISODES_DIR).glob("chunk-*/file-*.parquet") if not p.name.startswith("."))
    rows, unreadable = [], []
    for path in paths:
        try:
            rows += pq.read_table(path).to_pylist()
        except (OSError, pa.ArrowException):
            unreadable.append(path)
    return sorted(rows, key=lambda row: row["episode_index"]), unreadable


def episode_row(
    episode: int, instruction: str, start: int, length: int, fps: int, files: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """An episodes-metadata row without statistics, for an episode alone in its files: `start` is its first
    global frame index; `files` the (chunk, file) of its data ("data") and of each video ("videos/<key>")."""
    row: dict[str, Any] = {"episode_index": episode, "tasks": [instruction], "length": length}
    row |= {"data/chunk_index": files["data"][0], "data/file_index": files["data"][1]}
    row |= {"dataset_from_index": start, "dataset_to_index": start + length}
    for prefix, (chunk, file) in files.items():
        if prefix != "data":
            row |= {f"{prefix}/chunk_index": chunk, f"{prefix}/file_index": file}
            row |= {f"{prefix}/from_timestamp": 0.0, f"{prefix}/to_timestamp": length / fps}
    return row


def frame_table(columns: dict[str, np.ndarray]) -> pa.Table:
    """One episode's frame columns as arrow: vectors as list<float32>, the rest as scalars."""
    arrays = {}
    for name, value in columns.items():
        if value.ndim == 2:
            offsets = np.arange(0, value.size + 1, value.shape[1], dtype=np.int32)
            arrays[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(value.reshape(-1)))
        else:
            arrays[name] = pa.array(value)
    return pa.table(arrays)


def column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """A parquet column as numpy: list / fixed-size-list of numbers → [N, D], scalars → [N], structs → objects."""
    array = column.combine_chunks()
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        values = array.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(array), -1)
    if pa.types.is_struct(array.type) or pa.types.is_string(array.type):
        return np.array(array.to_pylist(), dtype=object)
    return array.to_numpy(zero_copy_only=False)


# ---- tasks: pandas-readable, because LeRobot reads the table with pandas and looks tasks up by index -----------


def tasks_table(instructions: Sequence[str]) -> pa.Table:
    """meta/tasks.parquet: column `task_index`, and the instruction as the (pandas) index named `task`."""
    table = pa.table({"task_index": pa.array(range(len(instructions)), pa.int64()), "task": list(instructions)})
    pandas_metadata = {  # the Arrow spec of a pandas DataFrame with a named string index
        "index_columns": ["task"],
        "column_indexes": [
            {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object", "metadata": None}
        ],
        "columns": [
            {"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type, "metadata": None}
            for name, pandas_type, numpy_type in [("task_index", "int64", "int64"), ("task", "unicode", "object")]
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_metadata).encode()})


def read_tasks(path: Path) -> list[str]:
    """Instructions by task_index from meta/tasks.parquet (ours, or pandas-written by LeRobot)."""
    table = pq.read_table(path)
    name = "task" if "task" in table.column_names else "__index_level_0__"
    order = np.argsort(table.column("task_index").to_numpy())
    return [table.column(name).to_pylist()[i] for i in order]


# ---- videos -----------------------------------------------------------------------------------------------------


def write_video(path: Path, frames: np.ndarray, fps: int) -> None:
    """Encode RGB frames [T, H, W, 3] uint8 as H.264 (4:4:4, lossless in YUV) MP4, atomically; frame i is
    presented at i / fps seconds, where LeRobot looks for it."""
    import imageio.v2 as imageio

    with atomic_path(path) as tmp:
        writer = imageio.get_writer(
            tmp,
            format="FFMPEG",
            fps=fps,
            codec="libx264",
            pixelformat="yuv444p",
            macro_block_size=1,  # never resize
            quality=None,
            ffmpeg_log_level="error",
            ffmpeg_params=["-crf", str(VIDEO_CRF), "-g", str(fps)],  # a key frame every second: fast seeking
        )
        try:
            for frame in frames:
                writer.append_data(frame)
        finally:
            writer.close()


def read_video(path: Path) -> np.ndarray:
    """Decode every frame of a video: [T, H, W, 3] uint8 RGB. OSError if ffmpeg cannot.

    One ffmpeg process, waited for without a time limit: imageio-ffmpeg's reader gives ffmpeg 10 s to print the
    stream's header, and on a busy machine (two BC runs reading datasets side by side) a whole file was reported
    as damaged when ffmpeg was only slow."""
    import imageio_ffmpeg

    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", str(path)]
    done = subprocess.run([*command, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=False)
    log = done.stderr.decode(errors="replace")
    size = re.search(r"Stream #0:\d+.*?: Video: .*?, (\d{1,5})x(\d{1,5})\b", log)  # not the codec tag's 0x...
    if done.returncode or size is None:
        raise OSError(log.strip().splitlines()[-1] if log.strip() else f"ffmpeg exited with {done.returncode}")
    width, height = int(size.group(1)), int(size.group(2))
    if len(done.stdout) % (width * height * 3):
        raise OSError(f"{len(done.stdout)} bytes of RGB frames are not whole {width} x {height} frames")
    return np.frombuffer(done.stdout, np.uint8).reshape(-1, height, width, 3)
