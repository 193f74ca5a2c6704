"""Teacher → student distillation (`algo: distill`): each mode brings a student of another architecture to its
teacher's behaviour, a privileged teacher teaches a student that sees less, only the student learns, a run resumes
exactly, and teachers that cannot teach this student are refused naming both."""

import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from policyforge.algos import checkpoint
from policyforge.algos.runner import RunConfig, Runner
from policyforge.algos.teacher import TeacherLabels, load_teacher
from policyforge.config import ConfigError, from_dict
from policyforge.policies.base import EnvSpec
from policyforge.policies.export import export_run
from policyforge.policies.export_description import load_description
from policyforge.policies.flow import FlowConfig
from policyforge.sims import make_env
from policyforge.sims.config import SimConfig

pytestmark = pytest.mark.slow  # PPO teachers trained for the module (about 40 s), students in seconds each

QUIET = {"eval_envs": 16, "video": "none", "tensorboard": False, "eval_every_steps": 0}
REACH_OPTIONS = {"control_mode": "ee_delta_topdown", "reward_type": "dense"}
REACH = {"task": "arm-reach", "num_envs": 32, "task_options": REACH_OPTIONS}
STUDENT = {"class": "gaussian", "hidden": [32, 32]}


def reach_config(tmp_path: Path, name: str, **settings) -> RunConfig:
    base = {"name": name, "out_dir": str(tmp_path), "sim": REACH, "policy": STUDENT}
    return from_dict(RunConfig, {**base, **settings, "runner": {**QUIET, **settings.get("runner", {})}})


def train(config: RunConfig) -> tuple[Runner, dict]:
    runner = Runner.start(config, Console(quiet=True))
    summary = runner.train()
    return runner, summary


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> dict[str, Path]:
    """PPO teachers on arm-reach (about 90% success): one on the robot's observation, one on the privileged state."""
    out = tmp_path_factory.mktemp("teachers")
    ppo = {"class": "ppo", "rollout_steps": 32, "actor_lr": 1e-3, "critic_lr": 1e-3}
    runs = {}
    for key in ("policy", "critic"):
        policy = {"class": "gaussian", "hidden": [64, 64], "obs_key": key}
        config = reach_config(out, key, sim={**REACH, "num_envs": 64}, policy=policy, algo=ppo,
                              runner={"total_env_steps": 120_000})  # fmt: skip
        runner, summary = train(config)
        runner.close()
        assert summary["eval/success"] >= 0.75, f"the {key} teacher did not learn"
        runs[key] = out / key
    return runs


def teacher_success(run: Path) -> float:
    return json.loads((run / "summary.json").read_text())["eval/success"]


@pytest.mark.parametrize("mode", ["dagger", "bc", "rpd", "rpd-action_mse"])
def test_each_mode_brings_a_smaller_student_to_its_teacher(tmp_path, teachers, mode):
    teacher = teachers["policy"]
    mode, _, loss = mode.partition("-")
    algo = {"class": "distill", "teacher": str(teacher), "mode": mode, "actor_lr": 1e-3, "critic_lr": 1e-3}
    algo.update({"distill_loss": loss} if loss else {})
    runner, summary = train(reach_config(tmp_path, mode, algo=algo, runner={"total_env_steps": 30_000}))
    records = [json.loads(line) for line in (tmp_path / mode / "metrics.jsonl").read_text().splitlines()]
    distill = [r["loss/distill"] for r in records if "loss/distill" in r]
    assert summary["eval/success"] >= teacher_success(teacher) - 0.15
    if loss:  # the squared error of the student's deterministic actions to the teacher's falls
        assert distill[-1] < 0.5 * distill[0], (distill[0], distill[-1])
    else:
        assert distill[-1] < distill[0] - 1.0, "the student's NLL of the teacher's actions falls"
    if mode != "rpd":
        error = [r["distill/action_mse"] for r in records if "distill/action_mse" in r]
        assert error[-1] < 0.1 * error[0], "the student's own actions converge to the teacher's"
        beta = [r["distill/beta"] for r in records if "distill/beta" in r]
        assert beta[0] == 1.0 and (beta[-1] < 0.01 if mode == "dagger" else beta[-1] == 1.0)
    runner.close()


def test_a_privileged_teacher_teaches_a_student_that_sees_less(tmp_path, teachers):
    teacher = teachers["critic"]
    algo = {"class": "distill", "teacher": str(teacher), "mode": "dagger"}
    runner, summary = train(reach_config(tmp_path, "student", algo=algo, runner={"total_env_steps": 30_000}))
    assert runner.algo.teacher.teacher.obs_keys == ("critic",) and runner.algo.policy.obs_keys == ("policy",)
    assert summary["eval/success"] >= teacher_success(teacher) - 0.15
    runner.close()

    out, error, _ = export_run(teacher, "onnx")  # a policy on the privileged state exports like any other
    assert error <= 1e-5 and load_description(out)["observation"]["obs"]["observation_key"] == "critic"


