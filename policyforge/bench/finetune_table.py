"""RL fine-tuning of behaviour-cloned generative policies on the sparse success reward, against Gaussian PPO
from scratch.

Each method is its config in configs/ (`<task>-dppo.yaml`, `-reinflow`, `-flow-sde`, `-residual-diffusion`,
`-residual-flow`, `-ppo-scratch`), run through the same Runner as `policyforge train` with the same env-step
budget and seeds. The fine-tuning methods start from the BC checkpoints of bc_table.py (DDIM-10 diffusion
for DPPO, 10-step rectified flow for Flow-SDE, 4-step shortcut model for ReinFlow, residuals on the first two;
trained here first when missing). Success is measured on `--eval-envs` deterministic episodes before training,
every `--eval-every` env steps and at the end; "steps to 90%" is the first evaluation at ≥ 90% (mean over seeds
of the seeds that got there; "-" when none did). Wall time is training time, evaluations excluded; with
`--jobs 2` two runs share the machine's two cores, every method alike.

    policyforge bench finetune-table [--tasks arm-lift-cube] [--seeds 0 1 2] [--steps 153600]
                                     [--methods dppo reinflow ...] [--out bench/results/finetune]
                                   [--jobs 2] [--set key=value ...]

Prints a table and writes a plot; the last line is JSON {"task", "results": {method: {"before", "after",
"wall_s", "steps_to_90"}}} for arm-lift-cube (or the first task).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from policyforge.algos import run_files
from policyforge.algos.runner import RunConfig, Runner
from policyforge.cli import find_recipe
from policyforge.config import load

METHODS = {  # key: (config suffix, bc_table.py run it starts from)
    "dppo": ("dppo", "diffusion_ddim10"),
    "reinflow": ("reinflow", "shortcut_4"),
    "flow_sde": ("flow-sde", "flow_rf10"),
    "residual_diffusion": ("residual-diffusion", "diffusion_ddim10"),
    "residual_flow": ("residual-flow", "flow_rf10"),
    "gaussian_scratch": ("ppo-scratch", None),
}
OFF_POLICY = {  # the off-policy methods (offpolicy_table.py): key: (config suffix, BC run, the setting naming it)
    "dsrl": ("dsrl", "flow_rf10", "sim.steer.base"),
    "dsrl_penalty": ("dsrl", "flow_rf10", "sim.steer.base"),
    "residual_sac": ("residual-sac", "flow_rf10", "init_policy"),
    "residual_sac_rlpd": ("residual-sac", "flow_rf10", "init_policy"),
}
OFF_POLICY_SETTINGS = {  # beyond the recipe ({task}: the task's name); BENCHMARKS.md "Off-policy fine-tuning"
    "dsrl_penalty": ("sim.steer.noise_bound=1.0", "algo.actor_penalty=0.5"),
    "residual_sac_rlpd": ("algo.demonstrations=bench/results/bc/data/{task}", "algo.actor_penalty=0.5",
                          "algo.actor_lr=1e-4", "algo.n_step=5", "algo.critic_warmup_updates=2000"),
}  # fmt: skip
"""The settings that make a variant of a recipe: RLPD's demonstrations (bc_table.py's), penalties, n-step."""


def method_start(method: str) -> tuple[str, str | None, str]:
    """A method's config suffix, the bc_table.py run it starts from (None: from scratch) and the setting that
    names that run."""
    if method in OFF_POLICY:
        return OFF_POLICY[method]
    suffix, bc_key = METHODS[method]
    return suffix, bc_key, "init_policy"


def method_settings(task: str, method: str) -> list[str]:
    """The overrides that make `method` a variant of its recipe on `task`."""
    return [setting.format(task=task) for setting in OFF_POLICY_SETTINGS.get(method, ())]


BC_RUNS = Path("bench/results/bc/runs")
TIME_PARTS = ("sim", "act", "update")
"""Where training time goes (PPO's perf/*_s): env.step, acting (sampling chains, values), the PPO update."""


def ensure_bc_runs(task: str, methods: list[str]) -> None:
    """Train the BC starting points with bc_table.py if they are not there yet."""
    missing = sorted({method_start(m)[1] for m in methods if method_start(m)[1]} - {p.name[len(task) + 1 :] for p in
                     BC_RUNS.glob(f"{task}-*") if (p / "checkpoints" / "latest.pt").exists()})  # fmt: skip
    if missing:
        command = [
            sys.executable,
            "-m",
            "policyforge.bench.bc_table",
            "--tasks",
            task,
            "--keys",
            *missing,
            "--image-task",
            "",
        ]
        subprocess.run(command, check=True)


def run_one(task: str, method: str, seed: int, args) -> dict:
    suffix, bc_key, start_setting = method_start(method)
    overrides = [
        f"seed={seed}",
        f"name={task}-{method}-s{seed}",
        f"out_dir={args.out / 'runs'}",
        f"runner.total_env_steps={args.steps}",
        f"runner.eval_every_steps={args.eval_every}",
        f"runner.eval_envs={args.eval_envs}",
        "runner.video=none",
        "runner.tensorboard=false",
    ]
    if bc_key:
        overrides.append(f"{start_setting}={BC_RUNS / f'{task}-{bc_key}'}")
    overrides += method_settings(task, method)
    overrides += args.set  # last, so they win
    config = load(RunConfig, find_recipe(f"{task}-{suffix}.yaml"), overrides)
    lock = run_files.reclaim(config.run_dir, "bench")  # a previous run of this benchmark; refuses anything else
    runner = Runner.start(config, Console(quiet=True), "bench", lock)
    before = runner.evaluate()["eval/success"]
    summary = runner.train()
    runner.close()
    evals = [json.loads(line) for line in (config.run_dir / "metrics.jsonl").read_text().splitlines()]
    later = [m for m in evals if "eval/success" in m and m["env_steps"] > 0]  # a fine-tuning run's step 0 is `before`
    curve = [(0, before, 0.0)] + [(m["env_steps"], m["eval/success"], m["perf/wall_s"]) for m in later]
    split = {part: sum(m.get(f"perf/{part}_s", 0.0) for m in evals) for part in TIME_PARTS}
    return {"before": before, "after": summary["eval/success"], "wall_s": summary["wall_s"], "curve": curve, **split}


def run_all(methods: list[str], args, console: Console) -> dict[str, dict[str, list[dict]]]:
    """Every task × method × seed of `args` (BC starts trained first), `args.jobs` at a time, each printed as it
    ends: {task: {method: [run per seed]}}."""
    for task in args.tasks:
        ensure_bc_runs(task, methods)
    jobs = [(task, method, seed) for task in args.tasks for method in methods for seed in args.seeds]
    columns = [[job[i] for job in jobs] for i in range(3)] + [[args] * len(jobs)]
    pool = ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) if args.jobs > 1 else None
    results: dict[str, dict[str, list[dict]]] = {}
    for (task, method, seed), run in zip(jobs, (pool.map if pool else map)(run_one, *columns), strict=True):
        results.setdefault(task, {}).setdefault(method, []).append(run)
        console.print(f"{task} {method:20s} seed {seed}: {run['before']:.0%} -> {run['after']:.0%}  "
                      f"({run['wall_s']:.0f} s)  curve {[f'{s:.0%}' for _, s, _ in run['curve']]}")  # fmt: skip
    if pool:
        pool.shutdown()
    return results


