"""Evaluation on an instructed task reports success per family and per instruction set, from the instruction each
env's evaluated episode had; `policyforge eval --instructions SET` evaluates a run on a held-out set."""

import json
import re
from typing import get_args

import torch

from policyforge.algos.evaluate import evaluate, success_by_group
from policyforge.algos.progress import metric_text
from policyforge.policies.base import EnvSpec, PolicyConfig
from policyforge.sims import SimConfig, make_env
from policyforge.sims.tasks.instructions import groups, render


def test_success_by_group_from_known_instruction_ids():
    episodes = [  # (family, object, target, paraphrase), success
        ((0, 0, 0, 0), 1.0),  # lift red, seen wording: train
        ((0, 0, 0, 4), 0.0),  # lift red, held-out wording
        ((1, 0, 0, 0), 1.0),  # push red left: train
        ((2, 1, 0, 1), 0.0),  # place green on yellow: a held-out combination
        ((3, 0, 0, 4), 1.0),  # touch red (held-out combination) in the held-out wording: in no named set
    ]
    texts = [render(*ids) for ids, _ in episodes]
    successes = torch.tensor([success for _, success in episodes])
    assert groups(texts[4]) == ["touch"]
    assert success_by_group(successes, texts) == {
        "eval/success/lift": 0.5,
        "eval/success/push": 1.0,
        "eval/success/place": 0.0,
        "eval/success/touch": 1.0,
        "eval/success/train": 1.0,
        "eval/success/heldout_paraphrase": 0.0,
        "eval/success/heldout_combination": 0.0,
    }
    assert metric_text("eval/success/lift", 0.5) == metric_text("eval/success", 0.5)  # shown as a percentage


def _evaluate(instructions: str, families: list[str]) -> tuple[dict[str, float], list[str]]:
    options = {"episode_seconds": 0.2, "instructions": instructions, "families": families}
    env = make_env(SimConfig(task="arm-instructed", num_envs=8, task_options=options))
    states = {key: shape for key, shape in env.obs_shapes.items() if key == "policy"}  # a state policy
    torch.manual_seed(0)
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec(states, env.action_dim)).eval()
    env.reset(seed=5)
    drawn = env.instructions()  # what evaluate's reset with the same seed draws
    metrics = evaluate(policy, env, seed=5)
    env.close()
    return metrics, drawn


def test_evaluate_reports_the_families_and_sets_of_the_episodes_it_ran():
    metrics, drawn = _evaluate("all", ["lift", "touch"])
    families = {groups(text)[0] for text in drawn}
    per_group = {key.removeprefix("eval/success/") for key in metrics if key.startswith("eval/success/")}
    assert families <= per_group <= {"lift", "touch", "train", "heldout_paraphrase", "heldout_combination"}
    counts = {family: sum(groups(text)[0] == family for text in drawn) for family in families}
    weighted = sum(metrics[f"eval/success/{f}"] * count for f, count in counts.items()) / len(drawn)
    assert abs(weighted - metrics["eval/success"]) < 1e-6  # the families partition the episodes


def test_a_held_out_evaluation_is_labelled_with_its_set():
    metrics, _ = _evaluate("heldout_paraphrase", ["push"])
    assert metrics["eval/success/heldout_paraphrase"] == metrics["eval/success"]
    assert metrics["eval/success/push"] == metrics["eval/success"]
    assert "eval/success/train" not in metrics


def test_a_task_without_instructions_has_no_per_group_success():
    env = make_env(SimConfig(task="arm-reach", num_envs=2, task_options={"episode_seconds": 0.2}))
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec({"policy": env.obs_shapes["policy"]}, env.action_dim))
    metrics = evaluate(policy.eval(), env, seed=0)
    env.close()
    assert "eval/success" in metrics
    assert not [key for key in metrics if key.startswith("eval/success/")]


def test_policyforge_eval_evaluates_a_run_on_the_instruction_set_it_is_given(tmp_path, capsys):
    from policyforge.cli import main

    tiny = ["sim.task=arm-instructed", "sim.num_envs=2", "sim.task_options.episode_seconds=0.2", "algo.rollout_steps=4"]
    tiny += ["runner.total_env_steps=8", "runner.eval_envs=4", "runner.video=none", "runner.tensorboard=false"]
    assert main(["train", "configs/arm-reach-ppo.yaml", f"out_dir={tmp_path}", "name=tiny", *tiny]) == 0
    trained = json.loads((tmp_path / "tiny" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "eval/success/train" in trained  # the run trained and was evaluated on the seen instructions
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "tiny"), "--instructions", "heldout_combination", "--envs", "6"]) == 0
    printed = capsys.readouterr().out
    assert "eval/success/heldout_combination: " in printed and "eval/success/train" not in printed
    assert re.search(r"eval/success/(lift|push|place|touch): \d+%", printed)


def test_the_eval_flag_offers_every_instruction_set():
    from policyforge.cli import INSTRUCTION_SETS
    from policyforge.sims.tasks.instructions import InstructionSet

    assert get_args(InstructionSet) == INSTRUCTION_SETS


def test_evaluation_acts_in_eval_mode_and_gives_the_policy_back_as_it_came():
    env = make_env(SimConfig(task="arm-reach", num_envs=2, task_options={"episode_seconds": 0.2}))
    policy = PolicyConfig.registry["gaussian"]().build(EnvSpec({"policy": env.obs_shapes["policy"]}, env.action_dim))
    modes = []
    act = policy.act
    policy.act = lambda obs: modes.append(policy.training) or act(obs)
    for training in (True, False):  # a fine-tuning run evaluates its initial policy before any update set a mode
        evaluate(policy.train(training), env, seed=0)
        assert policy.training is training
    env.close()
    assert modes and not any(modes), "augmentation or batch statistics would act in training mode"
