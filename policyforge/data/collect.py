"""Recording scripted-expert demonstrations (`policyforge collect`) into a LeRobotDataset v3.0 directory.

The task's expert drives a native-MuJoCo VecEnv; every env's episode is buffered and, when it ends, written by
`DemoWriter` (one atomic commit per episode), until exactly `episodes` are written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from policyforge.config import ConfigError, check_seed
from policyforge.data import integrity, layout
from policyforge.data.dataset import DatasetError, Demonstrations, DemoWriter
from policyforge.data.experts import EXPERTS, ArmExpert, PolicyExpert
from policyforge.sims import ImageConfig, SimConfig, make_env
from policyforge.sims.config import MAX_IMAGE_SIZE
from policyforge.sims.make import make_task
from policyforge.sims.render import camera_names
from policyforge.sims.vec_env import VecEnv

INSTRUCTIONS = {
    "arm-reach": "move the gripper to the green marker",
    "arm-push-cube": "push the cube to the green marker",
    "arm-lift-cube": "pick up the cube and lift it",
}
"""The language instruction stored with each task's episodes (LeRobot's `task`), for tasks with one fixed
instruction; tasks that draw an instruction per episode (`VecEnv.instructions()`) store each episode's own."""
MAX_ATTEMPTS_PER_EPISODE = 20
"""With `only_successful`, give up after this many finished episodes per requested one."""
MAX_EPISODES = 1_000_000
"""Episodes one collect may write: each is a file (and one per camera), and a million files is the layout's
1000 chunks of 1000."""
MAX_COLLECT_ENVS = 4096
"""Parallel environments of one collect, below sims.config.MAX_ENVS: collect steps native MuJoCo (one MjData
per env) and renders every env's cameras, so more is only memory."""


