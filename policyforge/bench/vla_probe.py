"""What a trained VLA reads: its flow-matching loss on a dataset's windows with every input intact, then with one
input broken at a time. An input the policy uses raises the loss when it is broken; one it ignores does not.

    intact                  the windows as recorded
    images shuffled         every window given another window's camera images (and each camera alone)
    instruction shuffled    every window given another window's instruction
    object word swapped     each instruction's cube colour replaced by the next one (red → green → blue → red):
                            the same family and wording, another object named

With the privileged auxiliary head (`policy.privileged_aux_weight`), also how well the prefix predicts the dataset's
privileged state (`observation.environment_state`, normalised) at the first frames of each episode, where the arm
has not yet moved towards the named object, against the guess of its mean: what the images and the instruction
alone tell the policy about the scene.

    policyforge bench vla-probe RUN --dataset DIR [--checkpoint best] [--episodes 40] [--windows 512]

The last line is JSON {"loss": {probe: flow loss}, "privileged_start": {"mse", "mean_guess_mse"} or null}.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policyforge.algos.bc import instruction_ids
from policyforge.algos.runner import load_run
from policyforge.data.dataset import Demonstrations
from policyforge.data.layout import ACTION, ENV_STATE, STATE
from policyforge.policies.vla import VLAPolicy
from policyforge.sims.instruction_obs import INSTRUCTION_KEY, tokenizer
from policyforge.sims.tasks.instructions import CUBE_COLOURS

NOISE_DRAWS = 8
"""Flow-matching losses averaged per probe (each over the same noise draws)."""
START_FRAMES = 3
"""Frames from each episode's start on which the privileged state is probed."""


def swap_object_words(text: str) -> str:
    """The instruction with each cube colour replaced by the next one in CUBE_COLOURS."""
    following = {c: CUBE_COLOURS[(i + 1) % len(CUBE_COLOURS)] for i, c in enumerate(CUBE_COLOURS)}
    return re.sub(rf"\b({'|'.join(CUBE_COLOURS)})\b", lambda m: following[m.group(1)], text)


class Windows:
    """Observation windows [B, 1, ...] and action chunks [B, H, A] of some episodes of a dataset."""

    def __init__(self, demos: Demonstrations, cameras: list[str], episodes: list[int], horizon: int):
        bounds = demos.episode_bounds[episodes]
        lengths = bounds[:, 1] - bounds[:, 0]
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.states = torch.as_tensor(demos.column(STATE, episodes), dtype=torch.float32)
        self.actions = torch.as_tensor(demos.column(ACTION, episodes), dtype=torch.float32)
        self.images = torch.as_tensor(np.stack([demos.images(c, episodes) for c in cameras], axis=1))
        frames = torch.as_tensor(np.concatenate([np.arange(a, b) for a, b in bounds]))
        task_index = torch.as_tensor(demos.column("task_index", episodes).astype(np.int64))
        self.ids = instruction_ids(demos)[frames]
        self.swapped_ids = tokenizer()([swap_object_words(t) for t in demos.tasks])[task_index]
        self.env_states = (
            torch.as_tensor(demos.column(ENV_STATE, episodes), dtype=torch.float32)
            if ENV_STATE in demos.info["features"]
            else None
        )
        self.last = torch.as_tensor(np.repeat(self.starts + lengths - 1, lengths))
        self.horizon = horizon

    def batch(self, pick: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        chunk = torch.minimum(pick[:, None] + torch.arange(self.horizon), self.last[pick, None])
        obs = {"policy": self.states[pick][:, None], "image": self.images[pick][:, None]}
        return {**obs, INSTRUCTION_KEY: self.ids[pick]}, self.actions[chunk]


@torch.no_grad()
def flow_loss(policy: VLAPolicy, obs: dict[str, torch.Tensor], actions: torch.Tensor) -> float:
    """The mean flow-matching loss over NOISE_DRAWS fixed noise draws."""
    torch.manual_seed(1)
    return float(np.mean([float(policy.flow_loss(policy.encode(obs), actions)) for _ in range(NOISE_DRAWS)]))


def probes(policy: VLAPolicy, windows: Windows, size: int, cameras: list[str]) -> dict[str, float]:
    pick = torch.randint(len(windows.states), (size,))
    obs, actions = windows.batch(pick)
    other = torch.randperm(size)
    broken = {
        "intact": obs,
        "images shuffled": {**obs, "image": obs["image"][other]},
        "instruction shuffled": {**obs, INSTRUCTION_KEY: obs[INSTRUCTION_KEY][other]},
        "object word swapped": {**obs, INSTRUCTION_KEY: windows.swapped_ids[pick]},
    }
    for view, camera in enumerate(cameras):
        image = obs["image"].clone()
        image[:, :, view] = obs["image"][other][:, :, view]
        broken[f"{camera} camera shuffled"] = {**obs, "image": image}
    return {name: flow_loss(policy, probe, actions) for name, probe in broken.items()}


@torch.no_grad()
def privileged_at_start(policy: VLAPolicy, windows: Windows) -> dict[str, float] | None:
    """Normalised MSE of the privileged head at each episode's first frames, and of the mean guess."""
    if policy.privileged_head is None or windows.env_states is None:
        return None
    pick = torch.as_tensor(np.concatenate([windows.starts + k for k in range(START_FRAMES)]))
    obs, _ = windows.batch(pick)
    target = policy.privileged_normalizer(windows.env_states[pick])
    predicted = policy._estimate(policy.encode(obs))
    return {
        "mse": float((predicted - target).pow(2).mean()),
        "mean_guess_mse": float((target - target.mean(0)).pow(2).mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--checkpoint", default="best")
    parser.add_argument("--episodes", type=int, default=40, help="episodes read, spread over the dataset")
    parser.add_argument("--windows", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config, policy, env = load_run(args.run, args.checkpoint, num_envs=1)
    env.close()
    if not isinstance(policy, VLAPolicy):
        raise SystemExit(f"{args.run} holds a {type(policy).__name__}; vla-probe reads vla policies")
    policy.eval()
    demos = Demonstrations(args.dataset)
    episodes = np.linspace(0, demos.num_episodes - 1, min(args.episodes, demos.num_episodes)).astype(int).tolist()
    cameras = list(config.sim.image.cameras)
    windows = Windows(demos, cameras, episodes, policy.chunk_len)
    losses = probes(policy, windows, args.windows, cameras)
    start = privileged_at_start(policy, windows)
    table = Table(title=f"what {args.run} reads ({args.checkpoint}; {len(episodes)} episodes of {args.dataset})")
    for column in ("probe", "flow loss", "vs intact"):
        table.add_column(column)
    for name, value in losses.items():
        table.add_row(name, f"{value:.4f}", f"{value - losses['intact']:+.4f}")
    console = Console()
    console.print(table)
    if start is not None:
        console.print(
            f"privileged state at the episodes' first {START_FRAMES} frames: MSE {start['mse']:.3f} "
            f"(the mean guess: {start['mean_guess_mse']:.3f})"
        )
    print(json.dumps({"loss": losses, "privileged_start": start}))


if __name__ == "__main__":
    main()