@pytest.mark.parametrize("mode", ["dagger", "rpd"])
def test_only_the_student_learns(tmp_path, teachers, mode):
    algo = {"class": "distill", "teacher": str(teachers["policy"]), "mode": mode, "rollout_steps": 8}
    runner = Runner.start(reach_config(tmp_path, mode, algo=algo), Console(quiet=True))
    teacher = runner.algo.teacher.teacher
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    student = {k: v.clone() for k, v in runner.algo.policy.state_dict().items()}
    runner.obs, metrics = runner.algo.iterate(runner.env, runner.obs, lambda info: None)
    assert metrics["loss/distill"] != 0.0
    assert all(not p.requires_grad and p.grad is None for p in teacher.parameters())
    assert all(torch.equal(v, before[k]) for k, v in teacher.state_dict().items())
    assert any(not torch.equal(v, student[k]) for k, v in runner.algo.policy.state_dict().items())
    runner.close()


@pytest.mark.parametrize("mode", ["dagger", "rpd"])
def test_a_distill_run_resumes_exactly(tmp_path, teachers, mode):
    algo = {"class": "distill", "teacher": str(teachers["policy"]), "mode": mode, "rollout_steps": 8}
    runs = {}
    for name, steps in (("whole", 2048), ("split", 1024)):
        sim = {**REACH, "num_envs": 16}
        config = reach_config(tmp_path, f"{mode}-{name}", sim=sim, algo=algo, runner={"total_env_steps": steps})
        Runner.start(config, Console(quiet=True)).train()
        runs[name] = tmp_path / f"{mode}-{name}"
    Runner.resume(runs["split"], Console(quiet=True), ["runner.total_env_steps=2048"]).train()
    whole, split = (checkpoint.read(runs[n] / "checkpoints" / "latest.pt")["algo"] for n in runs)
    for name, value in whole["policy"].items():
        assert torch.equal(value, split["policy"][name]), name


def test_teachers_that_cannot_teach_this_student_are_refused_naming_both(tmp_path, teachers):
    algo = {"class": "distill", "teacher": str(teachers["policy"])}
    pendulum = {"task": "pendulum-swingup", "num_envs": 4}
    with pytest.raises(ConfigError, match=r"algo.teacher.*acts in 5 dimensions, the student in 1"):
        Runner.start(reach_config(tmp_path, "a", sim=pendulum, algo=algo))
    with pytest.raises(ConfigError, match=r"algo.teacher.*not a policyforge run"):
        Runner.start(reach_config(tmp_path, "b", algo={"class": "distill", "teacher": str(tmp_path)}))
    with pytest.raises(ConfigError, match=r"algo.teacher: give the teacher's run directory"):
        reach_config(tmp_path, "c", algo={"class": "distill"})


def test_a_student_chunk_longer_than_the_teachers_is_refused_naming_both(teachers):
    env = make_env(from_dict(SimConfig, {**REACH, "num_envs": 2}))
    teacher = load_teacher(str(teachers["policy"]), "best", env)
    student = from_dict(FlowConfig, {"chunk": {"horizon": 4, "act_steps": 2}}).build(
        EnvSpec(env.obs_shapes, env.action_dim)
    )
    with pytest.raises(ConfigError, match=r"policy.chunk.*student plans 4 actions.*teacher only 1"):
        TeacherLabels(teacher, student, env)
    env.close()


def test_the_distill_command_trains_a_student_and_compares_it_with_its_teacher(tmp_path, teachers, capsys):
    from policyforge.cli import main

    teacher = teachers["critic"]
    options = ["--mode", "dagger", "--recipe", "configs/arm-reach-ppo.yaml"]
    settings = ["algo.class=distill", "policy.hidden=[32,32]", "runner.total_env_steps=20000", "runner.eval_envs=8"]
    run = [*settings, f"out_dir={tmp_path}", "name=student", "runner.tensorboard=false"]
    assert main(["distill", str(teacher), *run, *options]) == 0
    out = capsys.readouterr().out
    assert "teacher and student on the same episodes" in out and "faster than its teacher" in out
    compared = json.loads((tmp_path / "student" / "compare.json").read_text())
    assert compared["student"]["eval/success"] >= compared["teacher"]["eval/success"] - 0.15
    assert all(Path(compared[role]["video"]).stat().st_size > 1000 for role in ("teacher", "student"))
    assert main(["distill", str(teacher), "algo.class=distill", *options, "--task", "touch"]) == 2
    assert "--task: the teacher's task arm-reach has no instruction families" in capsys.readouterr().out
