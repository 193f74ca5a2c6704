"""Typed configs: YAML + overrides, and errors that name the field path and what is allowed — on the run config
that `policyforge train` loads (`algos/runner.py`)."""

import dataclasses

import pytest

from policyforge.algos.ppo_config import PPOConfig
from policyforge.algos.runner import RunConfig, RunnerConfig
from policyforge.config import ConfigError, from_dict, load, to_dict
from policyforge.config_docs import field_docs
from policyforge.sims import SimConfig

RECIPE = """\
sim:
  task: arm-reach
  num_envs: 8
  randomization:
    friction: [0.5, 1.5]
algo:
  gamma: 0.95
  rollout_steps: 16
runner:
  eval_envs: 4
seed: 3
"""


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RECIPE)
    overrides = ["sim.num_envs=32", "sim.task_options.control_mode=joint_delta", "runner.total_env_steps=4096"]
    cfg = load(RunConfig, path, overrides)
    assert cfg.sim.task == "arm-reach" and cfg.sim.num_envs == 32 and cfg.seed == 3
    assert cfg.sim.randomization.friction == (0.5, 1.5)
    assert cfg.sim.task_options == {"control_mode": "joint_delta"}
    assert (
        cfg.algo.gamma == 0.95 and cfg.algo.rollout_steps == 16 and cfg.algo.gae_lambda == PPOConfig().gae_lambda
    )  # the rest: defaults; no `class:`: PPO
    assert cfg.runner.eval_envs == 4 and cfg.runner.total_env_steps == 4096
    assert cfg.runner.checkpoint_every == RunnerConfig().checkpoint_every
    assert from_dict(RunConfig, to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    "override,message",
    [
        ("sim.num_env=4", r"sim.num_env: unknown key \(did you mean 'num_envs'\?\); allowed: task, backend"),
        ("sim.num_envs=many", r"sim.num_envs: expected an integer, got 'many'"),
        ("sim.num_envs=0", r"sim.num_envs: must be in \[1, 65536\], got 0"),
        ("sim.backend=bullet", r"sim.backend: got 'bullet'; allowed: 'mujoco'"),
        ("sim.randomization.friction=[1.5, 0.5]", r"sim.randomization.friction: must be \[low, high\]"),
        ("sim.randomization.friction=[1.0]", r"sim.randomization.friction: expected 2 values, got 1"),
        ("seed", r"seed: an override must look like key=value"),
    ],
)
def test_bad_values_fail_with_the_field_path(override, message):
    with pytest.raises(ConfigError, match=message):
        load(RunConfig, None, [override])


def test_every_field_of_the_run_config_is_documented():
    """Every section the default run config holds, however deep (walked on the instance, as `config show` does)."""
    sections, seen = [RunConfig()], []
    while sections:
        config = sections.pop()
        seen.append(type(config))
        docs = {}
        for cls in reversed(type(config).__mro__[:-1]):
            docs.update(field_docs(cls) if dataclasses.is_dataclass(cls) else {})
        assert set(docs) == {f.name for f in dataclasses.fields(config)}, type(config)
        sections += [v for f in dataclasses.fields(config) if dataclasses.is_dataclass(v := getattr(config, f.name))]
    assert {RunConfig, SimConfig, PPOConfig, RunnerConfig} <= set(seen)


def test_every_task_option_is_documented():
    from policyforge.sims import TASKS

    for task in TASKS.values():
        docs = {}
        for cls in reversed(task.config_class.__mro__[:-1]):
            docs.update(field_docs(cls))
        assert set(docs) == {f.name for f in dataclasses.fields(task.config_class)}, task.name


def test_exponent_floats_without_a_dot_are_numbers():
    cfg = load(RunConfig, None, ["sim.randomization.friction=[5e-1, 1e0]"])
    assert cfg.sim.randomization.friction == (0.5, 1.0)


# -- issue 18: every numeric field range-checked, malformed YAML, flags --------------------------------------


