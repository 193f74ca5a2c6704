"""Off-policy fine-tuning of behaviour-cloned generative policies (DSRL: SAC in a frozen base's noise; residual
SAC: a bounded per-step residual on the frozen base; each also with the settings that held the start on push,
`dsrl_penalty` and `residual_sac_rlpd`: finetune_table.OFF_POLICY_SETTINGS) against the on-policy rows of the
fine-tuning table, from the same BC starts (bc_table.py's 10-step rectified flow), on the sparse success reward.

Every run goes through finetune_table.py's `run_one` (the same Runner as `policyforge train`, the same seeds, env-step
budget and evaluations). Off-policy methods are judged on sample efficiency: besides the full budget, their success
at `--small-steps` is read off the same runs' evaluation curves (SAC has no schedule tied to the budget, so a run
stopped there would have evaluated the same policy). "Steps to target" is the first evaluation at 90% success or
30 points above the start, whichever is lower (mean over the seeds that got there; null when none did).

    policyforge bench offpolicy-table [--tasks arm-lift-cube arm-push-cube] [--methods dsrl residual_sac]
                                      [--on-policy residual_flow flow_sde] [--seeds 0 1 2] [--steps 153600]
                                      [--small-steps 51200] [--jobs 2] [--set key=value ...]

Prints a table and writes a plot; the last line is JSON {"results": {method: {task: {"before", "after",
"after_small", "steps_to_target", "wall_s"}}}, "best_push_gain", "lift_steps_ratio", "updates_per_step"}.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from policyforge.algos.runner import RunConfig
from policyforge.bench.finetune_table import (
    METHODS,
    OFF_POLICY,
    first_reaching,
    method_settings,
    method_start,
    plot,
    run_all,
)
from policyforge.cli import find_recipe
from policyforge.config import load

TARGET_GAIN = 0.3
"""Points above the start that count as reaching the target when 90% is further."""


def success_at(curve: list[tuple[int, float, float]], steps: int) -> float:
    """Success of the last evaluation at or before `steps` env steps."""
    return [success for at, success, _ in curve if at <= steps][-1]


def summary(runs: list[dict], small_steps: int) -> dict:
    """Means over seeds: before, after (full budget), after_small, steps to target, wall seconds."""
    before = statistics.mean(r["before"] for r in runs)
    target = min(0.9, before + TARGET_GAIN)
    reached = [hit[0] for r in runs if (hit := first_reaching(r["curve"], target)) is not None]
    return {
        "before": round(before, 3),
        "after": round(statistics.mean(r["after"] for r in runs), 3),
        "after_min": round(min(r["after"] for r in runs), 3),
        "after_small": round(statistics.mean(success_at(r["curve"], small_steps) for r in runs), 3),
        "target": round(target, 3),
        "steps_to_target": round(statistics.mean(reached)) if reached else None,
        "seeds_at_target": len(reached),
        "wall_s": round(statistics.mean(r["wall_s"] for r in runs), 1),
    }


def steps_to_90(runs: list[dict]) -> float | None:
    """Mean env steps to 90% over seeds, None unless every seed got there."""
    reached = [first_reaching(r["curve"], 0.9) for r in runs]
    return None if any(r is None for r in reached) else statistics.mean(r[0] for r in reached)


def headline(results: dict[str, dict[str, list[dict]]], summaries: dict, off_policy: list[str]) -> dict:
    """best_push_gain: the largest after − before on arm-push-cube among the off-policy methods;
    lift_steps_ratio: env steps to 90% on arm-lift-cube, the best off-policy method over the best on-policy one."""
    push = summaries.get("arm-push-cube", {})
    gains = [push[m]["after"] - push[m]["before"] for m in off_policy if m in push]
    lift = results.get("arm-lift-cube", {})
    steps = {m: steps_to_90(runs) for m, runs in lift.items()}
    best_off = min((s for m, s in steps.items() if m in off_policy and s is not None), default=None)
    best_on = min((s for m, s in steps.items() if m not in off_policy and s is not None), default=None)
    return {
        "best_push_gain": round(max(gains), 3) if gains else None,
        "lift_steps_ratio": round(best_off / best_on, 3) if best_off and best_on else None,
    }


def updates_per_step(task: str, method: str, overrides: list[str]) -> float:
    """The update-to-data ratio a method's config runs at (gradient steps per transition)."""
    settings = [*method_settings(task, method), *overrides]
    config = load(RunConfig, find_recipe(f"{task}-{method_start(method)[0]}.yaml"), settings)
    return config.algo.updates_per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["arm-lift-cube", "arm-push-cube"])
    parser.add_argument("--methods", nargs="+", default=list(OFF_POLICY), choices=list(OFF_POLICY))
    parser.add_argument("--on-policy", nargs="*", default=["residual_flow", "flow_sde"], choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=153_600, help="env-step budget per run (the on-policy table's)")
    parser.add_argument("--small-steps", type=int, default=51_200, help="the smaller budget, read off the curves")
    parser.add_argument("--eval-every", type=int, default=10_240)
    parser.add_argument("--eval-envs", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one core each; 2 fill this machine)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/offpolicy"))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run")
    args = parser.parse_args()
    console = Console(width=200)
    methods = args.methods + args.on_policy
    results = run_all(methods, args, console)
    summaries = {t: {m: summary(runs, args.small_steps) for m, runs in ms.items()} for t, ms in results.items()}
    table = Table(title=f"Off- and on-policy fine-tuning, sparse reward: {args.steps} env steps ({args.small_steps} "
                  f"for 'small'), seeds {args.seeds}, {args.eval_envs} eval episodes (means over seeds)")  # fmt: skip
    for column in ["task", "method", "kind", "before", f"after {args.small_steps}", f"after {args.steps}",
                   "worst seed", "target", "steps to target", "seeds at target", "wall s"]:  # fmt: skip
        table.add_column(column)
    for task, ms in summaries.items():
        for method, s in ms.items():
            kind = "off-policy" if method in OFF_POLICY else "on-policy"
            small = f"{s['after_small']:.0%}" if method in OFF_POLICY else "-"
            table.add_row(task, method, kind, f"{s['before']:.0%}", small, f"{s['after']:.0%}",
                          f"{s['after_min']:.0%}", f"{s['target']:.0%}", str(s["steps_to_target"] or "-"),
                          f"{s['seeds_at_target']}/{len(args.seeds)}", f"{s['wall_s']:.0f}")  # fmt: skip
    console.print(table)
    plot(results, args.out / "offpolicy.png")
    console.print(f"plot: {args.out / 'offpolicy.png'}")
    keys = ("before", "after", "after_small", "steps_to_target", "wall_s")
    by_method = {m: {t: {k: summaries[t][m][k] for k in keys} for t in summaries if m in summaries[t]} for m in methods}
    updates = {m: updates_per_step(args.tasks[0], m, args.set) for m in args.methods}
    print(json.dumps({"results": by_method, **headline(results, summaries, args.methods), "updates_per_step": updates}))


if __name__ == "__main__":
    main()
