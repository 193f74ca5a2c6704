"""The VLA end to end on arm-instructed: collect → multi-task BC → PPO fine-tuning, success per family on seen and
held-out instructions over seeds, and the VLA's decision time with and without the prefix cache.

One dataset of scripted demonstrations (every family, the `train` instructions, imperfect on purpose: action noise
and hesitation) is collected with the task and wrist cameras. For each seed, configs/vla-bc.yaml trains the VLA on
it and configs/vla-ppo.yaml fine-tunes that run with PPO (ReinFlow chain from act's x_0, sparse success reward,
privileged critic, frozen backbone), both through the Runner as `policyforge train` runs them. After each stage the
policy is evaluated on `--eval-envs` fresh episodes of each instruction set, as `policyforge eval RUN --instructions
SET` does:

    seen                  the training instructions (`train`)
    heldout_paraphrase    seen family/cube/target combinations in a wording never trained on
    heldout_combination   family/cube/target combinations never trained on, in seen wordings

"Overall" is the mean over the three sets (each the same number of episodes). The inference figure is
`vla-latency`'s: one decision (prefix + K = 10 expert steps) with the prefix cached vs recomputed at every step.

    policyforge bench vla-table [--seeds 0 1 2] [--episodes 400] [--bc-steps 3000] [--steps 102400]
                                [--eval-envs 32] [--jobs 1] [--dataset DIR] [--smoke] [--out bench/results/vla]

The sizes default to the configs' (configs/vla-bc.yaml's 400 demonstrations and 3,000 gradient steps,
configs/vla-ppo.yaml's 102,400 env steps). `--dataset DIR` uses demonstrations already collected (journey 5's
`policyforge collect` command writes them) instead of collecting `--episodes` of them again.

Each seed's results are also written to OUT/seed<N>.json; a later invocation with the same OUT and sizes takes them
from there instead of training that seed again (a long table can be split across invocations). `--smoke` shrinks
everything (4 demonstrations of 1 s episodes, 32 × 32 cameras, 10 BC steps, 64 PPO env steps, 4 evaluation
episodes per set, 2 seeds) to check the pipeline in minutes; its figures mean nothing.

The last line is JSON {"bc_success", "rl_success" (overall), "seen_success", "heldout_paraphrase_success",
"heldout_combination_success" (after PPO), "bc_<set>_success", "per_family" {stage: {family: success}} (seen),
"prefix_cache_speedup" (batch 1), "env_steps", "wall_s", "seeds", "demo_success"}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from policyforge.algos import run_files
from policyforge.algos.evaluate import evaluate
from policyforge.algos.runner import EVAL_SEED_OFFSET, RunConfig, Runner, load_run
from policyforge.bench.vla_latency import build, decision_ms
from policyforge.cli import find_recipe
from policyforge.config import load
from policyforge.data.collect import collect
from policyforge.data.dataset import Demonstrations
from policyforge.data.show import episode_outcomes, summarize
from policyforge.io import write_json
from policyforge.sims.tasks.instructions import FAMILIES

SETS = ("train", "heldout_paraphrase", "heldout_combination")
"""Instruction sets every stage is evaluated on (`sims.tasks.instructions`)."""
SET_LABELS = {"train": "seen", "heldout_paraphrase": "held-out paraphrase", "heldout_combination": "held-out combo"}
STAGES = ("bc", "rl")
SMOKE = {
    "seeds": [0, 1],
    "episodes": 4,
    "bc_steps": 10,
    "steps": 64,
    "eval_envs": 4,
    "image_size": 32,
    "episode_seconds": 1.0,
    "calls": 3,
}
"""Sizes of `--smoke`: the whole pipeline in minutes on this CPU, figures meaningless."""


def train(recipe: str, overrides: list[str]) -> tuple[Path, dict[str, Any]]:
    """Train `recipe` (configs/<recipe>.yaml) with `overrides` as `policyforge train` does: its run directory and
    summary."""
    config = load(RunConfig, find_recipe(f"{recipe}.yaml"), overrides)
    lock = run_files.reclaim(config.run_dir, "bench")  # a previous run of this benchmark; refuses anything else
    runner = Runner.start(config, Console(quiet=True), "bench", lock)
    summary = runner.train()
    runner.close()
    return config.run_dir, summary


def evaluate_sets(run_dir: Path, eval_envs: int) -> dict[str, dict[str, float]]:
    """A run's final policy evaluated on each instruction set: {set: {"overall": success, family: success}}."""
    results = {}
    for name in SETS:
        config, policy, env = load_run(run_dir, None, eval_envs, None, {"instructions": name})
        metrics = evaluate(policy, env, config.seed + EVAL_SEED_OFFSET)
        env.close()
        per_family = {f: metrics[f"eval/success/{f}"] for f in FAMILIES if f"eval/success/{f}" in metrics}
        results[name] = {"overall": metrics["eval/success"], **per_family}
    return results


