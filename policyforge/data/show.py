"""Looking into a dataset (`policyforge data show DATASET`, LeRobot's `lerobot-dataset-viz`): what it holds and how
its episodes went, as tables, and a video of one episode from its camera images.

    summarize(data)           episodes, frames, fps, features and shapes, cameras, success rate
    episode_outcomes(data)    per episode: length, return, success (when the dataset records them)
    episode_video(data, k)    episode k's camera images side by side, its last frame labelled and held

A dataset without camera images cannot be filmed: it stores the policy's observation of each step, not the
simulator state an episode started from, so its episodes cannot be replayed in the simulator either; record
images with `policyforge collect TASK --cameras front --image-size 128`.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from policyforge.algos.eval_video import HOLD_SECONDS, OUTCOME_COLOURS, draw_label
from policyforge.algos.progress import percent
from policyforge.config import ConfigError
from policyforge.data.dataset import Demonstrations
from policyforge.io import write_video

SHOWN_EPISODES = 50
"""Rows of the per-episode table before it is cut short (`--episode K` shows any one)."""
REWARD, SUCCESS = "next.reward", "next.success"


@dataclasses.dataclass
class EpisodeOutcome:
    """How one episode went, as the dataset records it."""

    index: int
    """episode_index."""
    length: int
    """Frames."""
    ret: float | None
    """Sum of its rewards (None: the dataset has no `next.reward`)."""
    success: bool | None
    """Whether its last frame is flagged successful, as evaluation and `collect` count success (None: the dataset
    has no `next.success`)."""
    first_success: int | None
    """The first frame (within the episode) flagged successful, if any."""


def episode_outcomes(data: Demonstrations) -> list[EpisodeOutcome]:
    """Every committed episode's length, return and success (from `next.reward` / `next.success` when present)."""
    features = data.info["features"]
    rewards = data.column(REWARD) if REWARD in features else None
    successes = data.column(SUCCESS).astype(bool) if SUCCESS in features else None
    outcomes = []
    for index, (start, stop) in enumerate(data.episode_bounds.tolist()):
        flags = successes[start:stop] if successes is not None else None
        hit = np.flatnonzero(flags) if flags is not None else np.zeros(0, np.int64)
        outcomes.append(
            EpisodeOutcome(
                index=index,
                length=stop - start,
                ret=float(rewards[start:stop].sum()) if rewards is not None else None,
                success=bool(flags[-1]) if flags is not None and len(flags) else None,
                first_success=int(hit[0]) if hit.size else None,
            )
        )
    return outcomes


def summarize(data: Demonstrations, outcomes: list[EpisodeOutcome]) -> dict[str, Any]:
    """The dataset at a glance: counts, rate, duration, cameras, the task and how it was recorded."""
    recorded = [o.success for o in outcomes if o.success is not None]
    facts = data.info.get("policyforge", {})
    return {
        "episodes": data.num_episodes,
        "frames": data.num_frames,
        "fps": data.fps,
        "duration_s": data.num_frames / data.fps,
        "success_rate": float(np.mean(recorded)) if recorded else None,
        "cameras": data.cameras,
        "task": facts.get("task") or data.info.get("robot_type"),
        "instructions": data.tasks,
        "recorded_by": facts.get("expert"),
    }


def _instructions(instructions: list[str], shown: int = 4) -> str:
    """The dataset's instructions, the first `shown` of many and their count (a multi-task dataset has dozens)."""
    if len(instructions) <= shown:
        return "; ".join(instructions) or "-"
    return f"{len(instructions)} distinct: " + "; ".join(instructions[:shown]) + "; …"


def feature_table(data: Demonstrations) -> Table:
    table = Table(title="features")
    for column in ("feature", "dtype", "shape"):
        table.add_column(column)
    for name, spec in data.info["features"].items():
        table.add_row(name, spec["dtype"], "×".join(str(n) for n in spec["shape"]))
    return table


