"""Dataset recovery never deletes data its metadata does not explain: lost episodes metadata is rebuilt from the
data files or the dataset is refused; damaged committed files are reported, never appended to; a collect killed
with SIGKILL at any moment leaves a dataset that reopens with every committed episode."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_dataset import make_episode, make_writer

from policyforge.cli import main
from policyforge.data import integrity, layout
from policyforge.data.collect import collect
from policyforge.data.dataset import DatasetError, Demonstrations, DemoWriter

SHORT = {"episode_seconds": 0.4}  # 10 control steps
META = "meta/episodes/chunk-000/file-000.parquet"


def tree(root):
    """Every file under root with its bytes (a snapshot to compare before and after)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def data_files(root):
    return sorted(p.name for p in (root / "data/chunk-000").glob("file-*.parquet"))


def test_lost_episodes_metadata_is_rebuilt_from_the_data_files_not_deleted(tmp_path):
    """The finding: with meta/episodes gone, collect --out deleted 121 of 123 data files as crash debris."""
    root = tmp_path / "ds"
    collect("arm-reach", 123, root, num_envs=8, task_options=SHORT, progress=False)
    original = Demonstrations(root)
    rows, stats, states = original.rows, original.stats, original.column("observation.state")
    (root / META).unlink()

    data = Demonstrations(root)  # the reader recovers the episodes from the data files, writing nothing
    assert data.recovered and data.num_episodes == 123 and not (root / META).exists()
    assert np.array_equal(data.column("observation.state"), states)

    summary = collect("arm-reach", 2, root, num_envs=8, task_options=SHORT, progress=False)
    assert summary["dataset_episodes"] == 125 and summary["seed"] == 123  # appended after the 123, not over them
    data = Demonstrations(root)
    assert not data.recovered and len(data_files(root)) == 125
    assert np.array_equal(data.column("observation.state")[: len(states)], states)
    for before, after in zip(rows, data.rows[:123], strict=True):
        for key, value in before.items():
            assert after[key] == pytest.approx(value), key
    assert data.stats["action"]["count"] == [stats["action"]["count"][0] + 20]
    assert json.loads((root / layout.INFO_PATH).read_text())["total_episodes"] == 125


def test_rebuilt_metadata_has_the_statistics_of_the_episodes_videos_included(tmp_path):
    root = tmp_path / "ds"
    writer = make_writer(root)
    for seed in range(3):
        writer.add_episode(**make_episode(5 + seed, seed))
    rows = Demonstrations(root).rows
    (root / META).write_bytes(b"damaged")  # an unreadable metadata file is lost metadata too
    make_writer(root).add_episode(**make_episode(4, 3))
    data = Demonstrations(root)
    assert data.num_episodes == 4 and data.episode_bounds.tolist() == [[0, 5], [5, 11], [11, 18], [18, 22]]
    for before, after in zip(rows, data.rows, strict=False):
        assert list(after) == list(before)
        for key, value in before.items():
            if key.startswith("stats/observation.images"):  # from the decoded frames: within the codec's 2/255
                assert np.allclose(after[key], value, atol=2 / 255, rtol=0), key
            else:
                assert after[key] == value, key  # the rest is rebuilt exactly


def lose(relative):
    return lambda root: (root / relative).unlink()


def copy(source, target):
    return lambda root: shutil.copy(root / source, root / target)


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lose("data/chunk-000/file-001.parquet"), "file-001.parquet, the data file of episode 1, is missing"),
        (lose("videos/observation.images.front/chunk-000/file-001.mp4"), "a video of episode 1"),
        (lose(layout.TASKS_PATH), "tasks.parquet, the list of task instructions"),
        (copy("data/chunk-000/file-000.parquet", "data/chunk-000/file-002.parquet"), "not hold episode 2 alone"),
    ],
)
def test_metadata_that_cannot_be_rebuilt_stops_with_a_message_and_deletes_nothing(tmp_path, damage, problem):
    root = tmp_path / "ds"
    writer = make_writer(root)
    for seed in range(4):
        writer.add_episode(**make_episode(3, seed))
    (root / META).unlink()
    damage(root)
    before = tree(root)
    for opening in (lambda: Demonstrations(root), lambda: make_writer(root)):
        with pytest.raises(DatasetError, match="does not explain the data files") as error:
            opening()
        assert problem in str(error.value) and "Nothing was deleted" in str(error.value)
    assert tree(root) == before


