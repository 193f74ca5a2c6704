"""A refactor that must change no result and cost no speed, measured side by side: the same seeded runs trained by
the code of an earlier commit (`--before`, checked out into a temporary git worktree) and by this checkout, in
alternating rounds, each in its own process on one torch thread.

For each case the table gives the median PPO (or BC) throughput of both, their ratio (after / before), whether the
trained policies are bit-identical (sha256 of every tensor of the final policy), and which final metrics logged by
both differ (a metric only one side logs is a new figure, not a changed result).

    python -m policyforge.bench.contract_parity --before db4587c [--rounds 3] [--iterations 6]

Configs are written in the layout before tagged policy and algorithm sections (`policy_class` + a section per class,
`algo: bc` + a section per algorithm): the earlier commit reads it natively, this checkout reads it with its upgrade
(the upgrade is part of what is compared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

CHUNK = {"n_obs_steps": 2, "horizon": 8, "act_steps": 4}
FLOW = {"chunk": CHUNK, "steps": 4, "denoiser": {"kind": "mlp", "hidden": [256, 256, 256]}}
DIFFUSION = {"chunk": CHUNK, "inference_steps": 10, "denoiser": {"kind": "mlp", "hidden": [256, 256, 256]}}
LIFT = {"task": "arm-lift-cube", "num_envs": 32, "task_options": {"control_mode": "ee_delta_topdown"}}
CASES: dict[str, dict] = {
    "ppo flow (ReinFlow) arm-lift-cube": {
        "sim": LIFT, "policy_class": "flow", "flow": {**FLOW, "variant": "shortcut"},
        "ppo": {"rollout_steps": 16, "entropy_coef": 0.001, "ratio": "per_step"},
    },
    "ppo gaussian quadruped-walk": {
        "sim": {"task": "quadruped-walk", "num_envs": 256}, "policy": {"hidden": [256, 128], "init_std": 0.5},
        "ppo": {"rollout_steps": 24, "epochs": 5, "minibatches": 4},
    },
    "ppo diffusion (DPPO, trainable_steps 5) arm-lift-cube": {
        "sim": LIFT, "policy_class": "diffusion", "diffusion": DIFFUSION,
        "ppo": {"rollout_steps": 16, "trainable_steps": 5, "ratio": "per_step", "denoising_discount": 0.99},
    },
    "ppo residual (per step, diffusion base) arm-lift-cube": {
        "sim": {**LIFT, "num_envs": 64}, "policy_class": "residual", "diffusion": DIFFUSION,
        "residual": {"base_class": "diffusion", "per_step": True, "scale": 0.5, "init_std": 0.1},
        "ppo": {"rollout_steps": 64}, "init_policy": "{base}",
    },
    "bc flow arm-lift-cube": {
        "sim": {**LIFT, "num_envs": 1}, "algo": "bc", "policy_class": "flow", "flow": FLOW,
        "bc": {"dataset": "{dataset}", "steps_per_iteration": 50, "batch_size": 256},
    },
}  # fmt: skip
"""Each case's run config (old layout); `{base}` is a diffusion run trained first by the same tree, `{dataset}`
demonstrations recorded once by this checkout (`policyforge collect`)."""
BASE = {"sim": LIFT, "policy_class": "diffusion", "diffusion": DIFFUSION, "ppo": {"rollout_steps": 2}}

RUN = """
import hashlib, json, sys, warnings
import numpy as np
from rich.console import Console
from policyforge.algos.runner import RunConfig, Runner
from policyforge.config import from_dict
warnings.simplefilter("ignore")
runner = Runner.start(from_dict(RunConfig, json.loads(sys.argv[1])), Console(quiet=True))
summary = runner.train()
digest = hashlib.sha256()
for name, tensor in sorted(runner.algo.policy.state_dict().items()):
    digest.update(name.encode()); digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
