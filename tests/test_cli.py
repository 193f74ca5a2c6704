"""The command line end to end: train a tiny run, evaluate it, export it in both formats, resume, errors."""

import json
import re
import subprocess
import sys

import pytest

from policyforge.cli import main

TINY = [
    "sim.num_envs=8",
    "algo.rollout_steps=16",
    "runner.total_env_steps=512",
    "runner.eval_envs=2",
    "runner.tensorboard=true",
    "runner.checkpoint_every=2",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={out}", "name=tiny", *TINY]) == 0
    return out / "tiny"


def test_train_leaves_checkpoint_plots_video_logs_and_config(run_dir):
    assert (run_dir / "checkpoints" / "latest.pt").exists()
    assert (run_dir / "plots" / "learning_curves.png").stat().st_size > 10_000
    videos = list((run_dir / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert "arm-reach" in (run_dir / "config.yaml").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 512 and 0 <= summary["eval/success"] <= 1


def test_eval_and_export(run_dir, capsys):
    assert main(["eval", str(run_dir), "--envs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "eval/return" in printed and re.search(r"^eval/success: \d+%$", printed, re.MULTILINE), printed
    for fmt, name in (("onnx", "policy.onnx"), ("torchscript", "policy.pt")):
        assert main(["export", str(run_dir), "--format", fmt]) == 0
        printed = "".join(capsys.readouterr().out.split())  # rich wraps long lines
        assert f"(+{name}.json)" in printed and "max|exported−act|" in printed
    for fmt, name in (("onnx", "policy.onnx"), ("torchscript", "policy.pt")):  # each file its own description
        spec = json.loads((run_dir / "export" / f"{name}.json").read_text())
        assert spec["format"] == fmt and spec["task"] == "arm-reach" and spec["action_dim"] == 5
        assert spec["obs_dim"] == 28 and spec["n_obs_steps"] == 0 and spec["act_steps"] == spec["chunk_len"] == 1
        features = spec["observation"]["obs"]["features"]  # the task's names, in observation order
        assert features[:2] == ["q1", "q2"] and features[-3:] == ["goal-tcp.x", "goal-tcp.y", "goal-tcp.z"]
        assert spec["action"]["meaning"].startswith("control_mode ee_delta_topdown, per step: a[:3]: the TCP")


def test_resume_can_extend_a_finished_run(run_dir):
    assert main(["train", "--resume", str(run_dir), "sim.num_envs=4"]) == 2  # would change what is resumed
    assert main(["train", "--resume", str(run_dir), "runner.total_env_steps=1024"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 1024
    steps = [json.loads(line)["env_steps"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 1024


def test_a_run_is_never_overwritten(run_dir, capsys):
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={run_dir.parent}", "name=tiny", *TINY]) == 2
    assert "already holds a run" in capsys.readouterr().out


def test_config_errors_name_the_field(capsys):
    assert main(["train", "configs/arm-reach-ppo.yaml", "algo.clip_ratio=-1"]) == 2
    assert "algo.clip_ratio: must be > 0" in capsys.readouterr().out
    assert main(["train", "configs/pendulum-swingup-sac.yaml", "policy.squash=false"]) == 2
    assert "policy.squash: SAC needs tanh-squashed actions" in capsys.readouterr().out


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "policyforge.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout and "export" in result.stdout


def test_collect_writes_a_dataset_that_reads_back(tmp_path, capsys):
    from policyforge.data.dataset import Demonstrations

    out = tmp_path / "reach"
    collect = ["collect", "arm-reach", "episode_seconds=0.4", "--episodes", "3", "--out", str(out), "--envs", "2"]
    collect += ["--cameras", "front", "--image-size", "32x24", "--hesitation", "0.2", "--seed", "7"]
    assert main(collect) == 0
    assert "wrote 3 episodes (30 frames" in capsys.readouterr().out
    data = Demonstrations(out)
    assert data.num_episodes == 3 and data.num_frames == 30 and data.cameras == ["front"]
    assert data.column("observation.state").shape == (30, 28) and data.column("action").shape == (30, 5)
    assert data.images("front").shape == (30, 24, 32, 3)
    assert data.info["policyforge"]["expert"]["hesitation"] == 0.2
    assert data.info["policyforge"]["task_options"] == {"episode_seconds": 0.4}
    assert main(collect) == 0  # same settings: appended
    assert Demonstrations(out).num_episodes == 6
    assert main([*collect[:-4], "--hesitation", "0.0"]) == 2  # other settings: refused, dataset untouched
    assert "--out: " in capsys.readouterr().out and Demonstrations(out).num_episodes == 6
    assert main([*collect, "--overwrite"]) == 0
    assert Demonstrations(out).num_episodes == 3


@pytest.mark.parametrize(
    "flags, message",
    [
        (["arm-reach", "--hesitation", "1.5"], "--hesitation: is a per-step probability"),
        (["arm-reach", "--noise-correlation", "-0.1"], "--noise-correlation: is a lag-one correlation in [0, 1)"),
        (["arm-reach", "--cameras", "top"], "--cameras: unknown ['top']"),
        (["arm-reach", "--image-size", "big"], "--image-size: give SIZE or WIDTHxHEIGHT"),
        (["arm-reach", "--envs", "0"], "--envs: must be in [1, 4096]"),
        (["arm-reach", "--noise", "nan"], "--noise: is a standard deviation, finite and ≥ 0; got nan"),
        (["arm-reach", "--noise", "inf"], "--noise: is a standard deviation, finite and ≥ 0; got inf"),
        (["arm-reach", "--seed", "-1"], "--seed: must be in [0, 4274963199]"),
        (
            ["arm-reach", "--seed", "4294967295"],
            "--seed: must be in [0, 4274963199]; seeds up to seed + 20,004,096 are",
        ),
        (["arm-reach", "--image-size", "2000"], "--image-size: must be 1 to 1024 pixels a side"),
        (["pendulum-swingup"], "task: no scripted expert for 'pendulum-swingup'"),
    ],
)
def test_collect_errors_name_the_flag(tmp_path, capsys, flags, message):
    assert main(["collect", *flags, "--episodes", "1", "--out", str(tmp_path / "ds")]) == 2
    assert message in capsys.readouterr().out


def test_every_recipe_loads():
    from pathlib import Path

    from policyforge.algos.runner import RunConfig
    from policyforge.config import load

    recipes = [p for p in sorted(Path("configs").glob("*.yaml")) if p.name != "tour.yaml"]
    assert len(recipes) >= 6
    for recipe in recipes:
        load(RunConfig, recipe)


def test_the_bc_recipe_trains_evaluates_films_and_exports(tmp_path, capsys):
    data = tmp_path / "lift"
    assert main(["collect", "arm-lift-cube", "--episodes", "2", "--out", str(data), "--envs", "2"]) == 0
    train = ["train", "configs/arm-lift-cube-flow-bc.yaml", f"algo.dataset={data}", f"out_dir={tmp_path}", "name=bc"]
    train += [
        "algo.gradient_steps=40",
        "algo.steps_per_iteration=20",
        "runner.eval_envs=2",
        "runner.eval_every_steps=0",
    ]
    assert main(train) == 0
    out = capsys.readouterr().out
    assert "gradient_steps" in out and "eval/success" in out
    run = tmp_path / "bc"
    assert (run / "checkpoints" / "latest.pt").exists() and list((run / "videos").glob("*.mp4"))
    assert (run / "plots" / "learning_curves.png").exists()
    assert main(["export", str(run), "--format", "onnx"]) == 0
    spec = json.loads((run / "export" / "policy.onnx.json").read_text())
    assert spec["chunk_len"] == 8 and spec["n_obs_steps"] == 2 and spec["inputs"]["obs"] == [2, 32]
    assert spec["observation"]["obs"]["shape"] == ["B", 2, 32] and spec["history"]["order"] == "oldest_first"
    assert len(spec["observation"]["obs"]["features"]) == 32


def test_bc_dataset_problems_are_config_errors_on_bc_dataset(tmp_path, capsys):
    """No episodes, a file, a directory that is not a dataset, a damaged data file: each names bc.dataset."""
    from policyforge.data.dataset import DemoWriter

    DemoWriter(tmp_path / "empty", fps=25, state_dim=32, action_dim=5, task_name="arm-lift-cube")  # nothing committed
    (tmp_path / "a-file").write_text("not a dataset")
    (tmp_path / "not-a-dataset").mkdir()
    damaged = tmp_path / "damaged"
    assert main(["collect", "arm-lift-cube", "episode_seconds=0.4", "--episodes", "2", "--out", str(damaged)]) == 0
    train = ["train", "configs/arm-lift-cube-flow-bc.yaml", f"out_dir={tmp_path / 'runs'}", "runner.eval_envs=1"]
    assert main([*train, f"algo.dataset={damaged}", "algo.max_episodes=5"]) == 2
    assert "set algo.max_episodes to at most 2 (0: all)" in " ".join(capsys.readouterr().out.split())
    data_file = damaged / "data/chunk-000/file-001.parquet"
    data_file.write_bytes(data_file.read_bytes()[:300])
    for dataset, message in [
        ("empty", "holds no episodes: record some with `policyforge collect arm-lift-cube --episodes 100"),
        ("a-file", "a-file is a file; a dataset is a directory"),
        ("not-a-dataset", "is not a LeRobotDataset"),
        ("damaged", "file-001.parquet, a file of episode 1, is damaged: it cannot be read"),
    ]:
        assert main([*train, f"algo.dataset={tmp_path / dataset}"]) == 2
        printed = " ".join(capsys.readouterr().out.split())
        assert f"algo.dataset: {tmp_path / dataset}" in printed and message in printed, printed


def test_bench_runs_scripts_of_bench_only(capsys):
    """`policyforge bench NAME` takes a benchmark's name, never a path: ../ cannot reach a script elsewhere."""
    import tempfile
    from pathlib import Path

    from policyforge import bench

    with tempfile.TemporaryDirectory(prefix="pfbench") as directory:  # no '-' in the path: NAME maps - to _
        marker, outside = Path(directory) / "ran", Path(directory) / "outside.py"
        outside.write_text(f"open({str(marker)!r}, 'w').close()\n")
        relative = "../" * (len(Path(bench.__file__).parent.parts) - 1) + str(outside.with_suffix(""))[1:]
        assert main(["bench", relative]) == 2
        assert not marker.exists()
    assert "no benchmark" in capsys.readouterr().out


def test_config_show_prints_the_resolved_config_with_every_docstring(capsys):
    import yaml

    from policyforge.algos.ppo_config import PPOConfig
    from policyforge.algos.runner import RunConfig
    from policyforge.config import from_dict, load
    from policyforge.config_docs import field_docs
    from policyforge.sims import SimConfig

    assert main(["config", "show", "arm-reach-ppo", "sim.num_envs=8", "algo.gamma=0.97"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for field, docs in (
        ("  num_envs: 8", field_docs(SimConfig)["num_envs"]),
        ("  gamma: 0.97", field_docs(PPOConfig)["gamma"]),
    ):
        at = lines.index(field)
        comment = []
        while lines[at - 1 - len(comment)].lstrip().startswith("#"):
            comment.insert(0, lines[at - 1 - len(comment)].strip().removeprefix("# "))
        assert " ".join(comment) == " ".join(docs.split())
    assert "sim:" in lines and "  task: arm-reach" in lines  # the recipe's value, inside its section
    assert lines[lines.index("algo:") + 2] == "  class: ppo"  # the algorithm section, its class (after its doc)
    resolved = load(RunConfig, "configs/arm-reach-ppo.yaml", ["sim.num_envs=8", "algo.gamma=0.97"])
    assert from_dict(RunConfig, yaml.safe_load("\n".join(lines))) == resolved  # the printout is the config


def test_config_show_of_an_unknown_recipe_names_the_recipes_there_are(capsys):
    assert main(["config", "show", "arm-reach-pop"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "no recipe 'arm-reach-pop'" in out and "arm-reach-ppo" in out


def test_envs_shows_whole_task_names_at_80_columns(monkeypatch, capsys):
    from rich.cells import cell_len

    from policyforge.sims import TASKS

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(cell_len, lines)) <= 80
    for name in TASKS:
        assert any(line.startswith(f"│ {name} ") for line in lines), name


def test_overrides_may_follow_the_options():
    from policyforge.cli import parse

    args = parse(["distill", "runs/vla-bc", "runner.eval_envs=8", "--task", "touch", "seed=3"])
    assert args.overrides == ["runner.eval_envs=8", "seed=3"] and args.task == "touch"
    with pytest.raises(SystemExit):
        parse(["distill", "runs/vla-bc", "--task", "touch", "--bogus"])