def test_unexplained_files_beside_intact_metadata_are_never_deleted(tmp_path):
    root = tmp_path / "ds"
    writer = make_writer(root)
    for seed in range(3):
        writer.add_episode(**make_episode(3, seed))
    stray = root / "data/chunk-000/file-007.parquet"  # not at the next position: no interrupted episode wrote it
    shutil.copy(root / "data/chunk-000/file-000.parquet", stray)
    before = tree(root)
    with pytest.raises(DatasetError, match=r"file-003\.parquet, the data file of episode 3, is missing"):
        make_writer(root)
    assert tree(root) == before


@pytest.mark.parametrize("folder, suffix", [("data", "parquet"), ("videos/observation.images.front", "mp4")])
def test_a_file_at_the_next_position_is_debris_only_if_it_holds_the_next_episode(tmp_path, folder, suffix):
    """A hand-copied file where an interrupted episode would write is not that episode's debris: kept, refused."""
    root = tmp_path / "ds"
    writer = make_writer(root)
    for seed in range(3):
        writer.add_episode(**make_episode(3, seed))
    shutil.copy(root / f"{folder}/chunk-000/file-000.{suffix}", root / f"{folder}/chunk-000/file-003.{suffix}")
    before = tree(root)
    with pytest.raises(DatasetError, match="Nothing was deleted"):
        make_writer(root)
    assert tree(root) == before


def test_only_temp_files_of_the_layout_are_debris(tmp_path):
    root = tmp_path / "ds"
    writer = make_writer(root, cameras=[])
    writer.add_episode(**make_episode(3, 0, cameras=[]))
    temps = ["data/chunk-000/.file-001.a1b2c3_d.parquet", "meta/.info.zz99yy88.json", "meta/.stats.abcdefgh.json"]
    kept = ["data/chunk-000/.file-001.mine.parquet", "meta/.info.json.bak", "meta/.notes.abcdefgh.json", "notes.txt"]
    for name in temps + kept:
        (root / name).write_bytes(b"x")
    make_writer(root, cameras=[]).add_episode(**make_episode(3, 1, cameras=[]))
    assert [name for name in temps + kept if (root / name).exists()] == kept
    assert Demonstrations(root).num_episodes == 2


def test_camera_names_are_plain_names(tmp_path):
    for camera in ("../../escape", "a/b", "front\\wrist"):
        with pytest.raises(ValueError, match="camera names are plain names"):
            make_writer(tmp_path / "ds", cameras=[camera])
    assert not (tmp_path / "ds").exists()


def test_metadata_info_json_counts_more_episodes_than_the_data_files_hold(tmp_path):
    root = tmp_path / "ds"
    writer = make_writer(root, cameras=[])
    for seed in range(4):
        writer.add_episode(**make_episode(3, seed, cameras=[]))
    (root / META).unlink()
    for name in ("file-002.parquet", "file-003.parquet"):  # the last two episodes' data: lost
        (root / "data/chunk-000" / name).unlink()
    with pytest.raises(DatasetError, match=r"info\.json counts 4 episodes, the data files hold 2"):
        Demonstrations(root)


def test_a_crash_between_commit_and_info_json_is_not_loss(tmp_path, monkeypatch):
    """info.json is rewritten after each commit: one behind after a crash there, which a reopen repairs."""
    root = tmp_path / "ds"
    writer = make_writer(root)
    writer.add_episode(**make_episode(3, 0))
    monkeypatch.setattr(DemoWriter, "_write_summary", lambda self: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError):
        writer.add_episode(**make_episode(4, 1))
    monkeypatch.undo()
    assert json.loads((root / layout.INFO_PATH).read_text())["total_episodes"] == 1
    data = Demonstrations(root)
    assert data.num_episodes == 2 and not data.recovered
    make_writer(root).add_episode(**make_episode(2, 2))
    assert Demonstrations(root).episode_bounds.tolist() == [[0, 3], [3, 7], [7, 9]]