def first_reaching(curve: list[tuple[int, float, float]], level: float) -> tuple[int, float] | None:
    """(env steps, wall seconds) of the first evaluation at or above `level`."""
    return next(((steps, wall) for steps, success, wall in curve if success >= level - 1e-6), None)


def aggregate(runs: list[dict]) -> dict:
    reached = [first_reaching(r["curve"], 0.9) for r in runs]
    reached = [r for r in reached if r is not None]
    return {
        "before": round(statistics.mean(r["before"] for r in runs), 3),
        "after": round(statistics.mean(r["after"] for r in runs), 3),
        "after_min": round(min(r["after"] for r in runs), 3),
        "wall_s": round(statistics.mean(r["wall_s"] for r in runs), 1),
        "steps_to_90": round(statistics.mean(s for s, _ in reached)) if reached else None,
        "wall_to_90": round(statistics.mean(w for _, w in reached), 1) if reached else None,
        "seeds_at_90": len(reached),
        **{f"{part}_s": round(statistics.mean(r[part] for r in runs), 1) for part in TIME_PARTS},
    }


def wall_to_common_success(runs_a: list[dict], runs_b: list[dict]) -> tuple[float, float, float] | None:
    """Mean wall seconds for A and B to first reach the highest success both reached in every seed."""
    level = min(max(s for _, s, _ in r["curve"]) for r in runs_a + runs_b)
    times = [[first_reaching(r["curve"], level)[1] for r in runs] for runs in (runs_a, runs_b)]
    return level, statistics.mean(times[0]), statistics.mean(times[1])


