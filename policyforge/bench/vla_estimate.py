"""A trained VLA's estimate of the scene in closed loop: what it follows, and what it is worth to the policy.

A VLA with `policy.estimate_token` acts on its privileged head's estimate of the task's critic state (object
poses, the named cube's place, cube − TCP), learnt from the prefix. This runs the policy in its task and reports:

    follows       at decision steps 0, 20, 40 and 80 (every env's first episode): the estimate's error on the
                  named cube's place, and how far the estimate moves when the envs' proprioception is shuffled
                  between them against when their images and instructions are (cm). An estimate that moves with
                  the state has learnt where the arm is, not where the cube is.
    own / true    success per family when the expert acts on its own estimate, then on the true critic state in
                  its place (the head swapped for the truth): the gap is what the policy's perception costs it.
    demos         with --dataset: the same error on the demonstrations' frames at those steps of their episodes
                  (the last 20 episodes): an error that grows there too is not closed loop's distribution shift.

    policyforge bench vla-estimate RUN [--checkpoint best] [--envs 64] [--seed 1000] [--dataset DIR]

The critic layout is arm-instructed's (ArmInstructed.observe). The last line is JSON {"own": {"success",
"success/<family>"...}, "true": {...}, "follows": [{"step", "error_cm", "state_shuffled_cm",
"images_shuffled_cm"}], "demos": [{"step", "error_cm"}] or null}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from policyforge.algos.evaluate import success_by_group
from policyforge.algos.runner import load_run
from policyforge.bench.vla_probe import Windows
from policyforge.data.dataset import Demonstrations
from policyforge.policies.base import IMAGE_FEATURES_KEY, IMAGE_KEY, Obs
from policyforge.policies.vla import PRIVILEGED_KEY, VLAPolicy
from policyforge.sims.instruction_obs import INSTRUCTION_KEY
from policyforge.sims.vec_env import VecEnv

NAMED_CUBE = slice(-12, -9)
"""The instructed cube's position in arm-instructed's critic observation (ArmInstructed.observe)."""
FOLLOW_STEPS = (0, 20, 40, 80)
"""Env steps (of every env's first episode) at which the estimate is probed."""
DEMO_EPISODES = 20
"""The dataset's last episodes whose frames --dataset probes."""


class TrueState(torch.nn.Module):
    """Stands in for the privileged head: returns the normalised true critic state of the envs deciding now."""

    def __init__(self) -> None:
        super().__init__()
        self.state: torch.Tensor | None = None

    def forward(self, pooled_prefix: torch.Tensor) -> torch.Tensor:
        assert self.state is not None and self.state.shape[0] == pooled_prefix.shape[0]
        return self.state


def centimetres(policy: VLAPolicy, a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean distance (cm) between two normalised estimates' named-cube places, [N, D_c] each."""
    std = torch.sqrt(policy.privileged_normalizer.var + policy.privileged_normalizer.eps).float()
    return 100 * float(((a - b) * std)[:, NAMED_CUBE].norm(dim=1).mean())


@torch.no_grad()
def follows(policy: VLAPolicy, inputs: Obs, critic: torch.Tensor, step: int) -> dict[str, float]:
    """The estimate's named-cube error, and its move with the state or the images + instruction shuffled."""
    estimate = policy._estimate(policy.encode(inputs))
    order = torch.randperm(critic.shape[0], generator=torch.Generator().manual_seed(step))
    by_state = {**inputs, policy.obs_key: inputs[policy.obs_key][order]}
    scene_keys = (IMAGE_KEY, IMAGE_FEATURES_KEY, INSTRUCTION_KEY)
    by_images = {k: v[order] if k in scene_keys else v for k, v in inputs.items()}
    return {
        "step": step,
        "error_cm": centimetres(policy, estimate, policy.privileged_normalizer(critic)),
        "state_shuffled_cm": centimetres(policy, policy._estimate(policy.encode(by_state)), estimate),
        "images_shuffled_cm": centimetres(policy, policy._estimate(policy.encode(by_images)), estimate),
    }


@torch.no_grad()
def on_demonstrations(policy: VLAPolicy, dataset: Path, cameras: list[str]) -> list[dict[str, float]]:
    """The estimate's named-cube error (cm) on the frames at FOLLOW_STEPS of the dataset's last episodes."""
    demos = Demonstrations(dataset)
    episodes = list(range(max(0, demos.num_episodes - DEMO_EPISODES), demos.num_episodes))
    windows = Windows(demos, cameras, episodes, policy.chunk_len)
    if windows.env_states is None:
        raise SystemExit(f"{dataset}: no observation.environment_state to compare the estimate with")
    starts = torch.as_tensor(windows.starts)
    rows = []
    for step in FOLLOW_STEPS:
        pick = starts + step
        pick = pick[pick <= windows.last[starts]]
        if not len(pick):
            continue  # every episode ended before this step
        obs, _ = windows.batch(pick)
        truth = policy.privileged_normalizer(windows.env_states[pick])
        rows.append({"step": step, "error_cm": centimetres(policy, policy._estimate(policy.encode(obs)), truth)})
    return rows


@torch.no_grad()
def closed_loop(
    policy: VLAPolicy, env: VecEnv, seed: int, truth: TrueState | None
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Success (overall and per family) of every env's first episode, all envs deciding together every act_steps;
    with `truth`, the expert reads the true critic state in place of its estimate. Also `follows` at FOLLOW_STEPS."""
    obs, n = env.reset(seed=seed), env.num_envs
    texts, inputs = env.instructions(), policy.input_state(n)
    finished, successes, probed = torch.zeros(n, dtype=torch.bool), torch.zeros(n), []
    step, chunk = 0, None
    while not finished.all():
        now = inputs.push(obs)
        if truth is None and step in FOLLOW_STEPS:
            probed.append(follows(policy, now, obs[PRIVILEGED_KEY], step))
        if step % policy.act_steps == 0:
            if truth is not None:
                truth.state = policy.privileged_normalizer(obs[PRIVILEGED_KEY])
            chunk = policy.act(now)
        assert chunk is not None
        obs, _, _, _, info = env.step(chunk[:, step % policy.act_steps])
        episode = info["episode"]
        inputs.restart(episode["done"])
        first = episode["done"] & ~finished
        successes[first] = episode["success"][first].float()
        finished |= episode["done"]
        step += 1
    per_family = {k.removeprefix("eval/"): v for k, v in success_by_group(successes, texts or []).items()}
    return {"success": float(successes.mean()), **per_family}, probed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1000, help="the envs' reset seed (both policies see the same)")
    parser.add_argument("--dataset", type=Path, help="also probe the estimate on this dataset's frames")
    args = parser.parse_args()
    torch.manual_seed(0)
    config, policy, env = load_run(args.run, args.checkpoint, num_envs=args.envs)
    if not isinstance(policy, VLAPolicy) or not policy.config.estimate_token:
        raise SystemExit(f"{args.run}: vla-estimate reads a vla policy with policy.estimate_token: true")
    own, probed = closed_loop(policy, env, args.seed, None)
    head, truth = policy.privileged_head, TrueState()
    policy.privileged_head = truth
    true, _ = closed_loop(policy, env, args.seed, truth)
    policy.privileged_head = head
    env.close()
    demos = on_demonstrations(policy, args.dataset, list(config.sim.image.cameras)) if args.dataset else None
    console = Console()
    table = Table(title=f"{args.run}: the named cube's estimated place in closed loop ({args.envs} envs)")
    columns = ["env step", "error (cm)", "moves, state shuffled", "moves, images + instruction shuffled"]
    for column in columns + (["error on demonstrations (cm)"] if demos else []):
        table.add_column(column)
    for row in probed:
        cells = [str(row["step"]), *(f"{row[key]:.1f}" for key in list(row)[1:])]
        demo = [f"{d['error_cm']:.1f}" for d in demos or [] if d["step"] == row["step"]]
        table.add_row(*cells, *((demo or ["—"]) if demos else []))
    console.print(table)
    table = Table(title="success: the expert on its own estimate, and on the true state")
    groups = [k for k in own if k != "success"]
    for column in ("estimate", "overall", *(g.removeprefix("success/") for g in groups)):
        table.add_column(column)
    for name, result in (("own", own), ("true", true)):
        table.add_row(name, *(f"{100 * result[k]:.0f}%" for k in ("success", *groups)))
    console.print(table)
    print(json.dumps({"own": own, "true": true, "follows": probed, "demos": demos}))


if __name__ == "__main__":
    main()
