"""Evaluation videos: each tile ends on its episode's last frame (the state before the auto-reset, not the next
episode's first frame), holds it, and carries its outcome; the arm tasks' default camera shows the cube large."""

import mujoco
import numpy as np
import pytest
import torch

from policyforge.algos import evaluate as evaluate_module
from policyforge.algos.eval_video import (
    BORDER,
    OUTCOME_COLOURS,
    TILE_HEIGHT,
    TILE_WIDTH,
    EvalFilm,
    draw_caption,
    draw_label,
    tile_grid,
)
from policyforge.algos.evaluate import evaluate
from policyforge.policies.base import EnvSpec, PolicyConfig
from policyforge.sims import ImageConfig, SimConfig, make_env

STEPS = 5
BORDER_INSIDE = BORDER + 1
"""Episode length of the filmed evaluations (episode_seconds = STEPS · 0.04 s): every episode ends by time-out."""


def _filmed_evaluation(monkeypatch, tmp_path, task: str, camera: str, **sim):
    """Film an evaluation of 4 envs whose image observations are the camera's frames at the tile size; returns
    (the video's frames, each env's image observation at the end of its episode, before the reset, and after)."""
    image = ImageConfig(cameras=[camera], width=TILE_WIDTH, height=TILE_HEIGHT, quality="full")  # as videos
    options = {"episode_seconds": STEPS * 0.04}
    env = make_env(SimConfig(task=task, num_envs=4, image=image, task_options=options, **sim))
    states = {key: shape for key, shape in env.obs_shapes.items() if key != "image"}  # a state policy
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec(states, env.action_dim)).eval()
    written, ends = [], {}
    step = env.step

    def recording_step(action):
        result = step(action)
        info = result[4]
        if info["episode"]["done"].any() and not ends:
            ends["final"] = info["final_obs"]["image"][:, 0].numpy().copy()
            ends["reset"] = result[0]["image"][:, 0].numpy().copy()
        return result

    monkeypatch.setattr(env, "step", recording_step)
    monkeypatch.setattr(evaluate_module, "write_video", lambda path, frames, fps: written.append(list(frames)))
    metrics = evaluate(policy, env, seed=3, video_path=tmp_path / "eval.mp4", camera=camera)
    env.close()
    assert len(written) == 1 and set(ends) == {"final", "reset"}
    return np.asarray(written[0]), ends, metrics


def _tiles(grid: np.ndarray) -> np.ndarray:
    """The four tiles [4, H, W, 3] of a 2×2 grid."""
    h, w = TILE_HEIGHT, TILE_WIDTH
    return np.stack([grid[r * h : (r + 1) * h, c * w : (c + 1) * w] for r in range(2) for c in range(2)])


