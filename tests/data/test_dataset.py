"""Demonstration datasets in the LeRobotDataset v3.0 layout: round trip, layout, crash safety, appending, refusing
mismatches, and reading files laid out the way LeRobot writes them (several episodes per file)."""

import json
import re

import imageio.v3 as iio
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from policyforge.data import dataset, layout
from policyforge.data.dataset import Demonstrations, DemoWriter

STATE_DIM, ACTION_DIM, HW = 6, 3, (24, 32)


def make_writer(root, **changes) -> DemoWriter:
    options = {
        "fps": 25,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "cameras": ["front", "wrist"],
        "image_hw": HW,
        "task_name": "arm-reach",
        "info_extra": {"expert": {"hesitation": 0.1}},
    }
    return DemoWriter(root, **(options | changes))


def make_episode(length: int, seed: int, cameras=("front", "wrist")) -> dict:
    """Random signals, and images with smooth gradients plus sharp-edged blocks (a codec's hard case)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[: HW[0], : HW[1]]
    images = {}
    for k, camera in enumerate(cameras):
        frames = np.zeros((length, *HW, 3), np.uint8)
        for t in range(length):
            frames[t, ..., 0] = (xx * 7 + t * 5 + 40 * k) % 256
            frames[t, ..., 1] = (yy * 9 + seed * 30) % 256
            frames[t, ..., 2] = 255 * ((xx // 6 + yy // 6 + t) % 2)
        images[camera] = frames
    return {
        "states": rng.standard_normal((length, STATE_DIM)),
        "actions": rng.uniform(-1, 1, (length, ACTION_DIM)),
        "rewards": rng.random(length),
        "dones": np.arange(length) == length - 1,
        "successes": rng.random(length) > 0.5,
        "images": images,
    }


def concat(episodes, key, camera=None):
    return np.concatenate([e["images"][camera] if camera else e[key] for e in episodes])


def test_round_trip(tmp_path):
    writer = make_writer(tmp_path / "ds")
    episodes = [make_episode(length, seed) for seed, length in enumerate([9, 14, 5])]
    for i, episode in enumerate(episodes):
        assert writer.add_episode(**episode, instruction="reach" if i < 2 else "reach again") == i
    data = Demonstrations(tmp_path / "ds")
    assert data.num_episodes == 3 and data.num_frames == 28 and data.fps == 25
    assert data.episode_bounds.tolist() == [[0, 9], [9, 23], [23, 28]]
    assert data.cameras == ["front", "wrist"] and data.tasks == ["reach", "reach again"]
    state = data.column("observation.state")
    assert state.dtype == np.float32 and np.array_equal(state, concat(episodes, "states").astype(np.float32))
    assert np.array_equal(data.column("action"), concat(episodes, "actions").astype(np.float32))
    assert np.array_equal(data.column("next.reward"), concat(episodes, "rewards").astype(np.float32))
    assert data.column("next.success").dtype == bool
    assert np.array_equal(data.column("next.success"), concat(episodes, "successes"))
    assert np.array_equal(data.column("next.done"), concat(episodes, "dones"))
    assert np.array_equal(data.column("index"), np.arange(28))
    assert np.array_equal(data.column("task_index"), [0] * 23 + [1] * 5)
    assert np.allclose(data.column("timestamp")[9:12], [0.0, 0.04, 0.08])
    for camera in ("front", "wrist"):
        frames, original = data.images(camera), concat(episodes, None, camera)
        assert frames.shape == (28, *HW, 3) and frames.dtype == np.uint8
        error = np.abs(frames.astype(int) - original)
        assert error.max() <= 3 and error.mean() < 1.0  # lossless in YUV 4:4:4; only the colour conversion rounds
    assert np.array_equal(data.images("front", episodes=[1]), data.images("front")[9:23])
    actions = data.column("action")
    assert np.array_equal(data.column("action", episodes=[2, 0]), np.concatenate([actions[23:], actions[:9]]))
    stats = data.stats  # pooled over episodes, equal to the statistics of all frames
    assert np.allclose(stats["observation.state"]["mean"], state.mean(axis=0), atol=1e-6)
    assert np.allclose(stats["observation.state"]["std"], state.std(axis=0), atol=1e-6)
    assert np.allclose(stats["action"]["min"], data.column("action").min(axis=0))
    assert np.array(stats["observation.images.front"]["mean"]).shape == (3, 1, 1)


def test_layout_follows_the_v30_templates(tmp_path):
    root = tmp_path / "ds"
    writer = make_writer(root, info_extra={"task_options": {"reward_type": "sparse"}})
    for seed in range(3):
        writer.add_episode(**make_episode(4, seed))
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["fps"]) == (3, 12, 1, 25)
    assert info["chunks_size"] == 1000 and info["splits"] == {"train": "0:3"} and "robot_type" in info
    assert info["policyforge"]["task"] == "arm-reach"
    assert info["policyforge"]["task_options"] == {"reward_type": "sparse"}
    features = info["features"]
    assert features["observation.state"] == {"dtype": "float32", "shape": [STATE_DIM], "names": None}
    assert features["action"]["shape"] == [ACTION_DIM]
    assert features["observation.images.front"]["dtype"] == "video"
    assert features["observation.images.front"]["shape"] == [*HW, 3]
    for name, dtype in [("next.reward", "float32"), ("next.done", "bool"), ("next.success", "bool")]:
        assert features[name] == {"dtype": dtype, "shape": [1], "names": None}
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert features[name]["shape"] == [1]
    for i in range(3):
        assert (root / f"data/chunk-000/file-{i:03d}.parquet").is_file()
        for camera in ("front", "wrist"):
            assert (root / f"videos/observation.images.{camera}/chunk-000/file-{i:03d}.mp4").is_file()
    schema = pq.read_schema(root / "data/chunk-000/file-001.parquet")
    assert schema.field("observation.state").type == pa.list_(pa.float32())
    assert schema.field("action").type == pa.list_(pa.float32())
    assert schema.field("next.done").type == pa.bool_() and schema.field("index").type == pa.int64()
    assert set(schema.names) == {n for n, f in features.items() if f["dtype"] != "video"}
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["episode_index"] for e in episodes] == [0, 1, 2]
    second = episodes[1]
    assert second["tasks"] == ["arm-reach"] and second["length"] == 4
    assert (second["data/chunk_index"], second["data/file_index"]) == (0, 1)
    assert (second["dataset_from_index"], second["dataset_to_index"]) == (4, 8)
    assert second["videos/observation.images.front/file_index"] == 1
    assert second["videos/observation.images.front/from_timestamp"] == 0.0
    assert second["videos/observation.images.front/to_timestamp"] == pytest.approx(4 / 25)
    assert len(second["stats/observation.state/mean"]) == STATE_DIM
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.to_pylist() == [{"task_index": 0, "task": "arm-reach"}]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # LeRobot reads it with pandas
    stats = json.loads((root / "meta/stats.json").read_text())
    assert set(stats["action"]) == {"min", "max", "mean", "std", "count"} and stats["action"]["count"] == [12]


def test_files_roll_over_into_the_next_chunk_and_metadata_file(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "CHUNKS_SIZE", 2)
    monkeypatch.setattr(dataset, "EPISODES_PER_META_FILE", 2)
    writer = make_writer(tmp_path / "ds", cameras=["front"])
    for seed in range(3):
        writer.add_episode(**make_episode(3, seed, cameras=["front"]))
    assert (tmp_path / "ds/data/chunk-001/file-000.parquet").is_file()
    assert (tmp_path / "ds/videos/observation.images.front/chunk-001/file-000.mp4").is_file()
    assert pq.read_table(tmp_path / "ds/meta/episodes/chunk-000/file-001.parquet").num_rows == 1
    make_writer(tmp_path / "ds", cameras=["front"]).add_episode(**make_episode(2, 3, cameras=["front"]))
    assert pq.read_table(tmp_path / "ds/meta/episodes/chunk-000/file-001.parquet").num_rows == 2
    data = Demonstrations(tmp_path / "ds")
    assert data.episode_bounds.tolist() == [[0, 3], [3, 6], [6, 9], [9, 11]]
    assert data.images("front").shape[0] == 11


def test_an_interrupted_episode_is_invisible_and_writing_continues(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    writer = make_writer(root)
    episodes = [make_episode(6, seed) for seed in range(4)]
    writer.add_episode(**episodes[0])
    writer.add_episode(**episodes[1])

    def crash(self, row):
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(DemoWriter, "_commit", crash)  # data and videos written, episode not committed
        with pytest.raises(OSError, match="disk full"):
            writer.add_episode(**episodes[2], instruction="a new instruction")
    assert (root / "data/chunk-000/file-002.parquet").is_file()  # the orphan
    (root / "data/chunk-000/.file-003.k2j4_x9q.parquet").write_bytes(b"half a file")  # as left by SIGKILL
    data = Demonstrations(root)
    assert data.num_episodes == 2 and data.num_frames == 12 and data.tasks[:1] == ["arm-reach"]
    assert np.array_equal(data.column("action"), concat(episodes[:2], "actions").astype(np.float32))
    assert json.loads((root / "meta/info.json").read_text())["total_episodes"] == 2

    resumed = make_writer(root)  # reopening removes the debris, then appends
    assert not (root / "data/chunk-000/file-002.parquet").exists()
    assert not (root / "data/chunk-000/.file-003.k2j4_x9q.parquet").exists()
    assert resumed.add_episode(**episodes[3]) == 2
    data = Demonstrations(root)
    assert data.num_episodes == 3 and np.array_equal(data.column("index"), np.arange(18))
    assert np.array_equal(data.column("observation.state")[12:], episodes[3]["states"].astype(np.float32))
    assert np.abs(data.images("wrist")[12:].astype(int) - episodes[3]["images"]["wrist"]).max() <= 3


def test_a_writer_continues_after_a_failed_episode(tmp_path, monkeypatch):
    writer = make_writer(tmp_path / "ds")
    calls = {"n": 0}
    original = DemoWriter._commit

    def flaky(self, row):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("interrupted")
        original(self, row)

    monkeypatch.setattr(DemoWriter, "_commit", flaky)
    writer.add_episode(**make_episode(5, 0))
    with pytest.raises(OSError):
        writer.add_episode(**make_episode(7, 1))
    writer.add_episode(**make_episode(3, 2))
    data = Demonstrations(tmp_path / "ds")
    assert data.episode_bounds.tolist() == [[0, 5], [5, 8]]
    assert data.images("front").shape[0] == 8


def test_appending_to_an_existing_dataset(tmp_path):
    root = tmp_path / "ds"
    first = make_writer(root, session={"seed": 0})
    first.add_episode(**make_episode(4, 0))
    first.add_episode(**make_episode(5, 1))
    second = make_writer(root, session={"seed": 2})
    assert second.num_episodes == 2
    second.add_episode(**make_episode(6, 2))
    data = Demonstrations(root)
    assert data.num_episodes == 3 and data.episode_bounds.tolist() == [[0, 4], [4, 9], [9, 15]]
    assert np.array_equal(data.column("episode_index"), [0] * 4 + [1] * 5 + [2] * 6)
    assert data.info["total_frames"] == 15
    assert data.info["policyforge"]["sessions"] == [{"first_episode": 0, "seed": 0}, {"first_episode": 2, "seed": 2}]
    assert data.stats["action"]["count"] == [15]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"state_dim": STATE_DIM + 1}, "observation.state (state_dim)"),
        ({"action_dim": 7}, "action (action_dim)"),
        ({"fps": 50}, "fps"),
        ({"cameras": ["front"]}, "feature observation.images.wrist"),
        ({"image_hw": (48, 64)}, "observation.images.front"),
        ({"task_name": "arm-lift-cube"}, "policyforge.task"),
        ({"info_extra": {"expert": {"hesitation": 0.3}}}, "policyforge.expert"),
    ],
)
def test_refuses_a_dataset_written_with_other_settings(tmp_path, change, field):
    make_writer(tmp_path / "ds").add_episode(**make_episode(3, 0))
    with pytest.raises(ValueError, match=re.escape(field)):
        make_writer(tmp_path / "ds", **change)
    assert Demonstrations(tmp_path / "ds").num_episodes == 1


def test_add_episode_checks_its_arrays(tmp_path):
    writer = make_writer(tmp_path / "ds")
    episode = make_episode(4, 0)
    with pytest.raises(ValueError, match="states must be"):
        writer.add_episode(**{**episode, "states": episode["states"][:, :2]})
    with pytest.raises(ValueError, match="actions hold NaN"):
        writer.add_episode(**{**episode, "actions": np.full((4, ACTION_DIM), np.nan)})
    with pytest.raises(ValueError, match="exactly the cameras"):
        writer.add_episode(**{**episode, "images": {"front": episode["images"]["front"]}})
    with pytest.raises(ValueError, match=r"images\['wrist'\] must be"):
        writer.add_episode(**{**episode, "images": {**episode["images"], "wrist": episode["images"]["wrist"][:2]}})
    assert Demonstrations(tmp_path / "ds").num_episodes == 0


def test_clear_errors_for_missing_and_foreign_directories(tmp_path):
    with pytest.raises(FileNotFoundError, match="policyforge collect"):
        Demonstrations(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"not a LeRobotDataset: .*meta/info.json is missing"):
        Demonstrations(tmp_path / "empty")
    (tmp_path / "old" / "meta").mkdir(parents=True)
    (tmp_path / "old" / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 10}))
    with pytest.raises(ValueError, match=r"v2\.1; this reader needs v3\.0"):
        Demonstrations(tmp_path / "old")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a dataset"):
        make_writer(tmp_path / "other")
    data_dir = tmp_path / "ds"
    make_writer(data_dir).add_episode(**make_episode(3, 0))
    with pytest.raises(ValueError, match=r"no frame column 'observation\.velocity'"):
        Demonstrations(data_dir).column("observation.velocity")
    with pytest.raises(ValueError, match="no camera 'top'"):
        Demonstrations(data_dir).images("top")


def test_reads_files_laid_out_the_way_lerobot_writes_them(tmp_path):
    """Several episodes per data and video file (fixed-size lists, as `datasets` writes them), each episode found
    by its global frame index, and rows of an uncommitted episode at the end of a file ignored."""
    root, fps, lengths = tmp_path / "lerobot", 10, [4, 6, 3]
    rng = np.random.default_rng(0)
    total = sum(lengths) + 2  # two trailing rows no episode row points at
    starts = np.cumsum([0, *lengths])
    episode_of = np.repeat(np.arange(4), [*lengths, 2])
    state = rng.standard_normal((total, 4)).astype(np.float32)
    frames = rng.integers(0, 256, (total, 16, 16, 3), dtype=np.uint8)
    columns = {
        "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.reshape(-1)), 4),
        "next.success": pa.array(np.arange(total) % 3 == 0),
        "timestamp": pa.array((np.arange(total) - starts[np.minimum(episode_of, 3)]) / fps, pa.float32()),
        "frame_index": pa.array(np.arange(total) - starts[np.minimum(episode_of, 3)]),
        "episode_index": pa.array(episode_of),
        "index": pa.array(np.arange(total)),
        "task_index": pa.array(episode_of % 2),
    }
    side = frames[..., ::-1]  # a second camera stored as PNG frames inside the data files (dtype "image")
    pngs = [{"bytes": iio.imwrite("<bytes>", frame, extension=".png"), "path": None} for frame in side]
    columns["observation.images.side"] = pa.array(pngs, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    (root / "data/chunk-000").mkdir(parents=True)
    table = pa.table(columns)  # episodes 0 and 1 in file-000, episode 2 (global index 10...) in file-001
    pq.write_table(table.slice(0, starts[2]), root / "data/chunk-000/file-000.parquet")
    pq.write_table(table.slice(starts[2]), root / "data/chunk-000/file-001.parquet")
    layout.write_video(root / "videos/observation.images.top/chunk-000/file-000.mp4", frames, fps)
    key = "observation.images.top"
    rows = [
        {
            "episode_index": e,
            "tasks": [f"task {e % 2}"],
            "length": lengths[e],
            "data/chunk_index": 0,
            "data/file_index": int(e == 2),
            "dataset_from_index": int(starts[e]),
            "dataset_to_index": int(starts[e + 1]),
            f"videos/{key}/chunk_index": 0,
            f"videos/{key}/file_index": 0,
            f"videos/{key}/from_timestamp": starts[e] / fps,
            f"videos/{key}/to_timestamp": starts[e + 1] / fps,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
        }
        for e in (2, 0, 1)  # row order does not matter, episode_index does
    ]
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(layout.tasks_table(["task 0", "task 1"]), root / "meta/tasks.parquet")
    features = {
        "observation.state": {"dtype": "float32", "shape": [4], "names": None},
        key: {"dtype": "video", "shape": [16, 16, 3], "names": ["height", "width", "channels"]},
        "observation.images.side": {"dtype": "image", "shape": [16, 16, 3], "names": ["height", "width", "channels"]},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
        **{name: {"dtype": "int64", "shape": [1], "names": None} for name in ("frame_index", "index")},
    }
    info = {"codebase_version": "v3.0", "fps": fps, "features": features, "robot_type": "so100"}
    info |= {"data_path": layout.DATA_PATH, "video_path": layout.VIDEO_PATH, "total_episodes": 3}
    (root / "meta/info.json").write_text(json.dumps(info))

    data = Demonstrations(root)
    committed = sum(lengths)
    assert data.num_episodes == 3 and data.num_frames == committed and data.cameras == ["top", "side"]
    assert data.episode_bounds.tolist() == [[0, 4], [4, 10], [10, 13]] and data.tasks == ["task 0", "task 1"]
    assert np.array_equal(data.column("observation.state"), state[:committed])
    assert np.array_equal(data.column("next.success"), np.arange(committed) % 3 == 0)
    assert np.array_equal(data.column("observation.state", episodes=[1]), state[4:10])
    assert np.abs(data.images("top").astype(int) - frames[:committed]).max() <= 3
    assert np.abs(data.images("top", episodes=[2]).astype(int) - frames[10:13]).max() <= 3
    assert np.array_equal(data.images("side", episodes=[1, 2]), side[4:committed])


def test_videos_decode_exactly_however_long_ffmpeg_takes_to_start(tmp_path, monkeypatch):
    import imageio_ffmpeg

    frames = np.random.default_rng(0).integers(0, 256, (6, 16, 24, 3), dtype=np.uint8)
    layout.write_video(tmp_path / "clip.mp4", frames, fps=10)
    slow = tmp_path / "slow-ffmpeg"  # a machine so busy that ffmpeg needs 11 s to print the stream's header
    slow.write_text(f'#!/bin/sh\nsleep 11\nexec "{imageio_ffmpeg.get_ffmpeg_exe()}" "$@"\n')
    slow.chmod(0o755)
    for module in (imageio_ffmpeg, imageio_ffmpeg._io):  # the package's name and its reader's own import of it
        monkeypatch.setattr(module, "get_ffmpeg_exe", lambda: str(slow))
    decoded = layout.read_video(tmp_path / "clip.mp4")
    assert decoded.shape == frames.shape  # every frame, at its size
    assert np.abs(decoded.astype(int) - frames).max() <= 3  # lossless in YUV: RGB within rounding
    monkeypatch.undo()
    (tmp_path / "noise.mp4").write_bytes(np.random.default_rng(1).bytes(4096))
    with pytest.raises(OSError):
        layout.read_video(tmp_path / "noise.mp4")
