"""`policyforge collect` on the command line: its flags' translation into `collect.collect` (errors name the flag)
and its summary line. The flags themselves are declared with the other commands' (`cli._parser`)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console

from policyforge.config import ConfigError

COLLECT_FLAGS = {
    "sim.task": "task",
    "episodes": "--episodes",
    "num_envs": "--envs",
    "seed": "--seed",
    "action_noise": "--noise",
    "noise_correlation": "--noise-correlation",
    "hesitation": "--hesitation",
    "cameras": "--cameras",
    "image_size": "--image-size",
    "image_quality": "--image-quality",
    "out": "--out",
    "overwrite": "--overwrite",
    "only_successful": "--only-successful",
    "policy": "--policy",
}
"""collect()'s argument names → the flags that set them, for error messages."""


def command(args: argparse.Namespace, console: Console) -> None:
    """`policyforge collect`: its flags into `collect.collect`, errors naming the flag, a one-line summary."""
    from policyforge.config import apply_overrides
    from policyforge.data.collect import collect

    size = re.fullmatch(r"(\d+)(?:x(\d+))?", args.image_size)
    if not size:
        raise ConfigError(
            "--image-size", f"give SIZE or WIDTHxHEIGHT in pixels, e.g. 96 or 128x96; got {args.image_size!r}"
        )
    width, height = int(size[1]), int(size[2] or size[1])
    out = Path(args.out) if args.out else Path("data") / args.task
    try:
        summary = collect(
            args.task,
            args.episodes,
            out,
            num_envs=args.envs,
            seed=args.seed,
            action_noise=args.noise,
            noise_correlation=args.noise_correlation,
            hesitation=args.hesitation,
            cameras=[c.strip() for c in args.cameras.split(",") if c.strip()],
            image_size=(height, width),
            image_quality=args.image_quality,
            only_successful=args.only_successful,
            task_options=apply_overrides({}, args.options),
            overwrite=args.overwrite,
            console=console,
            policy=args.policy,
        )
    except ConfigError as err:
        raise ConfigError(COLLECT_FLAGS.get(err.path, err.path), err.reason) from None
    console.print(
        f"wrote {summary['episodes']} episodes ({summary['frames']:,} frames, success {summary['success_rate']:.0%}) "
        f"in {summary['seconds']:.1f} s → {out} (LeRobotDataset v3.0, {summary['dataset_episodes']} episodes)"
    )
