"""`policyforge play RUN` (policyforge/play.py; here beside the tiny-run fixtures): headless, a video of the
episodes one after another (each ending on its last frame, held), with each episode's outcome printed; the viewer
only where a display exists."""

import re

import pytest

from policyforge.algos import eval_video
from policyforge.cli import main
from policyforge.data.layout import read_video
from policyforge.play import display_available


@pytest.mark.parametrize(
    ("environ", "available"),
    [
        ({}, False),
        ({"DISPLAY": ""}, False),
        ({"DISPLAY": ":0"}, True),
        ({"WAYLAND_DISPLAY": "wayland-0"}, True),
        ({"WAYLAND_DISPLAY": "", "DISPLAY": ""}, False),
    ],
)
def test_display_detection(environ, available):
    assert display_available(environ) is available


def test_play_headless_writes_a_video_of_every_episode_and_prints_outcomes(run_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert main(["play", str(run_copy), "--episodes", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no display" in out
    lengths = [int(n) for n in re.findall(r"episode \d: (?:success|failure), return -?[\d.e+-]+, (\d+) steps", out)]
    assert len(lengths) == 2, out
    video = run_copy / "videos" / "play.mp4"
    frames = read_video(video)
    # pendulum-swingup: 20 Hz control, a frame every step (25 fps wanted): the first frame, one per step, and the
    # last frame held 1 s, per episode
    fps = 20
    assert frames.shape == (sum(1 + n + eval_video.HOLD_SECONDS * fps for n in lengths), 240, 320, 3)
    assert f"video: {video} ({len(frames)} frames, 320x240, {fps} fps)" in out
    assert re.search(r"2 episodes: success 0%, mean return -?[\d.]+", out)
    assert main(["play", str(run_copy), "--episodes", "1", "--out", str(tmp_path / "one.mp4")]) == 0
    assert len(read_video(tmp_path / "one.mp4")) == 1 + lengths[0] + eval_video.HOLD_SECONDS * fps


def test_play_names_bad_arguments(finished_run, capsys):
    assert main(["play", str(finished_run), "--episodes", "0"]) == 2
    assert "--episodes: must be in [1, 1000], got 0" in capsys.readouterr().out
    assert main(["play", str(finished_run), "--checkpoint", "99"]) == 2
    assert "has no checkpoint at 99 steps (step_0000000099.pt); it keeps" in " ".join(capsys.readouterr().out.split())


def test_a_display_without_a_server_falls_back_to_a_video(run_copy, capsys, monkeypatch):
    monkeypatch.setenv("DISPLAY", ":987")  # set, but no X server answers there
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert main(["play", str(run_copy), "--episodes", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the MuJoCo viewer cannot open a window (" in out and "rendering a video instead" in out
    assert re.search(r"1 episode: success 0%, mean return", out)
    assert len(read_video(run_copy / "videos" / "play.mp4")) > 200