def collect(
    task: str,
    episodes: int,
    out: str | Path,
    num_envs: int = 16,
    seed: int = 0,
    action_noise: float = 0.0,
    hesitation: float = 0.0,
    cameras: Sequence[str] = (),
    image_size: int | tuple[int, int] = 96,
    image_quality: str = "fast",
    only_successful: bool = False,
    task_options: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    console: Console | None = None,
    policy: str | Path | None = None,
    noise_correlation: float = 0.0,
) -> dict[str, Any]:
    """Record `episodes` expert episodes of `task` into `out`; returns a summary (episodes, frames, success rate,
    seconds, ...).

    An existing dataset in `out` is appended to if it was recorded with the same task, options, expert settings
    and cameras (else a `ConfigError`); `overwrite` deletes it first. Appending continues from env seed
    `seed + episodes already there`, so appended sessions never replay earlier episodes. Frame t of an episode
    holds the policy observation before action t, the action, and the reward / done / success after it.
    `image_size`: height = width, or (height, width); `num_envs`: at most this many parallel envs (no more than
    `episodes` unless `only_successful`); `image_quality`: `ImageConfig.quality`, as the policy will see them.
    `policy`: a training run directory whose policy is the demonstrator instead of the task's scripted expert (any
    task; recorded with the run's sim settings, randomisation included, updated by `task_options`).
    `noise_correlation`: the action noise's correlation from one step to the next (`experts.ActionNoise`: near 1
    the arm wanders across its workspace, play-like rollouts).
    """
    image_hw = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    _check_arguments(episodes, num_envs, seed, action_noise, hesitation, image_hw)
    if not 0 <= noise_correlation < 1:  # false for NaN
        raise ConfigError("noise_correlation", f"is a lag-one correlation in [0, 1); got {noise_correlation}")
    task_options = dict(task_options or {})
    num_envs = num_envs if only_successful else min(num_envs, episodes)
    image = ImageConfig(cameras=list(cameras), width=image_hw[1], height=image_hw[0], quality=image_quality)
    sim = SimConfig(task=task, num_envs=num_envs, task_options=task_options, image=image)
    demonstrator = None
    if policy is not None:
        sim, demonstrator = _policy_demonstrator(Path(policy), sim, hesitation)
        probe = make_task(task, sim.task_options)
        expert_name, fps = "PolicyExpert", _check_fps(probe)
        _check_cameras(probe, task, cameras)
    else:
        expert_class, fps = _check_task(task, task_options, cameras)
        expert_name = expert_class.__name__
    out = Path(out)
    if overwrite:
        _delete_dataset(out)
    try:
        env_seed = seed + (Demonstrations(out).num_episodes if (out / layout.INFO_PATH).is_file() else 0)
    except DatasetError as err:
        raise ConfigError("out", str(err)) from None
    env = make_env(sim, seed=env_seed)
    try:
        expert_info = {"name": expert_name, "action_noise": action_noise, "hesitation": hesitation}
        if noise_correlation:  # only then: datasets recorded before the option still take appended sessions
            expert_info["noise_correlation"] = noise_correlation
        info_extra = {
            "task_options": sim.task_options,
            "control_mode": getattr(env.task.config, "control_mode", None),
            "control_dt": env.control_dt,
            "observation": "obs['policy'] of the task, before the action",
            "expert": expert_info | ({"run": str(policy)} if policy is not None else {}),
            "only_successful": only_successful,
        }
        try:
            writer = DemoWriter(
                out,
                fps,
                env.obs_shapes["policy"][0],
                env.action_dim,
                list(cameras),
                image_hw,
                task,
                info_extra,
                robot_type="panda" if task.startswith("arm-") else task.split("-")[0],
                session={"seed": env_seed, "num_envs": num_envs},
                env_state_dim=env.obs_shapes["critic"][0] if "critic" in env.obs_shapes else 0,
            )
        except (ValueError, FileExistsError) as err:
            raise ConfigError("out", str(err)) from None
        if demonstrator is not None:
            expert = PolicyExpert(demonstrator, num_envs, action_noise, env_seed, noise_correlation)
        else:
            expert = expert_class(env.task, num_envs, action_noise, env_seed, hesitation, noise_correlation)
        start = time.perf_counter()
        with _progress_bar(progress, console, task, episodes) as update:
            counts = _record(env, expert, writer, episodes, only_successful, list(cameras), env_seed, update)
    finally:
        env.close()
    seconds = round(time.perf_counter() - start, 2)
    summary = {"out": str(out), "task": task, "seed": env_seed, **counts}
    return summary | {"dataset_episodes": writer.num_episodes, "seconds": seconds}


