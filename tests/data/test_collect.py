"""Recording expert demonstrations: what each frame holds, exact episode counts, only-successful, appending."""

import json

import numpy as np
import pytest
import torch
from rich.console import Console

from policyforge.algos.runner import RunConfig, Runner, load_run
from policyforge.config import ConfigError, from_dict
from policyforge.data.collect import collect
from policyforge.data.dataset import Demonstrations
from policyforge.sims import SimConfig, make_env

SHORT = {"episode_seconds": 0.4}  # 10 control steps


def test_frames_hold_the_observation_before_the_action_and_what_followed(tmp_path):
    summary = collect("arm-reach", 5, tmp_path / "ds", num_envs=4, task_options=SHORT, progress=False)
    assert summary["episodes"] == 5 and summary["frames"] == 50 and summary["dataset_episodes"] == 5
    data = Demonstrations(tmp_path / "ds")
    assert data.episode_bounds.tolist() == [[10 * e, 10 * e + 10] for e in range(5)]
    states, actions = data.column("observation.state"), data.column("action")
    rewards, successes = data.column("next.reward"), data.column("next.success")
    assert np.array_equal(np.flatnonzero(data.column("next.done")), [9, 19, 29, 39, 49])
    assert data.tasks == ["move the gripper to the green marker"]
    # replay: envs 0-3 ran episodes 0-3, then env 0 ran episode 4 after its auto-reset
    env = make_env(SimConfig(task="arm-reach", num_envs=4, task_options=SHORT))
    obs = env.reset(seed=summary["seed"])
    for step in range(20):
        episodes = [0, 1, 2, 3] if step < 10 else [4, None, None, None]
        rows = [10 * e + step % 10 if e is not None else None for e in episodes]
        action = np.stack([actions[r] if r is not None else np.zeros(5, np.float32) for r in rows])
        for env_id, row in enumerate(rows):
            if row is not None:
                assert np.array_equal(obs["policy"][env_id].numpy(), states[row]), (step, env_id)
        obs, reward, _, _, info = env.step(action)
        for env_id, row in enumerate(rows):
            if row is not None:
                assert reward[env_id].item() == rewards[row] and info["success"][env_id].item() == successes[row]


def test_only_successful_episodes_and_appending_with_fresh_seeds(tmp_path):
    options = {"num_envs": 8, "action_noise": 0.5, "only_successful": True, "task_options": SHORT, "progress": False}
    first = collect("arm-reach", 2, tmp_path / "ds", **options)
    assert first["episodes"] == 2 and first["success_rate"] == 1.0 and first["attempted"] > 2
    second = collect("arm-reach", 2, tmp_path / "ds", seed=0, **options)
    assert second["seed"] == 2 and second["dataset_episodes"] == 4
    data = Demonstrations(tmp_path / "ds")
    last_frames = data.episode_bounds[:, 1] - 1
    assert data.column("next.success")[last_frames].all()
    starts = data.column("observation.state")[data.episode_bounds[:, 0]]
    assert len(np.unique(starts.round(6), axis=0)) == 4  # the appended session did not replay the first
    assert [s["seed"] for s in data.info["policyforge"]["sessions"]] == [0, 2]
    with pytest.raises(ConfigError, match=r"^out: .*policyforge\.expert"):
        collect("arm-reach", 1, tmp_path / "ds", **(options | {"action_noise": 0.0}))
    with pytest.raises(ConfigError, match=r"^out: .*policyforge\.expert"):
        collect("arm-reach", 1, tmp_path / "ds", **(options | {"noise_correlation": 0.9}))
    collect("arm-reach", 1, tmp_path / "wander", **(options | {"noise_correlation": 0.9, "only_successful": False}))
    assert Demonstrations(tmp_path / "wander").info["policyforge"]["expert"]["noise_correlation"] == 0.9


@pytest.mark.parametrize(
    "arguments, path",
    [
        ({"task": "pendulum-swingup"}, "task"),
        ({"cameras": ["top"]}, "cameras"),
        ({"hesitation": 1.0}, "hesitation"),
        ({"hesitation": float("nan")}, "hesitation"),
        ({"noise_correlation": 1.0}, "noise_correlation"),
        ({"noise_correlation": float("nan")}, "noise_correlation"),
        ({"action_noise": float("nan")}, "action_noise"),
        ({"action_noise": float("inf")}, "action_noise"),
        ({"action_noise": -0.1}, "action_noise"),
        ({"episodes": 0}, "episodes"),
        ({"episodes": 10**12}, "episodes"),
        ({"num_envs": 10**7, "only_successful": True}, "num_envs"),
        ({"seed": -1}, "seed"),
        ({"image_size": 100_000, "cameras": ["front"]}, "image_size"),
        ({"task_options": {"control_mode": "joint_delta"}}, "task_options.control_mode"),
    ],
)
def test_bad_arguments_are_named(tmp_path, arguments, path):
    with pytest.raises(ConfigError) as error:
        collect(**({"task": "arm-reach", "episodes": 1, "out": tmp_path / "ds", "progress": False} | arguments))
    assert error.value.path == path
    assert not (tmp_path / "ds").exists()