def plot(results: dict[str, dict[str, list[dict]]], path: Path) -> None:
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (task, methods) in zip(axes[0], results.items(), strict=True):
        for method, runs in methods.items():
            steps = [s for s, _, _ in runs[0]["curve"]]
            mean = [statistics.mean(r["curve"][i][1] for r in runs) for i in range(len(steps))]
            ax.plot(steps, mean, marker="o", label=method)
        ax.set(title=f"{task} (sparse reward)", xlabel="env steps", ylabel="eval success", ylim=(-0.02, 1.02))
        ax.axhline(0.9, color="grey", linestyle=":")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["arm-lift-cube"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=153_600, help="env-step budget per run (75 iterations)")
    parser.add_argument("--eval-every", type=int, default=20_480)
    parser.add_argument("--eval-envs", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one core each; 2 fill this machine)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/finetune"))
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides applied to every run (e.g. algo.actor_lr=1e-3)",
    )
    args = parser.parse_args()
    console = Console(width=200)
    results = run_all(args.methods, args, console)
    summaries = {task: {m: aggregate(runs) for m, runs in methods.items()} for task, methods in results.items()}
    table = Table(title=f"RL fine-tuning on the sparse success reward: {args.steps} env steps, seeds {args.seeds}, "
                  f"{args.eval_envs} eval episodes (means over seeds)")  # fmt: skip
    for column in ["task", "method", "before", "after", "worst seed", "wall s", "steps to 90%", "wall s to 90%",
                   "seeds at 90%"]:  # fmt: skip
        table.add_column(column)
    dash = lambda v: "-" if v is None else str(v)  # noqa: E731
    for task, methods in summaries.items():
        for method, s in methods.items():
            table.add_row(task, method, f"{s['before']:.0%}", f"{s['after']:.0%}", f"{s['after_min']:.0%}",
                          f"{s['wall_s']:.0f}", dash(s["steps_to_90"]), dash(s["wall_to_90"]),
                          f"{s['seeds_at_90']}/{len(args.seeds)}")  # fmt: skip
    console.print(table)
    split = Table(title="Where the training time goes (seconds per run, means over seeds)")
    for column in ["task", "method", "simulation", "acting", "PPO update", "total"]:
        split.add_column(column)
    for task, methods in summaries.items():
        for method, s in methods.items():
            parts = [s[f"{part}_s"] for part in TIME_PARTS]
            split.add_row(task, method, *(f"{v:.0f}" for v in parts), f"{sum(parts):.0f}")
    console.print(split)
    for task, methods in results.items():
        if "reinflow" in methods and "dppo" in methods:
            level, reinflow_s, dppo_s = wall_to_common_success(methods["reinflow"], methods["dppo"])
            ratio = f"ratio {reinflow_s / dppo_s:.2f}" if dppo_s > 0 else "no ratio: DPPO started there"
            console.print(f"{task}: wall time to {level:.0%} success (reached by every seed of both): ReinFlow "
                          f"{reinflow_s:.0f} s, DPPO {dppo_s:.0f} s, {ratio}")  # fmt: skip
    plot(results, args.out / "finetune.png")
    console.print(f"plot: {args.out / 'finetune.png'}")
    main_task = "arm-lift-cube" if "arm-lift-cube" in summaries else next(iter(summaries))
    keys = ("before", "after", "wall_s", "steps_to_90")
    print(json.dumps({"task": main_task, "results": {m: {k: s[k] for k in keys} for m, s in
                                                      summaries[main_task].items()}}))  # fmt: skip


if __name__ == "__main__":
    main()