def _record(
    env: VecEnv,
    expert: ArmExpert | PolicyExpert,
    writer: DemoWriter,
    episodes: int,
    only_successful: bool,
    cameras: list[str],
    seed: int,
    update: Callable[[int, str], None],
) -> dict[str, Any]:
    """Step the expert until `episodes` episodes are written; returns the counts."""
    num_envs = env.num_envs
    buffers = [_empty_buffer(cameras) for _ in range(num_envs)]
    written = frames = successes = attempted = 0
    fixed_instruction = INSTRUCTIONS.get(writer.info["policyforge"]["task"])
    obs = env.reset(seed=seed)
    instructions = env.instructions()  # per env, for tasks that draw an instruction per episode; else None
    while written < episodes:
        decided = expert.act(obs) if isinstance(expert, PolicyExpert) else expert.act(env.state)
        action = decided.astype(np.float32)  # recorded exactly as executed
        states = obs["policy"].numpy()
        env_states = obs["critic"].numpy() if writer.env_state_dim else None
        images = obs["image"].numpy() if cameras else None
        obs, reward, terminated, truncated, info = env.step(action)
        step_success = info["success"].numpy() if "success" in info else np.zeros(num_envs, bool)
        step = (states, env_states, action, reward.numpy(), (terminated | truncated).numpy(), step_success, images)
        for i, buffer in enumerate(buffers):
            _append(buffer, i, *step, cameras)
        ended = np.flatnonzero(info["episode"]["done"].numpy())
        for i in ended:
            success = bool(info["episode"]["success"][i])
            attempted += 1
            if written < episodes and (success or not only_successful):
                episode = buffers[i]
                images_i = {camera: np.stack(frames_) for camera, frames_ in episode.pop("images").items()}
                arrays = {key: np.asarray(value) for key, value in episode.items()}
                instruction = fixed_instruction if instructions is None else instructions[i]
                writer.add_episode(**arrays, images=images_i or None, instruction=instruction)
                written, frames, successes = written + 1, frames + len(arrays["states"]), successes + success
            buffers[i] = _empty_buffer(cameras)
            update(written, f"{successes / max(written, 1):.0%}")
        expert.reset(ended)
        if instructions is not None and len(ended):
            instructions = env.instructions()  # the auto-reset episodes' new instructions
        if only_successful and attempted >= MAX_ATTEMPTS_PER_EPISODE * episodes + num_envs and written < episodes:
            raise ConfigError(
                "only_successful",
                f"the expert succeeded in {successes} of {attempted} episodes ({written} written): lower the action "
                "noise or hesitation, or keep failed episodes too",
            )
    return {
        "episodes": written,
        "frames": frames,
        "success_rate": successes / written,
        "attempted": attempted,
    }


def _append(
    buffer: dict, i: int, states, env_states, action, reward, done, success, images, cameras: list[str]
) -> None:
    """Add env i's frame of this step to its episode buffer (copies: the env reuses its arrays)."""
    buffer["states"].append(states[i].copy())
    if env_states is not None:
        buffer.setdefault("env_states", []).append(env_states[i].copy())
    buffer["actions"].append(action[i])
    buffer["rewards"].append(float(reward[i]))
    buffer["dones"].append(bool(done[i]))
    buffer["successes"].append(bool(success[i]))
    for view, camera in enumerate(cameras):
        buffer["images"][camera].append(images[i, view].copy())


def _empty_buffer(cameras: Sequence[str]) -> dict[str, Any]:
    keys = ("states", "actions", "rewards", "dones", "successes")
    return {**{key: [] for key in keys}, "images": {camera: [] for camera in cameras}}


def _check_arguments(episodes, num_envs, seed, action_noise, hesitation, image_hw) -> None:
    """ConfigError naming the first argument out of range (NaN and inf included)."""
    if not 1 <= episodes <= MAX_EPISODES:
        raise ConfigError("episodes", f"must be in [1, {MAX_EPISODES:,}], got {episodes}")
    if not 1 <= num_envs <= MAX_COLLECT_ENVS:
        raise ConfigError("num_envs", f"must be in [1, {MAX_COLLECT_ENVS}] (parallel environments), got {num_envs}")
    check_seed(seed, "seed", largest_offset=MAX_EPISODES * MAX_ATTEMPTS_PER_EPISODE + MAX_COLLECT_ENVS)
    if not (math.isfinite(action_noise) and action_noise >= 0):
        raise ConfigError("action_noise", f"is a standard deviation, finite and ≥ 0; got {action_noise}")
    if not 0 <= hesitation < 1:  # false for NaN
        raise ConfigError("hesitation", f"is a per-step probability in [0, 1); got {hesitation}")
    if not 1 <= min(image_hw) <= max(image_hw) <= MAX_IMAGE_SIZE:
        raise ConfigError("image_size", f"must be 1 to {MAX_IMAGE_SIZE} pixels a side, got {image_hw}")