def run_seed(seed: int, dataset: Path, args: argparse.Namespace) -> dict[str, Any]:
    """BC then PPO for one seed, each evaluated on every instruction set; wall times and env steps."""
    common = [
        f"seed={seed}",
        f"out_dir={args.out / 'runs'}",
        f"runner.eval_envs={args.eval_envs}",
        "runner.eval_every_steps=0",
        "runner.video=none",
        "runner.tensorboard=false",
        f"sim.image.width={args.image_size}",
        f"sim.image.height={args.image_size}",
        *[f"sim.task_options.episode_seconds={args.episode_seconds}"] * (args.episode_seconds is not None),
    ]
    bc_overrides = [f"name=vla-bc-s{seed}", f"algo.dataset={dataset}", f"algo.gradient_steps={args.bc_steps}"]
    if args.bc_steps < 250:  # a smoke-sized run: one iteration, a short warm-up
        bc_overrides += [f"algo.steps_per_iteration={args.bc_steps}", f"algo.warmup_steps={args.bc_steps // 2}"]
    bc_dir, bc_summary = train("vla-bc", common + bc_overrides)
    bc = evaluate_sets(bc_dir, args.eval_envs)
    rl_overrides = [f"name=vla-ppo-s{seed}", f"init_policy={bc_dir}", f"runner.total_env_steps={args.steps}"]
    if args.smoke:  # iterations of 4 envs × 2 decisions
        rl_overrides += ["sim.num_envs=4", "algo.rollout_steps=2", "algo.critic_warmup_iterations=1"]
    rl_dir, rl_summary = train("vla-ppo", common + rl_overrides)
    rl = evaluate_sets(rl_dir, args.eval_envs)
    return {
        "bc": bc,
        "rl": rl,
        "bc_wall_s": bc_summary["wall_s"],
        "rl_wall_s": rl_summary["wall_s"],
        "env_steps": rl_summary["env_steps"],
    }