lines = [json.loads(line) for line in (runner.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
sps = [line["perf/sps"] for line in lines if "perf/sps" in line][1:]  # the first iteration warms up
last = {k: v for k, v in lines[-1].items() if not k.startswith("perf/") and not k.startswith("time")}
runner.close()
print(json.dumps({"sha": digest.hexdigest(), "sps": float(np.median(sps)), "last": last}))
"""


def run(tree: Path, settings: dict, out: Path, name: str) -> dict:
    """Train `settings` with the code of `tree` in a fresh process; its policy hash, median steps/s, final metrics."""
    config = {"name": name, "out_dir": str(out), "seed": 0, **settings}
    command = [sys.executable, "-c", RUN, json.dumps(config)]
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sized(settings: dict, iterations: int) -> dict:
    """`settings` trained for `iterations` PPO iterations, without evaluation, videos or TensorBoard."""
    if settings.get("algo") == "bc":
        runner = {"eval_envs": 1, "video": "none", "tensorboard": False, "eval_every_steps": 0}
        return {**settings, "bc": {**settings["bc"], "gradient_steps": 50 * iterations}, "runner": runner}
    sim, ppo = settings["sim"], settings.get("ppo", {})
    act_steps = CHUNK["act_steps"] if settings.get("policy_class") in ("flow", "diffusion") else 1
    steps = iterations * sim["num_envs"] * ppo.get("rollout_steps", 24) * act_steps
    runner = {"total_env_steps": steps, "eval_envs": 1, "video": "none", "tensorboard": False,
              "checkpoint_every": 1000, "eval_every_steps": 0}  # fmt: skip
    return {**settings, "runner": runner}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the earlier commit (e.g. the last one before the refactor)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating before/after rounds per case")
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    after = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before"
        subprocess.run(["git", "-C", str(after), "worktree", "add", "--detach", str(before), args.before], check=True,
                       capture_output=True)  # fmt: skip
        try:
            rows = compare(before, after, Path(scratch) / "runs", args)
        finally:
            subprocess.run(["git", "-C", str(after), "worktree", "remove", "--force", str(before)], check=False)
    table = Table(title=f"before = {args.before}, after = this checkout; median steps/s of {args.rounds} rounds")
    columns = ("case", "before steps/s", "after steps/s", "after / before", "same policy", "final metrics that differ")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)


def compare(before: Path, after: Path, runs: Path, args: argparse.Namespace) -> list[tuple[str, ...]]:
    trees = {"before": before, "after": after}
    bases = {side: None for side in trees}
    rows = []
    for number, case in enumerate(args.cases):
        settings = sized(CASES[case], args.iterations)
        if settings.get("bc", {}).get("dataset") == "{dataset}":
            dataset = runs / "dataset"
            if not dataset.exists():
                collect = [
                    "collect",
                    "arm-lift-cube",
                    "control_mode=ee_delta_topdown",
                    "--episodes",
                    "8",
                    "--envs",
                    "8",
                    "--out",
                    str(dataset),
                ]
                subprocess.run([sys.executable, "-m", "policyforge.cli", *collect], cwd=after, check=True,
                               capture_output=True)  # fmt: skip
            settings = {**settings, "bc": {**settings["bc"], "dataset": str(dataset)}}
        if "init_policy" in settings:
            for side, tree in trees.items():
                if bases[side] is None:
                    run(tree, sized(BASE, 1), runs / side, "base")
                    bases[side] = str(runs / side / "base")
        results: dict[str, list[dict]] = {"before": [], "after": []}
        for round_ in range(args.rounds):
            for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                filled = {**settings, "init_policy": bases[side]} if "init_policy" in settings else settings
                results[side].append(run(trees[side], filled, runs / side, f"case{number}-{round_}"))
        sps = {side: statistics.median(r["sps"] for r in results[side]) for side in trees}
        pairs = list(zip(*results.values(), strict=True))
        same_policy = all(b["sha"] == a["sha"] for b, a in pairs)
        differing = sorted({key for b, a in pairs for key in _differing_metrics(b["last"], a["last"])})
        rows.append((case, f"{sps['before']:,.0f}", f"{sps['after']:,.0f}", f"{sps['after'] / sps['before']:.3f}",
                     "yes" if same_policy else "NO", ", ".join(differing) or "none"))  # fmt: skip
        print(json.dumps({"case": case, "sps": sps, "same_policy": same_policy, "differing": differing}), flush=True)
    return rows


def _differing_metrics(before: dict, after: dict) -> list[str]:
    """The final metrics both sides log whose values differ (a metric only one side logs is a new figure, not a
    changed result)."""
    return [key for key in before.keys() & after.keys() if before[key] != after[key]]


if __name__ == "__main__":
    main()
