"""Offscreen frames: the right shape, not blank, and changing when the robot moves."""

import mujoco
import numpy as np
import pytest
import torch

from policyforge.sims import TASKS, ImageConfig, SimConfig, make_env, render


@pytest.mark.parametrize("task", list(TASKS))
def test_frames_show_the_scene_and_follow_the_robot(task):
    env = make_env(SimConfig(task=task, num_envs=2))
    before = env.render(width=96, height=72)
    assert before.shape == (2, 72, 96, 3) and before.dtype == np.uint8
    assert before.std() > 10, "a blank frame"
    generator = torch.Generator().manual_seed(0)
    for _ in range(15):
        env.step(torch.rand(2, env.action_dim, generator=generator) * 2 - 1)
    after = env.render(width=96, height=72)
    assert np.abs(after.astype(int) - before.astype(int)).mean() > 0.5, "frames do not follow the simulation"
    env.close()


def test_each_camera_sees_something_different():
    env = make_env(SimConfig(task="arm-lift-cube", num_envs=1))
    assert {"front", "wrist"} <= set(env.cameras)
    front, wrist = env.render("front", width=64, height=64), env.render("wrist", width=64, height=64)
    assert np.abs(front.astype(int) - wrist.astype(int)).mean() > 5
    with pytest.raises(ValueError, match="unknown camera 'top'"):
        env.render("top")


def test_image_observations():
    image = ImageConfig(cameras=["front", "wrist"], width=32, height=24)
    env = make_env(SimConfig(task="arm-reach", num_envs=3, image=image, task_options={"episode_seconds": 0.12}))
    obs = env.reset(seed=0)
    assert obs["image"].shape == (3, 2, 24, 32, 3) and obs["image"].dtype == torch.uint8
    for _ in range(3):  # the third step ends the episodes: final images differ from the new episodes' images
        obs, _, _, truncated, info = env.step(torch.ones(3, env.action_dim))
    assert truncated.all()
    assert info["final_obs"]["image"].shape == obs["image"].shape
    assert not torch.equal(info["final_obs"]["image"], obs["image"])


def test_images_rendered_on_request_are_the_observations_every_step_rendering_gives():
    """`render: on_request` leaves `image` out of obs; `env.images(ids)` renders those envs' current state, the same
    frames an every-step env gives in its obs, auto-resets included (a subset drawn in other tiles of the fast
    renderer's buffer differs by at most one level in a few pixels)."""
    envs = {}
    for mode in ("every_step", "on_request"):
        image = ImageConfig(cameras=["front", "wrist"], width=32, height=24, render=mode)
        options = {"episode_seconds": 0.12}
        envs[mode] = make_env(SimConfig(task="arm-reach", num_envs=3, image=image, task_options=options))
    every, lazy = envs["every_step"], envs["on_request"]
    assert lazy.obs_shapes["image"] == every.obs_shapes["image"] == (2, 24, 32, 3)
    obs, lazy_obs = every.reset(seed=3), lazy.reset(seed=3)
    assert "image" not in lazy_obs
    assert torch.equal(lazy.images([0, 1, 2]), obs["image"])
    generator = torch.Generator().manual_seed(0)
    for _ in range(4):  # the third step resets every env
        action = torch.rand(3, every.action_dim, generator=generator) * 2 - 1
        obs, lazy_obs = every.step(action)[0], lazy.step(action)[0]
        assert "image" not in lazy_obs
        assert torch.equal(lazy.images([0, 1, 2]), obs["image"])
        subset = (lazy.images([2, 0]).int() - obs["image"][[2, 0]].int()).abs()
        assert subset.max() <= 1 and subset.float().mean() < 0.01  # another tile of the buffer: ±1 level in places
    with pytest.raises(ValueError, match=r"env ids \[3\] are out of range"):
        lazy.images([3])
    with pytest.raises(ValueError, match=r"render.*give every_step or on_request"):
        ImageConfig(cameras=["front"], render="sometimes")
    without = make_env(SimConfig(task="arm-reach", num_envs=1))
    with pytest.raises(RuntimeError, match="renders no image observations"):
        without.images([0])
    for env in (every, lazy, without):
        env.close()