def mean_over_seeds(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """{stage: {set: {"overall" | family: mean success over seeds}}}, with {stage: {"overall": {...}}}: the mean over
    the sets (each set evaluated on the same number of episodes). A family's mean is over the seeds whose evaluation
    drew it (each seed's evaluation draws its own instructions: a small one may miss a family)."""
    means: dict[str, dict[str, dict[str, float]]] = {}
    for stage in STAGES:
        means[stage] = {}
        for name in SETS:
            keys = [k for k in ("overall", *FAMILIES) if any(k in run[stage][name] for run in runs)]
            means[stage][name] = {
                k: statistics.mean(run[stage][name][k] for run in runs if k in run[stage][name]) for k in keys
            }
        keys = set.intersection(*(set(means[stage][name]) for name in SETS))
        means[stage]["overall"] = {k: statistics.mean(means[stage][name][k] for name in SETS) for k in keys}
    return means


def summary_json(means: dict, runs: list[dict], speedup: float, demo_success: float, seeds: list[int]) -> dict:
    """The last line's JSON (module docstring)."""
    result: dict[str, Any] = {
        "bc_success": round(means["bc"]["overall"]["overall"], 3),
        "rl_success": round(means["rl"]["overall"]["overall"], 3),
        "seen_success": round(means["rl"]["train"]["overall"], 3),
        "heldout_paraphrase_success": round(means["rl"]["heldout_paraphrase"]["overall"], 3),
        "heldout_combination_success": round(means["rl"]["heldout_combination"]["overall"], 3),
    }
    result |= {f"bc_{name}_success": round(means["bc"][name]["overall"], 3) for name in SETS}
    result["per_family"] = {
        stage: {f: round(v, 3) for f, v in means[stage]["train"].items() if f != "overall"} for stage in STAGES
    }
    result |= {
        "prefix_cache_speedup": round(speedup, 2),
        "env_steps": runs[0]["env_steps"],
        "wall_s": round(statistics.mean(r["bc_wall_s"] + r["rl_wall_s"] for r in runs), 1),
        "seeds": seeds,
        "demo_success": round(demo_success, 3),
    }
    return result


def print_table(console: Console, means: dict, runs: list[dict], args: argparse.Namespace) -> None:
    table = Table(
        title=f"VLA on arm-instructed: BC ({args.episodes} demos, {args.bc_steps} gradient steps) → PPO "
        f"({args.steps} env steps), seeds {args.seeds}, {args.eval_envs} eval episodes per set (means over seeds)"
    )
    for column in ["stage", "instructions", "overall", *FAMILIES, "worst seed"]:
        table.add_column(column)
    cell = lambda row, key: f"{row[key]:.0%}" if key in row else "-"  # noqa: E731
    for stage in STAGES:
        for name in (*SETS, "overall"):
            row = means[stage][name]
            if name == "overall":
                worst = min(statistics.mean(run[stage][s]["overall"] for s in SETS) for run in runs)
            else:
                worst = min(run[stage][name]["overall"] for run in runs)
            label = SET_LABELS.get(name, "overall (mean of the sets)")
            table.add_row(stage.upper(), label, cell(row, "overall"), *(cell(row, f) for f in FAMILIES), f"{worst:.0%}")
    console.print(table)
    walls = ", ".join(f"BC {r['bc_wall_s']:.0f} s + PPO {r['rl_wall_s']:.0f} s" for r in runs)
    console.print(f"wall time per seed: {walls}; PPO env steps {runs[0]['env_steps']:,}")


def print_seed(console: Console, seed: int, run: dict[str, Any]) -> None:
    console.print(f"seed {seed}: " + "; ".join(
        f"{stage.upper()} " + " ".join(f"{SET_LABELS[s]} {run[stage][s]['overall']:.0%}" for s in SETS)
        for stage in STAGES
    ))  # fmt: skip


def latency(calls: int, batches: tuple[int, ...]) -> dict[str, float]:
    """`vla-latency`'s decision times at `batches` (median ms, one thread): {"cached_b1": ..., ...}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = build()
    ms = {}
    for batch in batches:
        ms |= {f"{k}_b{batch}": v for k, v in decision_ms(policy, batch, max(3, int(calls / batch**0.5))).items()}
    torch.set_num_threads(threads)
    return ms


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    """What a seed's results depend on besides the seed: kept results are reused only where these match."""
    keys = ("episodes", "bc_steps", "steps", "eval_envs", "image_size", "episode_seconds")
    return {key: getattr(args, key) for key in keys} | {"dataset": str(args.dataset)}


def kept(out: Path, seed: int, args: argparse.Namespace) -> dict[str, Any] | None:
    """An earlier invocation's results for this seed (written once both its stages were evaluated) at these sizes."""
    path = out / f"seed{seed}.json"
    run = json.loads(path.read_text()) if path.is_file() else None
    return run if run is not None and run.get("sizes") == sizes(args) else None


def demonstrations(args: argparse.Namespace, console: Console) -> tuple[Path, float]:
    """The dataset every seed learns from (`--dataset`, or `--episodes` collected now) and its success rate."""
    if args.dataset is not None:
        data = Demonstrations(args.dataset)
        args.episodes = data.num_episodes
        rate = summarize(data, episode_outcomes(data))["success_rate"] or 0.0
        console.print(f"{data.num_episodes} demonstrations from {args.dataset} (success {rate:.0%})")
        return args.dataset, rate
    dataset = args.out / "data"
    options: dict[str, Any] = {"instructions": "train"}
    if args.episode_seconds is not None:
        options["episode_seconds"] = args.episode_seconds
    demos = collect(
        "arm-instructed", args.episodes, dataset, num_envs=min(16, args.episodes), action_noise=args.noise,
        hesitation=args.hesitation, cameras=["task", "wrist"], image_size=args.image_size, task_options=options,
        overwrite=True, progress=False,
    )  # fmt: skip
    console.print(f"collected {args.episodes} demonstrations (success {demos['success_rate']:.0%}) → {dataset}")
    return dataset, demos["success_rate"]


def seed_results(args: argparse.Namespace, dataset: Path, console: Console) -> list[dict[str, Any]]:
    """Every seed's results (`run_seed`), in `args.seeds` order: kept ones read back, the others trained now."""
    seeds = args.seeds
    done = {seed: run for seed in seeds if (run := kept(args.out, seed, args)) is not None}
    todo = [seed for seed in seeds if seed not in done]
    if done:
        console.print(f"seeds {sorted(done)}: results kept in {args.out}/seed<N>.json (delete one to rerun it)")
    pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) if args.jobs > 1 else None
    columns = (todo, [dataset] * len(todo), [args] * len(todo))
    for seed, run in zip(todo, (pool.map if pool else map)(run_seed, *columns), strict=True):
        done[seed] = run | {"sizes": sizes(args)}
        write_json(args.out / f"seed{seed}.json", done[seed])  # kept should a later seed fail
        print_seed(console, seed, run)
    for seed in sorted(set(seeds) - set(todo)):
        print_seed(console, seed, done[seed])
    if pool:
        pool.shutdown()
    return [done[seed] for seed in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=400, help="demonstrations (every family)")
    parser.add_argument("--noise", type=float, default=0.3, help="expert action noise")
    parser.add_argument("--hesitation", type=float, default=0.1, help="expert hesitation probability")
    parser.add_argument("--bc-steps", type=int, default=3000, help="BC gradient steps per seed")
    parser.add_argument("--steps", type=int, default=102_400, help="PPO env steps per seed")
    parser.add_argument("--eval-envs", type=int, default=32, help="evaluation episodes per instruction set")
    parser.add_argument("--image-size", type=int, default=64, help="camera images (square, pixels)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds at once (one core each)")
    parser.add_argument("--calls", type=int, default=20, help="timed decisions of the latency figure")
    parser.add_argument("--dataset", type=Path, help="demonstrations already collected (not collected again)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the pipeline, figures meaningless")
    parser.add_argument("--out", type=Path, default=Path("bench/results/vla"))
    args = parser.parse_args()
    args.episode_seconds = None
    if args.smoke:
        vars(args).update(SMOKE)
    console = Console(width=200)
    start = time.perf_counter()
    dataset, demo_success = demonstrations(args, console)
    seeds = args.seeds
    runs = seed_results(args, dataset, console)
    means = mean_over_seeds(runs)
    print_table(console, means, runs, args)
    ms = latency(args.calls, (1,) if args.smoke else (1, 64))
    for batch in (1, 64):
        if f"cached_b{batch}" in ms:
            console.print(f"VLA decision, batch {batch}: prefix cached {ms[f'cached_b{batch}']:.1f} ms, recomputed at "
                          f"each of K=10 steps {ms[f'no_prefix_cache_b{batch}']:.1f} ms")  # fmt: skip
    speedup = ms["no_prefix_cache_b1"] / ms["cached_b1"]
    console.print(f"total {time.perf_counter() - start:.0f} s")
    print(json.dumps(summary_json(means, runs, speedup, demo_success, seeds)))


if __name__ == "__main__":
    main()
