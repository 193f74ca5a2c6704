"""Reward models against ground truth: how well a trained reward model agrees with the simulator on held-out rollouts,
what RL reaches with its reward alone, and what scoring costs the simulator.

    policyforge bench reward-table --model runs/reward-model \\
        --held-out data/rm-heldout-combination data/rm-heldout-paraphrase [--train-data data/rm-train] \\
        [--ensemble runs/reward-model-1 runs/reward-model-2 [--uncertainty-penalty 1]] \\
        [--rl-seeds 0 1 2 [--rl-recipe touch-ppo-learned-reward] [--rl-steps N]] [--throughput-envs 64] \
        [--out bench/results/reward]

With `--ensemble`, the model judged (and rewarding RL) is the ensemble of --model and those runs
(`rewards/ensemble.py`: each score the models' mean minus the penalty × their spread).

1. Accuracy (`rewards/metrics.py`) per held-out dataset and instruction family: success accuracy on the episodes'
   last frames, success ROC-AUC over frames, value-order correlation (Spearman, Kendall) of successful episodes,
   counterfactual accuracy (the same last frames under an instruction naming another task; "hard": another object
   or target of the same family).
2. RL with the learned reward only: a learned-reward recipe (--rl-recipe: PPO from scratch on touch,
   configs/touch-ppo-learned-reward.yaml, or DPPO fine-tuning of a BC diffusion policy on lift,
   configs/lift-dppo-learned-reward.yaml) with the model's reward and, side by side with the same seed and env
   steps, with the task's own reward; both evaluated by the simulator's success. Runs are kept in OUT/results and
   reused at the same sizes.
3. Throughput at N envs rendering the model's camera every step: env steps/s without a reward model, with it
   scoring synchronously and asynchronously (k = 1), medians of interleaved rounds.

The last line is one JSON object: {"learned": {"success_accuracy", "progress_rank_corr", ...}, "rl_learned_over_gt",
"async_throughput_ratio", ...}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge import config as config_io
from policyforge.algos.runner import RunConfig, Runner
from policyforge.bench._kept import kept_result
from policyforge.cli import find_recipe
from policyforge.data.dataset import Demonstrations
from policyforge.rewards.base import RewardModel
from policyforge.rewards.config import RewardModelConfig
from policyforge.rewards.ensemble import RewardEnsemble
from policyforge.rewards.labels import RewardFrames
from policyforge.rewards.learned import LearnedReward, load_learned
from policyforge.rewards.metrics import reward_accuracy
from policyforge.sims.tasks.instructions import FAMILIES, parse

FIGURES = (
    "success_accuracy",
    "success_auc",
    "progress_rank_corr",
    "progress_kendall",
    "counterfactual_accuracy",
    "hard_counterfactual_accuracy",
)
HEADINGS = ("success acc", "success AUC", "VOC ρ", "VOC τ", "cf acc", "hard cf acc")
"""The table's names of FIGURES (VOC: value-order correlation, Spearman's ρ and Kendall's τ; cf: counterfactual)."""


def judged_model(args: argparse.Namespace) -> LearnedReward | RewardEnsemble:
    """The model `args` name: --model alone, or with --ensemble's runs as one ensemble."""
    if not args.ensemble:
        return load_learned(args.model)
    members: list[RewardModel] = [load_learned(run) for run in [args.model, *args.ensemble]]
    return RewardEnsemble(members, args.uncertainty_penalty)


def reward_model_overrides(args: argparse.Namespace) -> list[str]:
    """The recipe's sim.reward_model and sim.image set to the judged model."""
    overrides = [f"sim.reward_model.path={args.model}", *image_overrides(load_learned(args.model))]
    if args.ensemble:
        overrides += [
            "sim.reward_model.ensemble=[" + ",".join(map(str, args.ensemble)) + "]",
            f"sim.reward_model.uncertainty_penalty={args.uncertainty_penalty}",
        ]
    return overrides


def accuracy(model: LearnedReward | RewardEnsemble, dataset: Path) -> dict[str, dict[str, float]]:
    """The figures of every family's episodes in `dataset`, and of all of them."""
    demos = Demonstrations(dataset)
    inputs = model.inputs
    task_index = demos.column("task_index")
    families = [FAMILIES[parse(demos.tasks[task_index[start]])[0]] for start, _ in demos.episode_bounds]
    rows = {}
    for family in ["all", *sorted(set(families), key=FAMILIES.index)]:
        episodes = [i for i, f in enumerate(families) if family in ("all", f)]
        data = RewardFrames(demos, list(inputs.cameras), inputs.window, inputs.frame_stride, episodes)
        rows[family] = {"episodes": len(episodes), **reward_accuracy(model, data)}
    return rows


