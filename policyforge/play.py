"""Watching a trained policy (`policyforge play RUN`, RL Zoo's `enjoy`): episodes of the run's task, one after
another in one env, acting as evaluation acts (`policyforge.load`), each episode's outcome printed.

Where a display exists (DISPLAY or WAYLAND_DISPLAY set) they play in MuJoCo's interactive viewer
(`mujoco.viewer.launch_passive`, in real time); otherwise, or with `--out`, they are rendered offscreen into one
video (`eval_video.EvalFilm` per episode: each ends on its last frame, labelled with its outcome).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from rich.console import Console

from policyforge.algos.eval_video import EvalFilm
from policyforge.algos.loaded import LoadedPolicy, load
from policyforge.algos.progress import percent
from policyforge.algos.run_config import EVAL_SEED_OFFSET
from policyforge.config import ConfigError
from policyforge.io import write_video

MAX_EPISODES = 1000
"""Most episodes one `play` runs (a video holds every frame in memory until it is written)."""


class ViewerUnavailable(RuntimeError):
    """The interactive viewer could not open a window."""


@dataclasses.dataclass
class Episode:
    """One played episode's outcome."""

    ret: float
    """Return (sum of rewards)."""
    length: int
    """Control steps."""
    success: bool | None
    """Whether it succeeded; None for a task without a success flag."""

    def text(self) -> str:
        outcome = "" if self.success is None else ("success, " if self.success else "failure, ")
        return f"{outcome}return {self.ret:.4g}, {self.length} steps"


def display_available(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a window can open: an X11 (DISPLAY) or Wayland (WAYLAND_DISPLAY) display is set and not empty."""
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def play_video(loaded: LoadedPolicy, episodes: int, out: Path, say: Callable[[str], None]) -> list[Episode]:
    """Play `episodes` episodes in one env of the run's task (seeded as evaluation is), rendered offscreen from the
    run's camera (runner.video_camera) into one MP4 at `out`, the episodes one after another."""
    env = loaded.make_env(1)
    seconds = (env.episode_steps + 1) * env.control_dt  # film every episode to its end
    frames: list[np.ndarray] = []
    played: list[Episode] = []
    try:
        obs = env.reset(seed=loaded.config.seed + EVAL_SEED_OFFSET)
        loaded.reset()
        while len(played) < episodes:
            film = EvalFilm(env, loaded.config.runner.video_camera, tiles=1, seconds=seconds)
            while not film.done:
                obs, _, _, _, info = env.step(loaded.act(obs))
                film.record(info)
            played.append(_finished(info, len(played), say))  # the film ends with the episode
            loaded.reset()
            frames += film.frames
        fps = film.fps
    finally:
        env.close()
    write_video(out, frames, fps=fps)
    height, width = frames[0].shape[:2]
    say(f"video: {out} ({len(frames)} frames, {width}x{height}, {fps:.0f} fps)")
    return played


def play_viewer(loaded: LoadedPolicy, episodes: int, say: Callable[[str], None]) -> list[Episode]:
    """Play `episodes` episodes in MuJoCo's interactive viewer, in real time (closing the window stops early)."""
    import mujoco.viewer

    env = loaded.make_env(1, backend="mujoco")
    model = env.task.model
    view = mujoco.MjData(model)  # the viewer's copy of env 0, refreshed under its lock
    played: list[Episode] = []
    try:
        obs = env.reset(seed=loaded.config.seed + EVAL_SEED_OFFSET)
        loaded.reset()
        _check_window_system()  # MuJoCo's viewer ends the process where GLFW cannot start: ask GLFW first
        with mujoco.viewer.launch_passive(model, view) as viewer:
            while viewer.is_running() and len(played) < episodes:
                start = time.perf_counter()
                obs, _, _, _, info = env.step(loaded.act(obs))
                if bool(info["episode"]["done"][0]):
                    played.append(_finished(info, len(played), say))
                    loaded.reset()
                with viewer.lock():
                    env.batch.get_data(0, view)
                viewer.sync()
                time.sleep(max(0.0, env.control_dt - (time.perf_counter() - start)))
    finally:
        env.close()
    return played


def _check_window_system() -> None:
    """ViewerUnavailable, with GLFW's reason, where GLFW cannot start (a DISPLAY that names no reachable server)."""
    import glfw

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = glfw.init()
    if not started:
        reason = "; ".join(str(warning.message) for warning in caught) or "glfw.init() failed"
        raise ViewerUnavailable(f"the MuJoCo viewer cannot open a window ({reason})")


def _finished(info: dict, index: int, say: Callable[[str], None]) -> Episode:
    """The outcome of env 0's episode that ended at the step of `info`, printed."""
    episode = info["episode"]
    success = bool(episode["success"][0]) if "success" in info else None
    played = Episode(float(episode["return"][0]), int(episode["length"][0]), success)
    say(f"episode {index + 1}: {played.text()}")
    return played


def summary(played: list[Episode]) -> str:
    """The episodes' mean outcome: success rate (tasks with a success flag) and mean return."""
    success = [e.success for e in played if e.success is not None]
    rate = f"success {percent(float(np.mean(success)))}, " if success else ""
    episodes = f"{len(played)} episode" + ("s" if len(played) != 1 else "")
    return f"{episodes}: {rate}mean return {np.mean([e.ret for e in played]):.4g}"


def command(args: argparse.Namespace, console: Console) -> int:
    """`policyforge play RUN [--checkpoint C] [--episodes N] [--out FILE.mp4]`."""
    if not 1 <= args.episodes <= MAX_EPISODES:
        raise ConfigError("--episodes", f"must be in [1, {MAX_EPISODES}], got {args.episodes}")
    run_dir = Path(args.run_dir)
    loaded = load(run_dir, args.checkpoint or "latest")

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    say(f"playing {run_dir} ({loaded.config.sim.task}, checkpoint {args.checkpoint or 'latest'})")
    if args.out is None and display_available():
        if loaded.config.sim.task.startswith("gym:"):
            say("the viewer shows MuJoCo tasks only; rendering a video instead")
        else:
            try:
                say(summary(play_viewer(loaded, args.episodes, say)))
                return 0
            except ViewerUnavailable as err:
                say(f"{err}: rendering a video instead")
    elif args.out is None:
        say("no display (DISPLAY / WAYLAND_DISPLAY unset): rendering the episodes into a video")
    out = Path(args.out) if args.out else run_dir / "videos" / "play.mp4"
    say(summary(play_video(loaded, args.episodes, out, say)))
    return 0