def _inside(tiles: np.ndarray) -> np.ndarray:
    """The part of tiles below the label banner and inside the border."""
    return tiles[..., TILE_HEIGHT // 4 : -8, 8:-8, :].astype(int)


def _banner_share(tiles: np.ndarray, outcome: str) -> np.ndarray:
    """Per tile, the share of the top-left corner's pixels [n] in the colour of `outcome`'s label."""
    corner = tiles[:, : TILE_HEIGHT // 15, : TILE_WIDTH // 6].astype(int)
    return (np.abs(corner - np.array(OUTCOME_COLOURS[outcome])).max(axis=-1) < 30).mean(axis=(1, 2))


def test_each_tile_ends_on_its_episodes_last_frame_with_its_outcome(monkeypatch, tmp_path):
    frames, ends, metrics = _filmed_evaluation(monkeypatch, tmp_path, "arm-lift-cube", "task")
    last = _tiles(frames[-1])
    # the pre-reset state, not the next episode's first state (where the cube and goal were drawn anew)
    assert np.abs(_inside(last) - _inside(ends["final"])).max() == 0
    assert np.abs(_inside(last) - _inside(ends["reset"])).mean() > 1.0
    assert np.array_equal(frames[-2], frames[-1]), "the finished grid is held"
    # labelled: an untrained policy fails to lift within 0.2 s, so every tile wears the failure colour
    assert metrics["eval/success"] == 0.0
    assert (_banner_share(last, "failure") > 0.5).all()
    assert (_banner_share(_tiles(frames[1]), "failure") < 0.1).all(), "no label while the episode runs"


def test_a_task_without_success_is_labelled_with_its_return_and_has_no_success_metric(monkeypatch, tmp_path):
    frames, ends, metrics = _filmed_evaluation(monkeypatch, tmp_path, "quadruped-walk", "track")
    assert "eval/success" not in metrics and "eval/return" in metrics
    last = _tiles(frames[-1])
    assert np.abs(_inside(last) - _inside(ends["final"])).max() == 0
    assert (_banner_share(last, "return") > 0.5).all()


def test_labels_tell_success_from_failure():
    frame = np.full((TILE_HEIGHT, TILE_WIDTH, 3), 128, np.uint8)
    success = draw_label(frame, "success", OUTCOME_COLOURS["success"]).astype(int)
    failure = draw_label(frame, "failure", OUTCOME_COLOURS["failure"]).astype(int)
    banner = (slice(0, TILE_HEIGHT // 15), slice(0, TILE_WIDTH // 6))
    assert np.abs(success[banner] - failure[banner]).mean() > 30
    assert np.array_equal(success[TILE_HEIGHT // 4 : -8, 8:-8], frame[TILE_HEIGHT // 4 : -8, 8:-8]), "scene kept"
    assert (np.abs(success[banner] - 255).sum(axis=-1) < 60).any(), "white text on the banner"


def test_tile_grid_is_near_square():
    frames = np.arange(5)[:, None, None, None].repeat(2, 1).repeat(3, 2).repeat(3, 3).astype(np.uint8)
    grid = tile_grid(frames)
    assert grid.shape == (4, 9, 3) and grid[2, 3, 0] == 4 and grid[3, 8, 0] == 0


def _cube_width_px(task: str, camera: str, width: int, height: int) -> list[int]:
    """Width in pixels of the cube in each of 4 envs' frames (segmentation render)."""
    env = make_env(SimConfig(task=task, num_envs=4))
    env.reset(seed=0)
    model = env.task.model
    renderer = mujoco.Renderer(model, height=height, width=width)
    renderer.enable_segmentation_rendering()
    widths = []
    try:
        for i in range(4):
            renderer.update_scene(env.batch.get_data(i), camera=camera)
            segments = renderer.render()
            cube = (segments[..., 0] == model.geom("cube").id) & (segments[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)
            columns = np.flatnonzero(cube.any(axis=0))
            widths.append(int(columns[-1] - columns[0] + 1) if len(columns) else 0)
    finally:
        renderer.close()
        env.close()
    return widths


@pytest.mark.parametrize("task", ["arm-lift-cube", "arm-push-cube"])
def test_the_default_camera_frames_the_cube(task):
    env = make_env(SimConfig(task=task, num_envs=1))
    default = env.cameras[0]
    env.close()
    widths = _cube_width_px(task, default, TILE_WIDTH, TILE_HEIGHT)
    assert min(widths) >= 15, f"the cube is {widths} px wide in a {TILE_WIDTH}×{TILE_HEIGHT} {default!r} frame"
    old = _cube_width_px(task, "front", 240, 180)  # the old default camera and tile size: ~8 px
    assert max(old) < 12


def test_videos_are_written(tmp_path):
    env = make_env(SimConfig(task="pendulum-swingup", num_envs=2, task_options={"episode_seconds": 0.5}))
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec(env.obs_shapes, env.action_dim)).eval()
    evaluate(policy, env, seed=0, video_path=tmp_path / "v.mp4")
    env.close()
    assert (tmp_path / "v.mp4").stat().st_size > 1000


def test_a_tile_whose_episode_ended_freezes_while_the_others_play_on():
    env = make_env(SimConfig(task="arm-lift-cube", num_envs=2))
    env.reset(seed=0)
    film = EvalFilm(env, None, tiles=2, seconds=10.0)
    generator = torch.Generator().manual_seed(0)
    for step in range(6):
        info = env.step(torch.rand(2, env.action_dim, generator=generator) * 2 - 1)[4]
        ended = torch.tensor([step == 1, False])  # env 0's episode is declared over at the second step
        episode = {**info["episode"], "done": ended, "success": ended, "return": torch.zeros(2)}
        film.record({**info, "episode": episode})
    first, last = (_pair(frame) for frame in (film.frames[2], film.frames[-1]))
    assert np.array_equal(first[0], last[0]), "env 0 froze on its last frame"
    assert (_banner_share(last[:1], "success") > 0.5).all()
    assert np.abs(first[1].astype(int) - last[1].astype(int)).mean() > 0.1, "env 1 plays on"
    assert not film.done and len(film.frames) == 7
    env.close()


def _pair(grid: np.ndarray) -> np.ndarray:
    """The two tiles [2, H, W, 3] of a 1×2 grid."""
    return np.stack([grid[:, :TILE_WIDTH], grid[:, TILE_WIDTH:]])


def test_an_instructed_tasks_tiles_carry_their_episodes_instruction(monkeypatch, tmp_path):
    frames, ends, _ = _filmed_evaluation(monkeypatch, tmp_path, "arm-instructed", "task")
    band = _tiles(frames[-1])[:, -16:-BORDER_INSIDE, BORDER_INSIDE:-BORDER_INSIDE].astype(int)  # one line's
    assert ((band < 40).all(axis=-1).mean(axis=(1, 2)) > 0.5).all(), "a dark band at the bottom of every tile"
    assert ((band > 200).all(axis=-1).any(axis=(1, 2))).all(), "white text on it"
    above = slice(None, -50)  # two lines of caption at most
    inside = _inside(_tiles(frames[-1]))[:, above]
    assert np.abs(inside - _inside(ends["final"])[:, above]).max() == 0, "the scene above it untouched"


def test_captions_wrap_to_the_tile():
    frame = np.full((TILE_HEIGHT, TILE_WIDTH, 3), 128, np.uint8)
    short = draw_caption(frame, "lift the red cube")
    long = draw_caption(frame, "pick up the red block and set it down on the yellow pad, then do it once more")
    rows_of = lambda image: int((np.abs(image.astype(int) - 128).sum(axis=(1, 2)) > 0).sum())  # noqa: E731
    assert rows_of(long) > 1.5 * rows_of(short), "a long instruction wraps onto a second line"
    assert not np.array_equal(short, draw_caption(frame, "lift the blue cube"))
    assert np.array_equal(short[: TILE_HEIGHT // 2], frame[: TILE_HEIGHT // 2])