def rl_run(args: argparse.Namespace, reward: str, seed: int) -> dict[str, Any]:
    """One run of the learned-reward recipe with `reward` "learned" or "gt" (the task's own reward)."""
    overrides = [f"seed={seed}", f"runner.total_env_steps={args.rl_steps}", "runner.video=none"]
    overrides += [
        f"out_dir={args.out / 'runs'}",
        f"name={args.rl_recipe}-{reward}-s{seed}",
        f"runner.eval_every_steps={args.rl_eval_every}",
    ]
    if reward == "gt":
        overrides += ['sim.reward_model.path=""', "sim.image.cameras=[]"]
    else:
        overrides += reward_model_overrides(args)
    config = config_io.load(RunConfig, find_recipe(args.rl_recipe), overrides)
    runner = Runner.start(config, Console(quiet=True))
    started = time.perf_counter()
    summary = runner.train()
    runner.close()
    curve = [
        (record["env_steps"], record["eval/success"])
        for record in map(json.loads, (runner.run_dir / "metrics.jsonl").read_text().splitlines())
        if "eval/success" in record
    ]
    return {"success": summary["eval/success"], "wall_s": time.perf_counter() - started, "curve": curve}


def image_overrides(model: LearnedReward) -> list[str]:
    """The recipe's sim.image set to what `model` reads."""
    inputs = model.inputs
    cameras = "[" + ",".join(inputs.cameras) + "]"
    return [f"sim.image.cameras={cameras}", f"sim.image.width={inputs.width}", f"sim.image.height={inputs.height}"]


def throughput(args: argparse.Namespace, rounds: int = 3, steps: int = 48) -> dict[str, float]:
    """Env steps/s at `args.throughput_envs` envs rendering the model's camera each step: no model, and the model
    scoring every step synchronously and asynchronously (medians of `rounds` interleaved rounds)."""
    from policyforge.rewards.wrapper import RewardWrapper
    from policyforge.sims import make_env

    model = judged_model(args)
    config = config_io.load(RunConfig, find_recipe("touch-ppo-learned-reward"), reward_model_overrides(args))
    sim = dataclasses.replace(
        config.sim,
        num_envs=args.throughput_envs,
        image=dataclasses.replace(config.sim.image, render="every_step"),
        reward_model=RewardModelConfig(),
    )
    modes = {
        "none": lambda env: env,
        "sync": lambda env: RewardWrapper(env, model, RewardModelConfig(path=str(args.model)), sim.image),
        "async": lambda env: RewardWrapper(
            env, model, RewardModelConfig(path=str(args.model), asynchronous=True), sim.image
        ),
    }
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    generator = torch.Generator().manual_seed(0)
    for _ in range(rounds):
        for mode, wrap in modes.items():
            env = wrap(make_env(sim, seed=0))
            env.reset(seed=0)
            actions = torch.rand(steps, env.num_envs, env.action_dim, generator=generator) * 2 - 1
            env.step(actions[0])
            started = time.perf_counter()
            for action in actions[1:]:
                env.step(action)
            rates[mode].append((steps - 1) * env.num_envs / (time.perf_counter() - started))
            env.close()
    result = {mode: statistics.median(values) for mode, values in rates.items()}
    frames = torch.randint(0, 256, (args.throughput_envs, 1, len(model.inputs.cameras), sim.image.height,
                                    sim.image.width, 3), dtype=torch.uint8)  # fmt: skip
    texts = ["touch the green cube"] * args.throughput_envs
    model.score(frames, texts)
    seconds = []
    for _ in range(rounds * 3):
        started = time.perf_counter()
        model.score(frames, texts)
        seconds.append(time.perf_counter() - started)
    result["model_ms"] = 1000 * statistics.median(seconds)
    return result