@pytest.mark.parametrize(
    "override,message",
    [
        ("algo={class: sac, gamma: -1}", r"^algo.gamma: must be in \(0, 1\], got -1$"),
        ("algo.max_grad_norm=-1", r"^algo.max_grad_norm: must be > 0, got -1 \(a clip ≤ 0 zeroes or reverses"),
        ("algo.value_coef=-1", r"^algo.value_coef: must be in \[0, 1000\], got -1$"),
        ("algo.gamma=.nan", r"^algo.gamma: must be a finite number \(within float32's ±3.4e38\), got nan$"),
        ("algo={class: sac, actor_lr: nan}", r"^algo.actor_lr: must be a finite number .*, got 'nan'$"),
        ("algo.critic_lr=1e400", r"^algo.critic_lr: must be a finite number .*, got '1e400'$"),
        ("algo={class: sac, init_alpha: 1e999999}", r"^algo.init_alpha: must be a finite number"),
        (
            "algo.clip_ratio=1.0e+300",
            r"^algo.clip_ratio: must be a finite number \(within float32's ±3.4e38\), got 1e\+300$",
        ),
        (
            "algo={class: sac, batch_size: 2000000}",
            r"^algo.batch_size: must be in \[1, buffer_size=1000000\], got 2000000$",
        ),
        ("sim.randomization.friction=[0.5, .inf]", r"^sim.randomization.friction: must be a finite number .*, got inf"),
        ("sim.randomization.mass_scale=[0.5, 1e6]", r"^sim.randomization.mass_scale: both ends must be in \[0.1, 10\]"),
        ("sim.randomization.com_offset=3", r"^sim.randomization.com_offset: must be in \[0, 0.2\] m, got 3 m$"),
        (
            "sim.task_options.max_speed=-1",
            r"^sim.task_options.max_speed: must be in \[0.1, 100\] rad/s, got -1 rad/s \(observations",
        ),
        ("seed=-1", r"^seed: must be in \[0, 4293967292\]; seeds up to seed \+ 1,000,003 are used, got -1$"),
        ("seed=4294967295", r"^seed: must be in \[0, 4293967292\]"),
        ("algo.minibatches=5000", r"^algo.minibatches: must be in \[1, sim.num_envs × algo.rollout_steps=2048\]"),
        (
            "algo={class: bc, steps_per_iteration: 30000}",
            r"^algo.steps_per_iteration: must be in \[1, gradient_steps=20000\]",
        ),
        ("policy={class: diffusion, denoiser: {groups: 0}}", r"^policy.denoiser.groups: must be ≥ 1, got 0$"),
        (
            "policy={class: flow, encoder: {image_channels: 12}}",
            r"^policy.encoder.image_channels: must be a multiple of 8, got 12$",
        ),
        (
            "algo={class: sac, critic_obs_key: critc}",
            r"^algo.critic_obs_key: must be 'critic' \(privileged\) or 'policy', got 'critc'$",
        ),
        ("sim.device=gpu", r"^sim.device: not a torch device: 'gpu'; e.g. cpu, cuda, cuda:1$"),
    ],
)
def test_numeric_fields_are_range_checked_with_the_field_path(override, message):
    with pytest.raises(ConfigError, match=message):
        load(RunConfig, None, [override])


def test_malformed_yaml_names_the_file_and_line(tmp_path, capsys):
    from policyforge.cli import main

    recipe = tmp_path / "broken.yaml"
    recipe.write_text("sim:\n  num_envs: [1, 2\nalgo: {}\n")
    with pytest.raises(
        ConfigError, match=rf"^{recipe}: is not valid YAML: expected ',' or '\]'.* at line 3, column 5$"
    ):
        load(RunConfig, recipe)
    assert main(["train", str(recipe)]) == 2
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert f"{recipe}: is not valid YAML" in printed and "at line 3, column 5" in printed


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty; a config file holds a mapping"),
        (b"# only a comment\n", "is empty; a config file holds a mapping"),
        (b"name: caf\xe9\n", r"is not UTF-8 text \(byte 0xe9 at offset 9\); save it as UTF-8"),
        (b"- 1\n- 2\n", "the file must hold a mapping of config sections"),
    ],
)
def test_empty_non_utf8_and_non_mapping_files_are_refused(tmp_path, content, message):
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as err:
        load(RunConfig, path)
    assert err.value.path == str(path)