def summary_table(data: Demonstrations, summary: dict[str, Any]) -> Table:
    table = Table(title=f"dataset {data.root}")
    table.add_column("")
    table.add_column("value", overflow="fold")
    rate = summary["success_rate"]
    cameras = [f"{camera} ({_image_size(data, camera)})" for camera in summary["cameras"]]
    rows = {
        "task": str(summary["task"] or "-"),
        "instructions": _instructions(summary["instructions"]),
        "episodes": f"{summary['episodes']:,}",
        "frames": f"{summary['frames']:,} ({summary['duration_s']:.1f} s at {summary['fps']} fps)",
        "success": percent(rate) if rate is not None else "- (not recorded)",
        "cameras": ", ".join(cameras) or "none (no images: collect with --cameras front --image-size 128)",
    }
    if summary["recorded_by"]:
        rows["recorded by"] = ", ".join(f"{k} {v}" for k, v in summary["recorded_by"].items())
    for key, value in rows.items():
        table.add_row(key, value)
    return table


def episodes_table(outcomes: list[EpisodeOutcome], fps: int, limit: int = SHOWN_EPISODES) -> Table:
    shown = outcomes[:limit]
    cut = f" (the first {limit} of {len(outcomes)}; --episode K shows any)" if len(outcomes) > limit else ""
    table = Table(title="episodes" + cut)
    for column in ("episode", "frames", "seconds", "return", "success", "first success at"):
        table.add_column(column, justify="right")
    for o in shown:
        success = "-" if o.success is None else "yes" if o.success else "no"
        first = f"frame {o.first_success}" if o.first_success is not None else "-"
        ret = f"{o.ret:.4g}" if o.ret is not None else "-"
        table.add_row(str(o.index), str(o.length), f"{o.length / fps:.1f}", ret, success, first)
    return table


def episode_video(data: Demonstrations, episode: int, out: Path, outcome: EpisodeOutcome) -> tuple[Path, tuple]:
    """Write episode `episode`'s camera images (every camera, side by side) to `out` at the dataset's fps, its last
    frame labelled with the outcome and held; returns (path, frames shape). ConfigError on `--video` for a dataset
    without images."""
    if not data.cameras:
        raise ConfigError(
            "--video",
            f"{data.root} has no camera images, and it cannot be replayed in the simulator either (it stores the "
            "policy's observations, not the simulator state each episode started from): record a dataset with "
            "images, e.g. `policyforge collect TASK --episodes N --cameras front --image-size 128`",
        )
    clips = [data.images(camera, [episode]) for camera in data.cameras]
    height = max(clip.shape[1] for clip in clips)
    padded = [np.pad(clip, ((0, 0), (0, height - clip.shape[1]), (0, 0), (0, 0))) for clip in clips]
    frames = np.concatenate(padded, axis=2)  # [T, H, sum W, 3]
    if outcome.success is not None:
        kind = "success" if outcome.success else "failure"
        frames[-1] = draw_label(frames[-1], kind, OUTCOME_COLOURS[kind])
    held = np.repeat(frames[-1:], round(HOLD_SECONDS * data.fps), axis=0)
    video = np.concatenate([frames, held])
    write_video(out, video, fps=data.fps)
    return out, video.shape


def _image_size(data: Demonstrations, camera: str) -> str:
    spec = data.info["features"].get(camera) or data.info["features"].get(f"observation.images.{camera}")
    height, width = spec["shape"][:2]
    return f"{width}x{height}"


def command(args: argparse.Namespace, console: Console) -> int:
    """`policyforge data show DATASET [--episode K] [--video FILE]`."""
    data = Demonstrations(args.dataset)
    outcomes = episode_outcomes(data)
    if args.episode is not None and not 0 <= args.episode < data.num_episodes:
        raise ConfigError("--episode", f"{data.root} holds episodes 0..{data.num_episodes - 1}, got {args.episode}")
    console.print(summary_table(data, summarize(data, outcomes)))
    console.print(feature_table(data))
    episode = args.episode if args.episode is not None else (0 if args.video else None)
    if episode is None:
        console.print(episodes_table(outcomes, data.fps))
        return 0
    console.print(episodes_table(outcomes[episode : episode + 1], data.fps))
    if args.video:
        out, shape = episode_video(data, episode, Path(args.video), outcomes[episode])
        frames, height, width = shape[:3]
        console.print(
            f"video: {out} (episode {episode}, {frames} frames, {width}x{height}, {data.fps} fps)", soft_wrap=True
        )
    return 0