def truncate(path, keep=0.5):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


@pytest.mark.parametrize(
    "file, reading",
    [
        ("data/chunk-000/file-001.parquet", lambda data: data.column("action")),
        ("videos/observation.images.wrist/chunk-000/file-001.mp4", lambda data: data.images("wrist")),
    ],
)
def test_a_damaged_committed_file_is_named_and_never_appended_to(tmp_path, file, reading):
    root = tmp_path / "ds"
    writer = make_writer(root)
    for seed in range(3):
        writer.add_episode(**make_episode(4, seed))
    truncate(root / file)
    before = tree(root)
    with pytest.raises(DatasetError, match=f"{file}, a file of episode 1, is damaged: it .*Restore the file"):
        make_writer(root)
    assert tree(root) == before
    with pytest.raises(DatasetError, match=f"{file}, a file of episode 1, is damaged"):
        reading(Demonstrations(root))


def test_collect_refuses_to_append_to_a_truncated_data_file(tmp_path, capsys):
    out = tmp_path / "ds"
    command = ["collect", "arm-reach", "episode_seconds=0.4", "--episodes", "3", "--envs", "3", "--out", str(out)]
    assert main(command) == 0
    truncate(out / "data/chunk-000/file-002.parquet", keep=0.1)
    assert main(command) == 2
    printed = "".join(capsys.readouterr().out.split())  # rich wraps a long path anywhere, even inside a name
    assert "--out:" in printed and "file-002.parquet,afileofepisode2,isdamaged" in printed
    assert len(data_files(out)) == 3


def test_mp4_check_tells_whole_from_truncated(tmp_path):
    path = tmp_path / "v.mp4"
    layout.write_video(path, np.zeros((5, 16, 16, 3), np.uint8), 10)
    assert integrity.mp4_problem(path) is None
    truncate(path, keep=0.9)
    assert "truncated" in integrity.mp4_problem(path)
    assert "cannot be read" in integrity.mp4_problem(tmp_path / "missing.mp4")


COLLECT = [sys.executable, "-m", "policyforge.cli", "collect", "arm-reach", "episode_seconds=0.4", "--envs", "2"]


def counted(out) -> int:
    """Episodes info.json counts (0 before it exists)."""
    try:
        return json.loads((out / layout.INFO_PATH).read_text())["total_episodes"]
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_collect_killed_at_any_moment_keeps_every_committed_episode(tmp_path):
    """SIGKILL a collect at spread-out moments after it has committed an episode; each reopen keeps every
    committed episode's files, and the last run completes the dataset."""
    out = tmp_path / "ds"
    command = [*COLLECT, "--cameras", "front", "--image-size", "16", "--out", str(out), "--episodes"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    committed: list[str] = []
    for extra in (0.0, 0.1, 0.25, 0.5, 0.8):
        process = subprocess.Popen([*command, "50"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while counted(out) <= len(committed) and time.monotonic() < deadline:  # this session committed one
            time.sleep(0.02)
        time.sleep(extra)
        process.send_signal(signal.SIGKILL)
        process.wait()
        data = Demonstrations(out)
        integrity.check_committed(out, data.info, data.rows)
        names = [integrity.data_file(out, data.info, row).name for row in data.rows]
        assert len(names) > len(committed) and names[: len(committed)] == committed  # nothing committed was lost
        committed = names
    assert subprocess.run([*command, "2"], env=env, capture_output=True).returncode == 0
    data = Demonstrations(out)
    assert data.num_episodes == len(committed) + 2 and not data.recovered
    assert np.array_equal(data.column("index"), np.arange(data.num_frames))
    assert data.images("front").shape[0] == data.num_frames