def test_malformed_override_value_names_the_override():
    with pytest.raises(ConfigError, match=r"^sim.task_options: the value '\[1,2' is not valid YAML \(expected"):
        load(RunConfig, None, ["sim.task_options=[1,2"])


def test_task_options_are_checked_at_load():
    with pytest.raises(ConfigError, match=r"^sim.task_options.episode_seconds: must be in \[control_dt=0.05, 3600\]"):
        load(RunConfig, None, ["sim.task_options.episode_seconds=1e9"])
    with pytest.raises(ConfigError, match=r"^sim.task_options.max_tilt: must be in \(0, π\] rad"):
        load(RunConfig, None, ["sim.task=quadruped-walk", "sim.task_options.max_tilt=7"])


def test_eval_refuses_a_non_positive_env_count(tmp_path, capsys):
    from rich.console import Console

    from policyforge.algos.runner import Runner
    from policyforge.cli import main

    settings = {"name": "tiny", "out_dir": str(tmp_path), "sim": {"num_envs": 2}, "policy": {"hidden": [8]}}
    settings.update({"algo": {"rollout_steps": 4, "critic_hidden": [8], "minibatches": 2}})
    settings["runner"] = {"total_env_steps": 8, "eval_envs": 2, "video": "none", "tensorboard": False}
    runner = Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    runner.train()
    runner.close()
    for envs in ("0", "-3"):
        assert main(["eval", str(tmp_path / "tiny"), "--envs", envs]) == 2
        assert (
            f"--envs: must be in [1, 65536] (evaluation episodes, one per env), got {envs}" in capsys.readouterr().out
        )


def test_an_unknown_video_camera_is_refused_before_training(tmp_path):
    from rich.console import Console

    from policyforge.algos.runner import Runner

    settings = {"name": "tiny", "out_dir": str(tmp_path), "sim": {"num_envs": 2}, "policy": {"hidden": [8]}}
    settings["runner"] = {"total_env_steps": 8, "video_camera": "no-such-camera", "tensorboard": False}
    with pytest.raises(ConfigError, match=r"^runner.video_camera: unknown camera 'no-such-camera'; pendulum-swingup"):
        Runner.start(from_dict(RunConfig, settings), Console(quiet=True))
    assert not list((tmp_path / "tiny").glob("checkpoints/*.pt"))


def test_cameras_for_a_policy_that_reads_states_only_are_refused_unless_a_teacher_reads_them():
    sim = {"task": "arm-instructed", "image": {"cameras": ["task"], "width": 16, "height": 16}}
    with pytest.raises(ConfigError, match=r"sim.image.cameras: the gaussian policy reads states only"):
        from_dict(RunConfig, {"sim": sim, "policy": {"class": "gaussian"}})
    config = {"sim": sim, "policy": {"class": "gaussian", "obs_key": "critic"}}
    distill = from_dict(RunConfig, {**config, "algo": {"class": "distill", "teacher": "runs/vla-ppo"}})
    assert distill.algo.reads_images and not distill.policy.reads_images


def test_images_rendered_on_request_are_refused_for_a_policy_that_reads_them_every_step():
    sim = {"task": "arm-reach", "image": {"cameras": ["front"], "width": 16, "height": 16, "render": "on_request"}}
    with pytest.raises(ConfigError, match=r"sim.image.render: the flow policy reads the images every step"):
        from_dict(RunConfig, {"sim": sim, "policy": {"class": "flow"}, "algo": {"class": "bc", "dataset": "d"}})
    student = {"class": "gaussian", "obs_key": "critic"}
    distill = from_dict(RunConfig, {"sim": sim, "policy": student, "algo": {"class": "distill", "teacher": "t"}})
    assert distill.sim.image.render == "on_request"
