"""Deterministic evaluation: one episode per evaluation env with `policy.act` (action chunks executed by
`ChunkedActor`), optionally filmed (`eval_video`: each tile ends on its episode's last frame, labelled).

On a task that draws instructions (`env.instructions()`, e.g. arm-instructed) success is also reported per group of
the instruction each env's episode had: per family (`eval/success/lift`, ...) and per instruction set
(`eval/success/train`, `eval/success/heldout_paraphrase`, ...; `sims.tasks.instructions.groups`). The set an
evaluation draws from is the run's `sim.task_options.instructions` (`policyforge eval RUN --instructions SET`)."""

from __future__ import annotations

from pathlib import Path

import torch

from policyforge.algos.eval_video import EvalFilm
from policyforge.io import write_video
from policyforge.policies.base import Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.tasks.instructions import FAMILIES, groups
from policyforge.sims.vec_env import VecEnv

GROUP_ORDER = (*FAMILIES, "train", "heldout_paraphrase", "heldout_combination")
"""Order of the per-group success figures: families, then instruction sets."""


@torch.no_grad()
def evaluate(
    policy: Policy,
    env: VecEnv,
    seed: int,
    video_path: Path | None = None,
    camera: str | None = None,
    video_envs: int = 4,
    video_seconds: float = 10.0,
) -> dict[str, float]:
    """Mean return (and its standard deviation over envs), success rate (only for tasks with a success flag: a
    task without one has no `eval/success`, rather than a 0% it does not mean) and length of the first episode of
    every env (no bias towards short episodes). With `video_path`, films the first `video_envs` envs side by side
    (a 2×2 grid by default) for at most `video_seconds` of simulated time. The policy acts in eval mode (no
    training-time augmentation) and is given back in the mode it came in."""
    training = policy.training
    try:
        return _evaluate(policy.eval(), env, seed, video_path, camera, video_envs, video_seconds)
    finally:
        policy.train(training)


def _evaluate(
    policy: Policy, env: VecEnv, seed: int, video_path: Path | None, camera: str | None, video_envs: int, seconds: float
) -> dict[str, float]:
    obs = env.reset(seed=seed)
    texts = env.instructions()  # each env's first episode's instruction (fixed within the episode), or None
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool)
    defines_success = False
    returns, lengths, successes = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    film = EvalFilm(env, camera, video_envs, seconds) if video_path is not None else None
    term_sums: dict[str, torch.Tensor] = {}
    term_steps = torch.zeros(n)
    actor = ChunkedActor(policy, n)
    while not finished.all():
        obs, _, _, _, info = env.step(actor(obs))
        actor.episodes_ended(info["episode"]["done"])
        if film is not None:
            film.record(info)
        active = (~finished).float()
        for name, value in info["reward_terms"].items():
            term_sums[name] = term_sums.get(name, torch.zeros(n)) + value * active
        term_steps += active
        defines_success |= "success" in info
        episode = info["episode"]
        first = episode["done"] & ~finished
        returns[first] = episode["return"][first]
        lengths[first] = episode["length"][first].float()
        successes[first] = episode["success"][first].float()
        finished |= episode["done"]
    if film is not None and video_path is not None:
        write_video(video_path, film.frames, fps=film.fps)
    per_step = {
        f"eval/terms/{name}": float((total / term_steps.clamp(min=1)).mean()) for name, total in term_sums.items()
    }
    success = {"eval/success": float(successes.mean())} if defines_success else {}
    if defines_success and texts is not None:
        success |= success_by_group(successes, texts)
    return {
        "eval/return": float(returns.mean()),
        "eval/return_std": float(returns.std(unbiased=False)),
        **success,
        "eval/length": float(lengths.mean()),
        **per_step,
    }


def success_by_group(successes: torch.Tensor, texts: list[str]) -> dict[str, float]:
    """`eval/success/<group>`: the mean of `successes` [N] (each env's first episode) over the envs whose
    instruction `texts[i]` is in the group, for every family and instruction set present (GROUP_ORDER)."""
    members: dict[str, list[int]] = {}
    for env_index, text in enumerate(texts):
        for group in groups(text):
            members.setdefault(group, []).append(env_index)
    return {
        f"eval/success/{group}": float(successes[members[group]].float().mean())
        for group in GROUP_ORDER
        if group in members
    }