def test_final_frames_show_the_state_before_the_auto_reset():
    image = ImageConfig(cameras=["front"], width=32, height=24, quality="full")  # drawn as env.render draws
    env = make_env(SimConfig(task="arm-reach", num_envs=3, image=image, task_options={"episode_seconds": 0.12}))
    env.reset(seed=0)

    def frames(final: bool) -> np.ndarray:
        return env.render("front", width=32, height=24, final=final)

    for _ in range(2):
        env.step(torch.ones(3, env.action_dim))
    assert np.array_equal(frames(final=True), frames(final=False)), "no episode ended: the same frames"
    obs, _, _, truncated, info = env.step(torch.ones(3, env.action_dim))  # the time limit: every env resets
    assert truncated.all()
    assert np.array_equal(frames(final=True), info["final_obs"]["image"][:, 0].numpy())
    assert np.array_equal(frames(final=False), obs["image"][:, 0].numpy())
    assert not np.array_equal(frames(final=True), frames(final=False))
    env.close()


def _frame_by_frame(model, states, cameras, width, height):
    """The reference for fast observations: mujoco.Renderer, one frame per call, shadows and multisampling off."""
    renderer = render.fast_frame_renderer(model, width, height)
    frames = []
    for data in states:
        for camera in cameras:
            renderer.update_scene(data, camera=camera)
            frames.append(renderer.render())
    renderer.close()
    return np.stack(frames).reshape(len(states), len(cameras), height, width, 3)


@pytest.mark.parametrize("size", [(32, 24), (400, 300)])  # 400 px: 4 tiles a buffer, so 6 frames take 2 passes
def test_fast_observations_are_the_frames_mujoco_draws_one_by_one(size):
    width, height = size
    image = ImageConfig(cameras=["front", "wrist"], width=width, height=height)
    env = make_env(SimConfig(task="arm-lift-cube", num_envs=3, image=image))
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):  # each env somewhere else
        obs = env.step(torch.rand(3, env.action_dim, generator=generator) * 2 - 1)[0]
    model = env.task.model
    states = [env.batch.get_data(i, mujoco.MjData(model)) for i in range(3)]
    expected = _frame_by_frame(model, states, ["front", "wrist"], width, height)
    tiled = obs["image"].numpy()
    assert tiled.shape == expected.shape
    assert np.abs(tiled.astype(int) - expected).max() <= 2, "a tile is not its env's frame"
    assert np.abs(tiled[0].astype(int) - tiled[1]).mean() > 1, "the envs differ"
    assert render.TiledRenderer(model, width, height).render(iter([]), ["front"]).shape == (0, 1, height, width, 3)
    env.close()


def test_fast_and_full_quality_draw_the_same_scene():
    frames = {}
    for quality in ("fast", "full"):
        image = ImageConfig(cameras=["front"], width=64, height=64, quality=quality)
        frames[quality] = make_env(SimConfig(task="arm-lift-cube", num_envs=1, image=image)).reset(seed=0)["image"]
    difference = (frames["fast"].float() - frames["full"].float()).abs().mean()
    assert 0 < difference < 40, "the same scene, lit differently (no shadows)"


def test_gym_says_it_cannot_render_pre_reset_frames_and_evaluation_films_it_anyway(tmp_path):
    from policyforge.algos.evaluate import evaluate
    from policyforge.policies.base import EnvSpec, PolicyConfig

    env = make_env(SimConfig(task="gym:InvertedPendulum-v5", num_envs=2))
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(1000):
        done = env.step(torch.rand(2, env.action_dim, generator=generator) * 2 - 1)[4]["episode"]["done"]
        if done.any():
            break
    assert done.any()
    with pytest.raises(NotImplementedError, match="pre-reset"):
        env.render(final=True)
    if not done.all():
        assert env.render(env_ids=np.flatnonzero(~done.numpy()), final=True).shape[0] == 1
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec(env.obs_shapes, env.action_dim)).eval()
    evaluate(policy, env, seed=0, video_path=tmp_path / "gym.mp4", video_seconds=1.0)
    assert (tmp_path / "gym.mp4").stat().st_size > 1000
    env.close()
