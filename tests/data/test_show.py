"""`policyforge data show DATASET`: the summary, features, per-episode outcomes of a dataset `collect` wrote, and a
video of one episode from its camera images (or a clear refusal for a dataset without images)."""

import re

import numpy as np
import pytest

from policyforge.algos.eval_video import HOLD_SECONDS
from policyforge.cli import main
from policyforge.data.collect import collect
from policyforge.data.dataset import Demonstrations
from policyforge.data.layout import read_video

SHORT = {"episode_seconds": 0.48}  # 12 control steps: some noisy episodes reach the marker, some do not


@pytest.fixture(scope="module")
def filmed(tmp_path_factory):
    """6 arm-reach episodes with a 48x32 front camera, mixed outcomes; (dataset, collect's summary)."""
    out = tmp_path_factory.mktemp("show") / "reach"
    options = {"num_envs": 6, "action_noise": 0.3, "cameras": ["front"], "image_size": (32, 48)}
    return out, collect("arm-reach", 6, out, task_options=SHORT, progress=False, **options)


def rows(text: str) -> list[list[str]]:
    """The cells of the rows of rich tables in `text`."""
    return [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def test_summary_features_and_episodes(filmed, capsys):
    out, collected = filmed
    assert 0 < collected["success_rate"] < 1, "mixed outcomes"
    assert main(["data", "show", str(out)]) == 0
    table = {row[0]: row[1:] for row in rows(capsys.readouterr().out)}
    assert table["episodes"] == ["6"] and table["frames"] == ["72 (2.9 s at 25 fps)"]
    assert table["success"] == [f"{collected['success_rate']:.0%}"]
    assert table["cameras"] == ["front (48x32)"] and table["task"] == ["arm-reach"]
    assert table["observation.state"] == ["float32", "28"] and table["action"] == ["float32", "5"]
    assert table["observation.images.front"] == ["video", "32×48×3"]
    data = Demonstrations(out)
    rewards, successes = data.column("next.reward"), data.column("next.success")
    for episode, (start, stop) in enumerate(data.episode_bounds):
        shown = table[str(episode)]
        assert shown[:2] == [str(stop - start), f"{(stop - start) / 25:.1f}"]
        assert float(shown[2]) == pytest.approx(rewards[start:stop].sum(), rel=1e-3)
        assert shown[3] == ("yes" if successes[stop - 1] else "no")


def test_video_of_one_episode_shows_its_camera_images(filmed, tmp_path, capsys):
    out, _ = filmed
    video = tmp_path / "episode2.mp4"
    assert main(["data", "show", str(out), "--episode", "2", "--video", str(video)]) == 0
    printed = capsys.readouterr().out
    assert [row[0] for row in rows(printed) if row[0].isdigit()] == ["2"], "only episode 2's row"
    frames = read_video(video)
    hold = round(HOLD_SECONDS * 25)
    assert frames.shape == (12 + hold, 32, 48, 3)
    assert f"video: {video} (episode 2, {12 + hold} frames, 48x32, 25 fps)" in " ".join(printed.split())
    data = Demonstrations(out)
    error = [np.abs(frames[:11].astype(int) - data.images("front", [e])[:11]).mean() for e in range(6)]
    assert np.argmin(error) == 2 and error[2] < 4, "the episode's images (through a lossy codec)"


def test_a_dataset_without_images_says_how_to_record_them(tmp_path, capsys):
    collect("arm-reach", 2, tmp_path / "plain", num_envs=2, task_options=SHORT, progress=False)
    assert main(["data", "show", str(tmp_path / "plain"), "--video", str(tmp_path / "v.mp4")]) == 2
    message = " ".join(capsys.readouterr().out.split())
    assert "--video: " in message and "has no camera images" in message
    assert re.search(r"policyforge collect TASK --episodes N --cameras front --image-size \d+", message)
    assert not (tmp_path / "v.mp4").exists()
    assert main(["data", "show", str(tmp_path / "plain"), "--episode", "2"]) == 2
    assert "--episode: " in capsys.readouterr().out


def test_a_multi_task_dataset_shows_its_instruction_count_and_the_first_few(tmp_path, capsys):
    options = {"episode_seconds": 0.12, "instructions": "all"}  # 3 steps; 12 episodes draw many instructions
    collect("arm-instructed", 12, tmp_path / "ds", num_envs=12, task_options=options, progress=False)
    tasks = Demonstrations(tmp_path / "ds").tasks
    assert main(["data", "show", str(tmp_path / "ds")]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert len(tasks) > 4 and f"{len(tasks)} distinct: {tasks[0]}" in out and tasks[-1] not in out
