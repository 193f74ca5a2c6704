"""The training runner: rollout → update iterations, logging, evaluation with videos, atomic checkpoints (and
best.pt, the policy of the best evaluation), exact resumption (from the newest intact checkpoint), plots; one process
trains a run at a time (a run lock). Ctrl-C stops a run at the end of its iteration with a checkpoint and the resume
command (`interrupt`). `policyforge train` and `policyforge demo` drive it. The run's config is
`run_config.RunConfig`."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from policyforge import config as config_io
from policyforge.algos import checkpoint, run_files, wandb_log
from policyforge.algos.base import StepCallback
from policyforge.algos.build import build, build_policy
from policyforge.algos.evaluate import evaluate
from policyforge.algos.init_policy import load_initial_policy
from policyforge.algos.interrupt import StopRequests, TrainingInterrupted, resume_command
from policyforge.algos.logger import MetricsLogger, read_metrics
from policyforge.algos.naming import run_title
from policyforge.algos.plots import plot_learning_curves
from policyforge.algos.progress import ProgressDisplay, ProgressPlan, unit_name
from policyforge.algos.run_config import CONFIG_FILE, EVAL_SEED_OFFSET, RunConfig, RunnerConfig  # noqa: F401
from policyforge.algos.run_files import RunKind
from policyforge.algos.run_lock import RunLock
from policyforge.errors import DISK_FULL, UserError
from policyforge.io import atomic_path, write_json
from policyforge.policies.base import Policy
from policyforge.sims import make_env
from policyforge.sims.vec_env import VecEnv

log = logging.getLogger(__name__)


class RunFinishedError(UserError):
    """A resumed run has already trained its full length."""


class RunWriteError(UserError):
    """The disk is full or a file-size limit was reached while training."""


class Runner:
    """Owns one run directory: trains, evaluates, checkpoints, resumes. It holds the run's lock from construction
    until `train` returns or `close`."""

    def __init__(self, config: RunConfig, run_dir: Path, console: Console | None = None, lock: RunLock | None = None):
        self.config, self.run_dir = config, Path(run_dir)
        self._lock = lock or RunLock(self.run_dir)
        try:
            self._build(config, console)
        except BaseException:
            self._lock.release()
            raise

    def _build(self, config: RunConfig, console: Console | None) -> None:
        self.console = console or Console()
        if config.runner.wandb:
            wandb_log.check_installed()  # before anything is built: the error names runner.wandb and the fix
        torch.set_num_threads(config.runner.torch_threads)
        _seed_everything(config.seed)
        self.env = make_env(config.sim, seed=config.seed)
        camera = config.runner.video_camera
        if camera is not None and camera not in self.env.cameras:
            cameras = f"{config.sim.task} has {self.env.cameras}"
            raise config_io.ConfigError("runner.video_camera", f"unknown camera {camera!r}; {cameras}")
        self.compile_seconds = float(getattr(self.env, "compile_seconds", 0.0))
        """Seconds the simulator spent compiling (MJX), reported apart from steps/s."""
        if self.compile_seconds:
            self.console.print(
                f"[dim]compiled the {config.sim.backend} simulation in {self.compile_seconds:.1f} s "
                "(cached on disk for the next run; not counted in steps/s)[/dim]"
            )
        self.obs = self.env.reset(seed=config.seed)
        dataset = getattr(config.algo, "dataset", None)
        if dataset and config.sim.image.cameras:  # minutes for a large dataset: say why nothing moves
            self.console.print(
                f"[dim]reading {dataset}: decoding its videos (and a frozen image encoder's features of each frame, "
                "computed once)…[/dim]"
            )
        self.algo = build(config, self.env)
        if config.init_policy:
            load_initial_policy(self.algo.policy, config.init_policy)
        self.iteration, self.env_steps, self.wall_time = 0, 0, 0.0
        """env_steps counts the algorithm's step unit: environment steps, or gradient steps for behaviour cloning."""
        self._episodes: dict[str, list[float]] = {"return": [], "success": [], "length": []}
        self.step_hooks: list[StepCallback] = []
        """Extra callables given every training step's `info` (benchmarks use them to time episodes)."""
        self._resumed_from: int | None = None
        self._saved: tuple[int, int] | None = None
        """(iteration, steps) of the run's newest checkpoint."""
        self._best: tuple[float, float] | None = None
        """`checkpoint.rank` of the evaluation in best.pt."""
        self._stops = StopRequests(lambda text: self.console.print(text, markup=False, highlight=False, soft_wrap=True))

    @classmethod
    def start(
        cls, config: RunConfig, console: Console | None = None, kind: RunKind = "train", lock: RunLock | None = None
    ) -> Runner:
        """A new run in `config.run_dir`, which must be new, empty, or a run policyforge started that has no
        checkpoint yet (`run_files.check_startable`); marks the directory as a run of `kind` and saves the resolved
        config. `lock`: the run's lock, if the caller holds it already."""
        run_dir = config.run_dir
        try:
            run_files.check_no_run(run_dir)
            run_files.check_startable(run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            lock = lock or RunLock(run_dir)
            run_files.check_no_run(run_dir)  # again, holding the lock: another start may have won the race
            run_files.write_marker(run_dir, kind)
            config_io.save(config, run_dir / CONFIG_FILE)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return cls(config, run_dir, console, lock)

    @classmethod
    def resume(cls, run_dir: Path, console: Console | None = None, overrides: list[str] | None = None) -> Runner:
        """Continue a run from its newest intact checkpoint, exactly where it stopped. `runner.*` overrides (a
        longer run, other evaluation settings) are allowed; anything else would change what is being resumed.
        RunFinishedError, changing nothing, if the run has trained its full length and been evaluated."""
        run_dir = Path(run_dir)
        overrides = overrides or []
        for item in overrides:
            if not item.startswith("runner."):
                raise config_io.ConfigError(item.split("=")[0], "a resumed run accepts only runner.* overrides")
        if not (run_dir / CONFIG_FILE).is_file():
            raise config_io.ConfigError("--resume", f"{run_dir} is not a run directory (it has no {CONFIG_FILE})")
        lock = RunLock(run_dir)
        try:
            config = config_io.load(RunConfig, run_dir / CONFIG_FILE, overrides)
            marker = run_files.read_marker(run_dir)
            if marker is not None and not checkpoint.files(run_dir):  # stopped before its first checkpoint
                (console or Console()).print(f"{run_dir} has no checkpoint yet: training it from the beginning")
                return cls.start(dataclasses.replace(config, out_dir=str(run_dir.parent), name=run_dir.name),
                                 console, marker.get("kind", "train"), lock)  # fmt: skip
            state = checkpoint.load(run_dir)
            runner = cls(config, run_dir, console, lock)
        except BaseException:
            lock.release()
            raise
        try:
            runner._restore(state)
            total = runner.algo.total_steps(config.runner.total_env_steps)
            if state.get("finished", False) and runner.env_steps >= total:  # previous format: evaluate again
                raise RunFinishedError(runner._finished_message(total))
            if overrides:
                with atomic_path(run_dir / CONFIG_FILE) as tmp:
                    config_io.save(config, tmp)
        except BaseException:
            runner.close()
            raise
        return runner

    def _restore(self, state: dict[str, Any]) -> None:
        self.algo.load_state_dict(state["algo"])
        self.iteration, self.env_steps, self.wall_time = state["iteration"], state["env_steps"], state["wall_time"]
        if state["env"] is not None:
            self.env.set_state(state["env"])
            self.obs = state["obs"]
        else:  # a backend without snapshots restarts its episodes
            self.obs = self.env.reset(seed=self.config.seed + self.iteration)
        checkpoint.set_rng_state(state["rng"])
        self._resumed_from = self.env_steps
        self._saved = (self.iteration, self.env_steps)
        best = self.run_dir / "checkpoints" / checkpoint.BEST
        if best.is_file():
            try:
                self._best = checkpoint.rank(checkpoint.read(best)["best"], self.algo.ranked_by)
            except (checkpoint.CheckpointError, KeyError) as err:
                log.warning("%s: %s; the next evaluation rewrites it", best, err)

    # -- training ----------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Train to the run's length, evaluate, then write the plot, summary.json and the final checkpoint (in that
        order: a run whose final checkpoint exists is complete). Releases the run's lock. On Ctrl-C, raises
        TrainingInterrupted (a KeyboardInterrupt) saying what was saved and how to resume (`interrupt`)."""
        try:
            with self._stops.installed():
                return self._train()
        except KeyboardInterrupt as err:
            if isinstance(err, TrainingInterrupted):
                raise
            raise TrainingInterrupted(self._interrupted_message(None)) from None
        finally:
            self._lock.release()

    def _train(self) -> dict[str, Any]:
        try:
            cfg = self.config.runner
            total = self.algo.total_steps(cfg.total_env_steps)
            wandb = (cfg.wandb_project, config_io.to_dict(self.config)) if cfg.wandb else (None, None)
            logger = MetricsLogger(self.run_dir, self._resumed_from, cfg.tensorboard, self.algo.step_unit, *wandb)
            if logger.wandb is not None:
                upload = f" (upload: wandb sync {logger.wandb.directory})" if logger.wandb.mode == "offline" else ""
                self.console.print(f"W&B {logger.wandb.mode}: {logger.wandb.directory}{upload}", soft_wrap=True)
            plan = ProgressPlan(self.env_steps, total, self.algo.steps_per_iteration(self.env), cfg.eval_every_steps)
            display = ProgressDisplay(self.console, plan, self.algo.step_unit)
            display.seed_eval_seconds([r["perf/eval_s"] for r in read_metrics(self.run_dir) if "perf/eval_s" in r])
            try:
                self._evaluate_initial_policy(logger, display)
                self._train_until(total, logger, display)
                self._stops.notice = (
                    "Ctrl-C: training is done; its final evaluation and checkpoint finish first (Ctrl-C again: stop "
                    "now, without them)"
                )
                final = self._evaluation(cfg.video != "none", display)
                logger.log(self.env_steps, {**final, "perf/wall_s": self.wall_time})
                final.pop("perf/eval_s")
            finally:
                display.close()
                logger.close()
            plot = plot_learning_curves(self.run_dir, run_title(self.config))
            summary = {
                self.algo.step_unit: self.env_steps,
                "iterations": self.iteration,
                "wall_s": round(self.wall_time, 1),
                "compile_s": round(self.compile_seconds, 1),
                **final,
                "plot": str(plot),
                "checkpoint": str(self.run_dir / "checkpoints" / checkpoint.LATEST),
                "best_checkpoint": str(self.run_dir / "checkpoints" / checkpoint.BEST),
            }
            write_json(self.run_dir / "summary.json", summary)
            self.save_checkpoint(finished=True)
            return summary
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            raise RunWriteError(
                f"writing to {self.run_dir} failed ({err.strerror}); its files up to its last checkpoint are intact: "
                f"free space (or lift the file-size limit), then {resume_command(self.run_dir)}"
            ) from err

    def _train_until(self, total: int, logger: MetricsLogger, display: ProgressDisplay) -> None:
        cfg = self.config.runner
        next_eval = self._next_multiple(cfg.eval_every_steps)
        while self.env_steps < total:
            start = time.perf_counter()
            self.obs, metrics = self.algo.iterate(self.env, self.obs, self._record_episodes)
            elapsed = time.perf_counter() - start
            self.wall_time += elapsed
            self.iteration += 1
            self.env_steps += self.algo.steps_per_iteration(self.env)
            metrics.update(self._episode_metrics())
            metrics.update(
                {"perf/sps": self.algo.steps_per_iteration(self.env) / elapsed, "perf/wall_s": self.wall_time}
            )
            if self.iteration == 1:
                metrics["perf/compile_s"] = self.compile_seconds
            if next_eval and total > self.env_steps >= next_eval:  # after the last iteration: the final one
                metrics.update(self._evaluation(cfg.video == "every_eval", display))
                next_eval = self._next_multiple(cfg.eval_every_steps)
            logger.log(self.env_steps, metrics)
            display.update(self.env_steps, metrics["perf/sps"], metrics)
            saved = self.save_checkpoint() if self.iteration % cfg.checkpoint_every == 0 else None
            if self._stops.requested:
                raise TrainingInterrupted(self._interrupted_message(saved or self.save_checkpoint()))

    def _evaluation(self, video: bool, display: ProgressDisplay) -> dict[str, float]:
        """`evaluate`, timed (`perf/eval_s`), shown as a line of the display, and kept as best.pt if it is the best
        evaluation of the run so far (`checkpoint.rank`)."""
        start = time.perf_counter()
        metrics = self.algo.evaluation()
        if metrics is None:
            metrics = self.evaluate(video=video)
        seconds = time.perf_counter() - start
        ranked_by = self.algo.ranked_by
        best = self._best is None or checkpoint.rank(metrics, ranked_by) > self._best
        if best:
            with self._stops.deferred():
                policy = self.algo.policy.state_dict()
                checkpoint.save_best(
                    self.run_dir / "checkpoints", policy, self.env_steps, self.algo.step_unit, metrics, ranked_by
                )
            self._best = checkpoint.rank(metrics, ranked_by)
        display.evaluation(self.env_steps, metrics, seconds, self.config.runner.eval_envs, best)
        return {**metrics, "perf/eval_s": seconds}

    def _interrupted_message(self, saved: Path | None) -> str:
        unit = unit_name(self.algo.step_unit)
        if saved is not None:
            what = f"saved iteration {self.iteration} ({self.env_steps:,} {unit}) to {saved}"
        elif self._saved is not None:
            iteration, steps = self._saved
            what = f"stopped without saving; the run's last checkpoint is iteration {iteration} ({steps:,} {unit})"
        else:
            what = "stopped before the run's first checkpoint; resuming trains it from the beginning"
        return f"interrupted (Ctrl-C): {what}\ncontinue with: {resume_command(self.run_dir)}"

    def _finished_message(self, total: int) -> str:
        bc = self.algo.step_unit == "gradient_steps"
        longer = f"{resume_command(self.run_dir)} runner.total_env_steps=N (N > {total:,})"
        if bc:  # its length is not a runner.* setting
            longer = f"start a new run with init_policy={self.run_dir} and a larger algo.gradient_steps"
        length = "algo.gradient_steps" if bc else "runner.total_env_steps"
        done = f"{self.run_dir} has finished ({length}={total:,}, evaluated)"
        return f"{done}; its files are unchanged. To train longer: {longer}"

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic evaluation on a fresh env set (seeded, so results depend on the policy only)."""
        cfg = self.config
        eval_sim = dataclasses.replace(cfg.sim, num_envs=cfg.runner.eval_envs)
        env = make_env(eval_sim, seed=cfg.seed + EVAL_SEED_OFFSET)
        path = self.run_dir / "videos" / f"eval_{self.env_steps:09d}.mp4" if video else None
        try:
            return evaluate(self.algo.policy, env, cfg.seed + EVAL_SEED_OFFSET, path, cfg.runner.video_camera)
        finally:
            env.close()

    def _evaluate_initial_policy(self, logger: MetricsLogger, display: ProgressDisplay) -> None:
        """A fine-tuning run (init_policy set) logs an evaluation of its initial policy at step 0, so that its
        curves show before → after (and best.pt may be that policy); a resumed run logged it when it started."""
        if self.config.init_policy and self._resumed_from is None:
            logger.log(self.env_steps, self._evaluation(self.config.runner.video == "every_eval", display))

    def save_checkpoint(self, finished: bool = False) -> Path:
        """Checkpoint the run; `finished`: after its final evaluation (a resume then has nothing to do)."""
        payload = {
            "finished": finished,
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time": self.wall_time,
            "algo": self.algo.state_dict(),
            "env": self.env.get_state(),
            "obs": self.obs,
            "rng": checkpoint.rng_state(),
            "config": config_io.to_dict(self.config),
        }
        with self._stops.deferred():  # a Ctrl-C while writing lets the checkpoint finish
            path = checkpoint.save(
                self.run_dir / "checkpoints", payload, self.env_steps, self.config.runner.keep_checkpoints
            )
        self._saved = (self.iteration, self.env_steps)
        return path

    def close(self) -> None:
        self.env.close()
        self._lock.release()

    # -- internals ---------------------------------------------------------------------------------------

    def _record_episodes(self, info: dict[str, Any]) -> None:
        for hook in self.step_hooks:
            hook(info)
        episode = info["episode"]
        done = episode["done"]
        if done.any():
            self._episodes["return"] += episode["return"][done].tolist()
            if "success" in info:  # a task that defines success (StepInfo)
                self._episodes["success"] += episode["success"][done].float().tolist()
            self._episodes["length"] += episode["length"][done].float().tolist()

    def _episode_metrics(self) -> dict[str, float]:
        metrics = {f"train/{k}": float(np.mean(v)) for k, v in self._episodes.items() if v}
        self._episodes = {k: [] for k in self._episodes}
        return metrics

    def _next_multiple(self, every: int) -> int:
        return (self.env_steps // every + 1) * every if every > 0 else 0


def load_run(
    run_dir: Path,
    checkpoint_file: str | None = None,
    num_envs: int | None = None,
    backend: str | None = None,
    task_options: dict[str, Any] | None = None,
) -> tuple[RunConfig, Policy, VecEnv]:
    """A run's config, its trained policy (from `checkpoint_file`: latest, best, N or a file, as
    `checkpoint.resolve` reads it) and a fresh env of `num_envs`
    (default: the run's evaluation size) seeded for evaluation, on `backend` (default: the run's), its task options
    updated by `task_options` (e.g. {"instructions": "heldout_paraphrase"}: evaluate on held-out instructions)."""
    run_dir = Path(run_dir)
    config = config_io.load(RunConfig, run_dir / CONFIG_FILE)
    if task_options:
        sim = dataclasses.replace(config.sim, task_options={**config.sim.task_options, **task_options})
        config = dataclasses.replace(config, sim=sim)
    env = evaluation_env(config, num_envs, backend)
    policy = build_policy(config, env)
    policy.load_state_dict(checkpoint.load(checkpoint.resolve(run_dir, checkpoint_file))["algo"]["policy"])
    return config, policy.eval(), env


def evaluation_env(config: RunConfig, num_envs: int | None = None, backend: str | None = None) -> VecEnv:
    """A fresh env of the run's task with `num_envs` (default: the run's evaluation size), seeded as evaluation
    seeds it, on `backend` (default: the run's)."""
    sim = dataclasses.replace(
        config.sim, num_envs=num_envs or config.runner.eval_envs, backend=backend or config.sim.backend
    )
    return make_env(sim, seed=config.seed + EVAL_SEED_OFFSET)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
