"""A teacher that reads images, fed by an env that renders them on request (`sim.image.render: on_request`): the
same labels as with every step rendered, from frames of the envs it plans for only."""

import pytest
import torch

from policyforge.algos.teacher import TeacherLabels
from policyforge.config import ConfigError, from_dict
from policyforge.policies.base import EnvSpec
from policyforge.policies.flow import FlowConfig
from policyforge.policies.gaussian import GaussianConfig
from policyforge.sims import ImageConfig, SimConfig, make_env

ENVS = 4
ENCODER = {"image_channels": 8, "image_features": 8, "random_shift": 0}


def image_env(render: str):
    image = ImageConfig(cameras=["front"], width=24, height=24, render=render)
    return make_env(SimConfig(task="arm-reach", num_envs=ENVS, image=image, task_options={"episode_seconds": 0.2}))


def image_teacher(env, n_obs_steps: int = 1):
    torch.manual_seed(0)
    chunk = {"n_obs_steps": n_obs_steps, "horizon": 4, "act_steps": 3}
    config = from_dict(FlowConfig, {"chunk": chunk, "encoder": ENCODER, "steps": 2})
    return config.build(EnvSpec(env.obs_shapes, env.action_dim)).eval()


def labels_over_a_rollout(env, teacher, steps: int = 12) -> tuple[torch.Tensor, int]:
    student = GaussianConfig(hidden=[8]).build(EnvSpec(env.obs_shapes, env.action_dim))
    labels, generator = TeacherLabels(teacher, student, env), torch.Generator().manual_seed(1)
    obs, decided = env.reset(seed=0), []
    for _ in range(steps):  # episodes of 10 steps: every env restarts once, and replans then
        decided.append(labels.decide(obs))
        obs, _, terminated, truncated, _ = env.step(torch.rand(ENVS, env.action_dim, generator=generator) * 2 - 1)
        labels.stepped(terminated | truncated, None)
    env.close()
    return torch.stack(decided), labels.rendered


def test_labels_from_frames_rendered_on_request_equal_every_step_renderings():
    every = image_env("every_step")
    teacher = image_teacher(every)
    expected, rendered_every = labels_over_a_rollout(every, teacher)
    labels, rendered = labels_over_a_rollout(image_env("on_request"), teacher)
    assert rendered_every == 0  # the frames came with the observations
    torch.testing.assert_close(labels, expected, rtol=0, atol=0)
    # plans at steps 0, 3, 6, 9 and at the restart (step 10): 5 of the 12 steps' frames, every env
    assert rendered == 5 * ENVS


def test_a_teacher_reading_several_frames_wants_every_step_rendered():
    env = image_env("on_request")
    teacher = image_teacher(env, n_obs_steps=2)
    with pytest.raises(ConfigError, match=r"sim.image.render.*last 2 frames.*every_step"):
        labels_over_a_rollout(env, teacher, steps=1)


def test_the_distill_recipe_renders_the_teachers_cameras_on_request(tmp_path):
    from pathlib import Path

    from policyforge import config as config_io
    from policyforge.algos.distill_command import distill_config
    from policyforge.algos.run_config import CONFIG_FILE, RunConfig

    image = {"cameras": ["task", "wrist"], "width": 32, "height": 32}
    sim = {"task": "arm-instructed", "image": image, "task_options": {"instructions": "train"}}
    vla = {"class": "vla", "chunk": {"n_obs_steps": 1, "horizon": 8, "act_steps": 4}}
    teacher = from_dict(RunConfig, {"name": "vla", "sim": sim, "policy": vla, "algo": {"class": "bc", "dataset": "d"}})
    (tmp_path / "vla").mkdir()
    config_io.save(teacher, tmp_path / "vla" / CONFIG_FILE)
    student = distill_config(tmp_path / "vla", "touch", None, Path("configs/vla-distill.yaml"), [])
    assert student.sim.image.render == "on_request" and teacher.sim.image.render == "every_step"
    assert (student.sim.image.cameras, student.sim.image.width) == (["task", "wrist"], 32)  # the teacher's cameras
    assert student.sim.task_options["families"] == ["touch"] and student.sim.num_envs == 32
    assert student.name == "vla-touch-dagger"
    wrist = distill_config(tmp_path / "vla", "touch", None, Path("configs/vla-distill-wrist.yaml"), [])
    assert wrist.name == "vla-touch-dagger-wrist" and wrist.sim.image.render == "every_step"
    assert wrist.policy.encoder.views == [1] and wrist.sim.image.cameras == ["task", "wrist"]


def test_a_student_sees_only_the_views_it_names():
    """`encoder.views: [1]`: the wrist camera of a [front, wrist] pair; the other view does not change its actions."""
    image = ImageConfig(cameras=["front", "wrist"], width=24, height=24)
    env = make_env(SimConfig(task="arm-reach", num_envs=2, image=image))
    spec = EnvSpec(env.obs_shapes, env.action_dim)
    chunk = {"n_obs_steps": 1, "horizon": 4, "act_steps": 2}
    torch.manual_seed(0)
    student = from_dict(FlowConfig, {"chunk": chunk, "encoder": {**ENCODER, "views": [1]}, "steps": 2}).build(spec)
    obs = env.reset(seed=0)
    inputs = {"policy": obs["policy"][:, None], "image": obs["image"][:, None]}
    changed = {**inputs, "image": inputs["image"].clone()}
    changed["image"][:, :, 0] = 255 - changed["image"][:, :, 0]  # another front view
    torch.testing.assert_close(student.act(changed), student.act(inputs), rtol=0, atol=0)
    changed["image"][:, :, 1] = 255 - changed["image"][:, :, 1]  # another wrist view
    assert not torch.allclose(student.act(changed), student.act(inputs))
    with pytest.raises(ConfigError, match=r"encoder.views: the env has 2 cameras, got views \[2\]"):
        from_dict(FlowConfig, {"chunk": chunk, "encoder": {**ENCODER, "views": [2]}}).build(spec)
    env.close()