def _check_task(task: str, task_options: dict[str, Any], cameras: Sequence[str]) -> tuple[type[ArmExpert], int]:
    """The task's expert class and integer fps, or a ConfigError saying why it cannot be recorded."""
    probe = make_task(task, task_options)
    expert_class = EXPERTS.get(type(probe))
    if expert_class is None:
        raise ConfigError(
            "task", f"no scripted expert for {task!r}; experts exist for {', '.join(cls.name for cls in EXPERTS)}"
        )
    if probe.config.control_mode != "ee_delta_topdown":
        raise ConfigError("task_options.control_mode", "scripted experts act in 'ee_delta_topdown' only")
    _check_cameras(probe, task, cameras)
    return expert_class, _check_fps(probe)


def _check_cameras(probe: Any, task: str, cameras: Sequence[str]) -> None:
    unknown = [camera for camera in cameras if camera not in camera_names(probe.model)]
    if unknown:
        raise ConfigError("cameras", f"unknown {unknown}; {task} has cameras {camera_names(probe.model)}")


def _check_fps(task: Any) -> int:
    fps = 1.0 / task.config.control_dt
    if abs(fps - round(fps)) > 1e-6:
        raise ConfigError("task_options.control_dt", f"LeRobot datasets need an integer fps, 1/control_dt = {fps:g}")
    return round(fps)


def _policy_demonstrator(run_dir: Path, sim: SimConfig, hesitation: float) -> tuple[SimConfig, Any]:
    """The run's sim settings (with this collection's envs, cameras and task options on top) and its policy."""
    from policyforge.algos.runner import load_run  # the runner imports the data package

    if hesitation > 0:
        raise ConfigError("hesitation", "pauses are a scripted-expert knob; a policy demonstrator takes action_noise")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError("policy", f"{run_dir} is not a training run directory (no config.yaml)")
    config, policy, env = load_run(run_dir, num_envs=1)
    env.close()
    if config.sim.task != sim.task:
        raise ConfigError("task", f"the policy of {run_dir} was trained on {config.sim.task!r}, not {sim.task!r}")
    options = {**config.sim.task_options, **sim.task_options}
    return dataclasses.replace(config.sim, num_envs=sim.num_envs, image=sim.image, task_options=options), policy


def _delete_dataset(out: Path) -> None:
    """Delete the dataset policyforge wrote in `out`: the files its layout explains, its info.json last (so an
    interrupted deletion can be run again). ConfigError, deleting nothing, for a directory that holds anything
    else or a dataset policyforge did not write."""
    if not out.exists():
        return
    if not (out / layout.INFO_PATH).is_file():
        if any(out.iterdir()):
            raise ConfigError("out", f"{out} holds files but is not a dataset (no {layout.INFO_PATH}); not deleting it")
        return
    try:
        info = layout.read_json(out / layout.INFO_PATH)
    except ValueError:
        info = None
    if not isinstance(info, dict) or "policyforge" not in info or not isinstance(info.get("features"), dict):
        raise ConfigError(
            "overwrite",
            f'{out} holds a dataset policyforge did not write (its {layout.INFO_PATH} has no "policyforge" entry); '
            "--overwrite deletes only datasets policyforge wrote: delete it yourself, or choose another --out",
        )
    files, folders, foreign = integrity.layout_entries(out, info)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(
            "overwrite",
            f"{out} holds files that are not part of its dataset ({shown}); nothing was deleted: move them out, or "
            "choose another --out",
        )
    for path in sorted(files, key=lambda path: path == out / layout.INFO_PATH):
        path.unlink()
    for folder in folders:  # deepest first; all empty now
        folder.rmdir()


@contextlib.contextmanager
def _progress_bar(
    enabled: bool, console: Console | None, task: str, episodes: int
) -> Iterator[Callable[[int, str], None]]:
    """A rich progress bar of episodes written and their success rate; yields its update(written, success)."""
    if not enabled:
        yield lambda written, success: None
        return
    columns = (
        TextColumn(f"[bold]{task}[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes, success {task.fields[success]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console or Console()) as progress:
        bar = progress.add_task(task, total=episodes, success="-")
        yield lambda written, success: progress.update(bar, completed=written, success=success)