def print_accuracy(console: Console, rows: dict[str, dict[str, dict[str, float]]]) -> None:
    table = Table(title="reward model vs ground truth, held-out rollouts")
    for column in ("dataset", "family", "episodes", *HEADINGS):
        table.add_column(column, no_wrap=True)
    for dataset, families in rows.items():
        for family, figures in families.items():
            values = [f"{figures[key]:.2f}" if key in figures else "-" for key in FIGURES]
            table.add_row(dataset, family, str(figures["episodes"]), *values)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="an algo: reward_model run")
    parser.add_argument("--held-out", type=Path, nargs="+", required=True, help="held-out rollout datasets")
    parser.add_argument("--ensemble", type=Path, nargs="*", default=[], help="more reward_model runs: an ensemble")
    parser.add_argument("--uncertainty-penalty", type=float, default=1.0, help="ensemble: stds off the mean")
    parser.add_argument("--train-data", type=Path, help="the training rollouts too (how well the model fits them)")
    parser.add_argument("--rl-seeds", type=int, nargs="*", default=[], help="seeds of the RL comparison (none: off)")
    parser.add_argument("--rl-recipe", default="touch-ppo-learned-reward", help="a learned-reward config of configs/")
    parser.add_argument("--rl-steps", type=int, help="env steps per run (default: the recipe's)")
    parser.add_argument("--rl-eval-every", type=int, help="env steps between evaluations (default: the recipe's)")
    parser.add_argument("--throughput-envs", type=int, default=64, help="0: no throughput measurement")
    parser.add_argument("--out", type=Path, default=Path("bench/results/reward"))
    args = parser.parse_args()
    console = Console()
    model = judged_model(args)
    datasets = [*args.held_out, *([args.train_data] if args.train_data else [])]
    rows = {path.name: accuracy(model, path) for path in datasets}
    print_accuracy(console, rows)
    summary: dict[str, Any] = {"learned": {k: v for k, v in rows[args.held_out[0].name]["all"].items()}}
    summary["held_out"] = {name: families["all"] for name, families in rows.items()}
    if args.rl_seeds:
        recipe = config_io.load(RunConfig, find_recipe(args.rl_recipe), [])
        args.rl_steps = args.rl_steps or recipe.runner.total_env_steps
        args.rl_eval_every = args.rl_eval_every or recipe.runner.eval_every_steps
        sizes = {"steps": args.rl_steps, "eval_every": args.rl_eval_every}
        # the ground-truth runs depend on neither the model nor the recipe's reward signal
        judged: dict[str, Any] = {"model": str(args.model.resolve()), "signal": recipe.sim.reward_model.signal}
        if args.ensemble:
            judged["ensemble"] = [str(run.resolve()) for run in args.ensemble]
            judged["uncertainty_penalty"] = args.uncertainty_penalty
        runs = {
            (reward, seed): kept_result(
                args.out / "results" / f"{args.rl_recipe}-{reward}-s{seed}.json",
                sizes if reward == "gt" else {**sizes, **judged},
                lambda r=reward, s=seed: rl_run(args, r, s),
            )
            for seed in args.rl_seeds
            for reward in ("gt", "learned")
        }
        table = Table(title=f"{args.rl_recipe}, {args.rl_steps:,} env steps: ground-truth success")
        for column in ("seed", "task's reward", "learned reward", "learned / task's"):
            table.add_column(column)
        for seed in args.rl_seeds:
            gt, learned = runs["gt", seed]["success"], runs["learned", seed]["success"]
            table.add_row(str(seed), f"{gt:.0%}", f"{learned:.0%}", f"{learned / gt:.2f}" if gt else "-")
        gt_mean = float(np.mean([runs["gt", s]["success"] for s in args.rl_seeds]))
        learned_mean = float(np.mean([runs["learned", s]["success"] for s in args.rl_seeds]))
        table.add_row(
            "mean", f"{gt_mean:.0%}", f"{learned_mean:.0%}", f"{learned_mean / gt_mean:.2f}" if gt_mean else "-"
        )
        console.print(table)
        summary.update({"rl_recipe": args.rl_recipe, "rl_gt_success": gt_mean, "rl_learned_success": learned_mean})
        summary["rl_learned_over_gt"] = learned_mean / gt_mean if gt_mean else None
    if args.throughput_envs:
        rates = throughput(args)
        table = Table(title=f"env steps/s, {args.throughput_envs} envs rendering the model's camera, k = 1")
        columns = ("no reward model", "synchronous", "asynchronous", "sync / none", "async / none", "model ms / batch")
        for column in columns:
            table.add_column(column)
        table.add_row(*(f"{rates[m]:.0f}" for m in ("none", "sync", "async")),
                      f"{rates['sync'] / rates['none']:.2f}", f"{rates['async'] / rates['none']:.2f}",
                      f"{rates['model_ms']:.1f}")  # fmt: skip
        console.print(table)
        summary["throughput"] = rates
        summary["async_throughput_ratio"] = rates["async"] / rates["none"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
