"""Why a behaviour-cloned policy fails, before fine-tuning it: its success against the episode's length and
against Gaussian action noise, with its own RL sampler (`sample`, the chain PPO explores with), and the task's
reward terms at the end of failed against successful episodes.

One episode per env (the first), seeded as `policyforge eval` seeds them; `act` unless said otherwise.

    policyforge bench bc-failures RUN_DIR [--envs 100] [--seconds 6 9 12] [--noise 0.02 0.05 0.1 0.2]
                                  [--initial-noise 1 0] [--reinflow-std LOW HIGH]

A flow policy's sampler is also tried with its chain's start x_0 ~ N(0, s²·I) for each `--initial-noise` s (the
`initial_noise` a fine-tuning config would set) and, with `--reinflow-std`, its ReinFlow noise bounded to [LOW, HIGH]
(`noise_std_range`): which chain explores without losing what `act` does.

Prints one table per question; the last line is JSON {"run", "success": {setting: rate}, "final_terms":
{"failed": {term: mean}, "succeeded": {...}}}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge.algos.runner import EVAL_SEED_OFFSET, load_run
from policyforge.policies.base import Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims import make_env
from policyforge.sims.vec_env import VecEnv


@torch.no_grad()
def first_episodes(env: VecEnv, policy: Policy, seed: int, noise: float = 0.0) -> dict[str, np.ndarray]:
    """Success, success at any step, length [s] and the reward terms at the last step of each env's first
    episode, [N] each; `noise`: std of Gaussian noise added to every executed action (then clipped to ±1).
    Seeded: the same call gives the same episodes."""
    torch.manual_seed(seed)  # the noise and the RL sampler's draws repeat from run to run
    obs, n = env.reset(seed=seed), env.num_envs
    actor, finished = ChunkedActor(policy, n), np.zeros(n, dtype=bool)
    result: dict[str, np.ndarray] = {}
    while not finished.all():
        action = actor(obs)
        if noise:
            action = (action + noise * torch.randn_like(action)).clamp(-1.0, 1.0)
        obs, _, _, _, info = env.step(action)
        episode = info["episode"]
        actor.episodes_ended(episode["done"])
        first = episode["done"].numpy() & ~finished
        values = {
            "success": episode["success"],
            "success_once": episode["success_once"],
            "seconds": episode["length"] * env.control_dt,
            **{f"term/{k}": v for k, v in info["reward_terms"].items()},
        }
        for key, value in values.items():
            result.setdefault(key, np.zeros(n))[first] = value.numpy()[first]
        finished |= first
    return result


def episodes_of_length(config, policy: Policy, envs: int, seconds: float) -> dict[str, np.ndarray]:
    """`first_episodes` of `act` on the run's task with episodes of `seconds`."""
    options = {**config.sim.task_options, "episode_seconds": seconds}
    sim = dataclasses.replace(config.sim, num_envs=envs, task_options=options)
    seed = config.seed + EVAL_SEED_OFFSET
    env = make_env(sim, seed=seed)
    try:
        return first_episodes(env, policy, seed)
    finally:
        env.close()


def sampler_variants(
    env: VecEnv, policy: Policy, seed: int, initial_noises: list[float], reinflow_std: list[float] | None
) -> dict[str, float]:
    """Success of a flow policy's sampler (`policy.act` already sampling) with x_0 ~ N(0, s²·I) for each s, its
    ReinFlow noise bounded to `reinflow_std` if given: {row label: success}."""
    if not (initial_noises or reinflow_std):
        return {}
    if not hasattr(policy.config, "initial_noise"):
        raise SystemExit(f"--initial-noise / --reinflow-std: {type(policy).__name__} has no flow chain")
    chain = ""
    if reinflow_std is not None:
        if policy.noise_net is None:
            raise SystemExit("--reinflow-std: this run's chain is Flow-SDE, not ReinFlow")
        policy.noise_net.low, policy.noise_net.high = reinflow_std
        chain = f", ReinFlow std [{reinflow_std[0]:g}, {reinflow_std[1]:g}]"
    success = {}
    for initial_noise in initial_noises or [policy.config.initial_noise]:
        policy.config = dataclasses.replace(policy.config, initial_noise=initial_noise)
        label = f"sample, x_0 ~ N(0, {initial_noise:g}²){chain}"
        success[label] = float(first_episodes(env, policy, seed)["success"].mean())
    return success


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--envs", type=int, default=100)
    parser.add_argument("--seconds", nargs="+", type=float, default=[6.0, 9.0, 12.0], help="episode lengths")
    parser.add_argument("--noise", nargs="+", type=float, default=[0.02, 0.05, 0.1, 0.2], help="action noise stds")
    parser.add_argument("--initial-noise", nargs="+", type=float, default=[], help="flow chains: x_0 stds to try")
    parser.add_argument("--reinflow-std", nargs=2, type=float, help="flow chains: the ReinFlow noise's [low, high]")
    args = parser.parse_args()
    torch.set_num_threads(1)
    console = Console(width=160)
    config, policy, env = load_run(args.run_dir, num_envs=args.envs)
    seed = config.seed + EVAL_SEED_OFFSET
    success: dict[str, float] = {}
    base = first_episodes(env, policy, seed)
    run_seconds = env.episode_steps * env.control_dt

    lengths = Table(title=f"{args.run_dir}: success against the episode's length ({args.envs} episodes, act)")
    for column in ("episode s", "success at the end", "success at any step", "failures' final terms"):
        lengths.add_column(column)
    for seconds in args.seconds:
        stats = base if abs(seconds - run_seconds) < 1e-9 else episodes_of_length(config, policy, args.envs, seconds)
        failed = stats["success"] == 0
        terms = {k[5:]: round(float(v[failed].mean()), 3) for k, v in stats.items() if k.startswith("term/")}
        success[f"act, {seconds:g} s"] = float(stats["success"].mean())
        lengths.add_row(f"{seconds:g}", f"{stats['success'].mean():.0%}", f"{stats['success_once'].mean():.0%}",
                        str(terms) if failed.any() else "-")  # fmt: skip
    console.print(lengths)

    noisy = Table(title="success against action noise (the run's episode length)")
    noisy.add_column("actions")
    noisy.add_column("success")
    success["act"] = float(base["success"].mean())
    noisy.add_row("act", f"{success['act']:.0%}")
    for std in args.noise:
        success[f"act + N(0, {std:g}²)"] = float(first_episodes(env, policy, seed, std)["success"].mean())
        noisy.add_row(f"act + N(0, {std:g}²)", f"{success[f'act + N(0, {std:g}²)']:.0%}")
    policy.act = lambda obs: policy.sample(obs).action  # the RL sampler stands in for `act` from here on
    success["sample"] = float(first_episodes(env, policy, seed)["success"].mean())
    noisy.add_row("sample (the RL sampler)", f"{success['sample']:.0%}")
    for label, rate in sampler_variants(env, policy, seed, args.initial_noise, args.reinflow_std).items():
        success[label] = rate
        noisy.add_row(label, f"{rate:.0%}")
    env.close()
    console.print(noisy)

    ended = base["success"] == 1
    final_terms = {
        group: {k[5:]: round(float(v[rows].mean()), 3) for k, v in base.items() if k.startswith("term/")}
        for group, rows in (("failed", ~ended), ("succeeded", ended))
        if rows.any()
    }
    console.print(f"reward terms at the last step: {final_terms}")
    print(json.dumps({"run": str(args.run_dir), "success": success, "final_terms": final_terms}))


if __name__ == "__main__":
    main()