def test_a_trained_policy_demonstrates_any_task(tmp_path):
    """`policy=RUN` records a run's deterministic policy (e.g. a PPO expert) on a task without a scripted one."""
    settings = {
        "name": "expert",
        "out_dir": str(tmp_path),
        "sim": {"task": "pendulum-swingup", "num_envs": 4, "task_options": {"episode_seconds": 0.5}},
        "algo": {"rollout_steps": 8},
        "runner": {"total_env_steps": 64, "eval_envs": 2, "video": "none", "tensorboard": False},
    }
    Runner.start(from_dict(RunConfig, settings), Console(quiet=True)).train()
    summary = collect("pendulum-swingup", 3, tmp_path / "ds", num_envs=2, policy=tmp_path / "expert", progress=False)
    assert summary["episodes"] == 3 and summary["frames"] == 30  # the run's 0.5 s episodes at 20 Hz
    data = Demonstrations(tmp_path / "ds")
    assert data.info["policyforge"]["expert"] == {
        "name": "PolicyExpert", "action_noise": 0.0, "hesitation": 0.0, "run": str(tmp_path / "expert")
    }  # fmt: skip
    _, policy, env = load_run(tmp_path / "expert")
    env.close()
    states = data.column("observation.state")
    with torch.no_grad():
        expected = policy.act({"policy": torch.as_tensor(states)})[:, 0].numpy()
    np.testing.assert_allclose(data.column("action"), np.clip(expected, -1, 1), atol=1e-6)
    with pytest.raises(ConfigError, match="trained on 'pendulum-swingup'"):
        collect("arm-reach", 1, tmp_path / "other", policy=tmp_path / "expert", progress=False)
    with pytest.raises(ConfigError, match="hesitation"):
        collect("pendulum-swingup", 1, tmp_path / "other", hesitation=0.1, policy=tmp_path / "expert")


def test_overwrite_deletes_only_the_files_of_a_dataset_policyforge_wrote(tmp_path):
    out = tmp_path / "ds"
    options = {"num_envs": 2, "task_options": SHORT, "progress": False, "cameras": ["front"], "image_size": 16}
    collect("arm-reach", 2, out, **options)
    for precious in (out / "notes.txt", out / "data" / "chunk-000" / "labels.csv", out / "mine" / "a.txt"):
        precious.parent.mkdir(exist_ok=True)
        precious.write_text("not policyforge's")
        before = sorted(p for p in out.rglob("*"))
        with pytest.raises(ConfigError, match=r"holds files that are not part of its dataset \(.*nothing was deleted"):
            collect("arm-reach", 1, out, overwrite=True, **options)
        assert sorted(p for p in out.rglob("*")) == before and Demonstrations(out).num_episodes == 2
        precious.unlink()
    (out / "mine").rmdir()
    collect("arm-reach", 1, out, overwrite=True, **options)
    assert Demonstrations(out).num_episodes == 1


def test_overwrite_refuses_a_dataset_policyforge_did_not_write(tmp_path):
    out = tmp_path / "lerobot"
    collect("arm-reach", 1, out, num_envs=1, task_options=SHORT, progress=False)
    info = json.loads((out / "meta/info.json").read_text())
    del info["policyforge"]  # as LeRobot writes it
    (out / "meta/info.json").write_text(json.dumps(info))
    before = sorted(p for p in out.rglob("*"))
    with pytest.raises(ConfigError, match="policyforge did not write") as error:
        collect("arm-reach", 1, out, overwrite=True, num_envs=1, task_options=SHORT, progress=False)
    assert error.value.path == "overwrite" and sorted(p for p in out.rglob("*")) == before


def test_each_episode_records_its_own_instruction_as_its_lerobot_task(tmp_path):
    import pyarrow.parquet as pq

    from policyforge.data import layout

    options = {**SHORT, "families": ["lift"]}  # 8 texts: 8 episodes repeat some
    summary = collect("arm-instructed", 8, tmp_path / "ds", num_envs=4, task_options=options, progress=False)
    data = Demonstrations(tmp_path / "ds")
    # the instructions the env drew: envs 0-3 ran episodes 0-3, auto-reset together and ran episodes 4-7
    env = make_env(SimConfig(task="arm-instructed", num_envs=4, task_options=options))
    env.reset(seed=summary["seed"])
    expected = env.instructions()
    for _ in range(env.episode_steps):
        env.step(np.zeros((4, 5), np.float32))
    expected += env.instructions()
    assert len(set(expected)) < 8, expected
    assert data.tasks == list(dict.fromkeys(expected))  # one task per distinct instruction, in order of first use
    tasks = pq.read_table(tmp_path / "ds" / layout.TASKS_PATH)  # LeRobot's: the text, and its task_index
    assert tasks.column("task").to_pylist() == data.tasks and tasks.column("task_index").to_pylist() == [
        *range(len(data.tasks))
    ]
    task_index = data.column("task_index")
    for episode, (start, stop) in enumerate(data.episode_bounds):
        assert {data.tasks[i] for i in task_index[start:stop]} == {expected[episode]}, episode
        assert data.rows[episode]["tasks"] == [expected[episode]]
