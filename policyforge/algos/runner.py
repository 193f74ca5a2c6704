"""The training runner: rollout → update iterations, logging, evaluation with videos, atomic checkpoints,
exact resumption, plots. `policyforge train` and `policyforge demo` drive it."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from rich.console import Console

from policyforge import config as config_io
from policyforge.algos import checkpoint
from policyforge.algos.base import Algorithm, StepCallback
from policyforge.algos.bc import BC, BCConfig, demo_windows, load_demonstrations
from policyforge.algos.evaluate import evaluate
from policyforge.algos.logger import MetricsLogger, ProgressDisplay
from policyforge.algos.plots import plot_learning_curves
from policyforge.algos.ppo import PPO, PPOConfig
from policyforge.algos.run_checks import check_sections
from policyforge.algos.sac import SAC, SACConfig
from policyforge.config import check, check_in, check_seed
from policyforge.io import write_json
from policyforge.policies.base import Policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.diffusion import DiffusionConfig, DiffusionPolicy
from policyforge.policies.flow import FlowConfig, FlowPolicy
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy
from policyforge.policies.residual import ResidualConfig, ResidualPolicy
from policyforge.sims import SimConfig, make_env
from policyforge.sims.config import MAX_ENVS, MAX_THREADS
from policyforge.sims.vec_env import VecEnv

CONFIG_FILE = "config.yaml"
EVAL_SEED_OFFSET = 1_000_003


@dataclasses.dataclass
class RunnerConfig:
    """Length of the run, and how often to evaluate, film and checkpoint."""

    total_env_steps: int = 1_000_000
    """Environment steps (summed over envs) to train for."""
    eval_every_steps: int = 0
    """Evaluate every this many environment steps (0: only at the end)."""
    eval_envs: int = 16
    """Evaluation environments; each contributes its first deterministic episode."""
    video: Literal["none", "final", "every_eval"] = "final"
    """Film the final evaluation, every evaluation, or none (MP4s under videos/)."""
    video_camera: str | None = None
    """Camera to film (null: the task's first camera)."""
    checkpoint_every: int = 10
    """Checkpoint every this many iterations (and at the end)."""
    keep_checkpoints: int = 3
    """Numbered checkpoints to keep besides latest.pt."""
    torch_threads: int = 1
    """torch intra-op threads (1 is fastest beside a busy simulator on few cores)."""
    tensorboard: bool = True
    """Write TensorBoard event files under tensorboard/."""

    def __post_init__(self) -> None:
        check_in(self.total_env_steps, "total_env_steps", "[1, inf)")
        check_in(self.eval_every_steps, "eval_every_steps", "[0, inf)", "0: only at the end")
        check_in(self.eval_envs, "eval_envs", f"[1, {MAX_ENVS}]")
        check_in(self.checkpoint_every, "checkpoint_every", "[1, inf)")
        check_in(self.keep_checkpoints, "keep_checkpoints", "[1, inf)")
        check_in(self.torch_threads, "torch_threads", f"[1, {MAX_THREADS}]")


@dataclasses.dataclass
class RunConfig:
    """A training run: simulation, policy, algorithm and runner settings."""

    name: str = ""
    """Run name; the run directory is out_dir/name (default: <task>-<algo>)."""
    out_dir: str = "runs"
    """Parent directory of run directories."""
    seed: int = 0
    """Seed of networks, sampling and environments."""
    algo: Literal["ppo", "sac", "bc"] = "ppo"
    """Algorithm: `ppo`, `sac` or `bc` (behaviour cloning); its section below is used."""
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    """Simulation."""
    policy_class: Literal["gaussian", "diffusion", "flow", "residual"] = "gaussian"
    """Policy class; its section is used: `policy` (Gaussian), `diffusion`, `flow`, or `residual` (a Gaussian
    residual on a frozen base of class residual.base_class, described by that class's section)."""
    policy: GaussianConfig = dataclasses.field(default_factory=GaussianConfig)
    """Gaussian policy network (policy_class: gaussian)."""
    diffusion: DiffusionConfig = dataclasses.field(default_factory=DiffusionConfig)
    """Diffusion policy (policy_class: diffusion)."""
    flow: FlowConfig = dataclasses.field(default_factory=FlowConfig)
    """Flow-matching policy (policy_class: flow)."""
    residual: ResidualConfig = dataclasses.field(default_factory=ResidualConfig)
    """Residual policy (policy_class: residual)."""
    bc: BCConfig = dataclasses.field(default_factory=BCConfig)
    """Behaviour cloning settings (algo: bc)."""
    init_policy: str = ""
    """Start from the policy of this run directory (its latest checkpoint) or checkpoint file, e.g. a BC run to
    fine-tune with PPO; the policy sections must describe the same architecture. With policy_class: residual,
    the base policy's weights (required)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    """PPO settings (algo: ppo)."""
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    """SAC settings (algo: sac)."""
    runner: RunnerConfig = dataclasses.field(default_factory=RunnerConfig)
    """Run length, evaluation, checkpoints."""

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed", EVAL_SEED_OFFSET)
        check_sections(self)
        if self.algo == "sac":
            check(self.policy.squash, "policy.squash", "SAC needs tanh-squashed actions: set policy.squash: true")
        if self.ppo.update_policy_normalizer is None:  # a residual's own statistics start empty; its base's stay
            self.ppo.update_policy_normalizer = not self.init_policy or self.policy_class == "residual"
        if self.policy_class == "residual":
            check(
                bool(self.init_policy),
                "init_policy",
                "a residual policy needs its base's weights: set init_policy to the base's run directory",
            )
        if self.algo == "sac":
            check(
                self.policy_class == "gaussian",
                "policy_class",
                f"SAC trains Gaussian policies; train a {self.policy_class} policy with algo: bc or ppo",
            )

    @property
    def run_dir(self) -> Path:
        task = self.sim.task.replace(":", "-").replace("/", "-")
        return Path(self.out_dir) / (self.name or f"{task}-{self.algo}")


def build_policy(config: RunConfig, env: VecEnv, policy_class: str | None = None) -> Policy:
    """The policy a config describes (of `policy_class`, default config.policy_class), for an env."""
    state_dim, image_shape = env.obs_shapes["policy"][0], env.obs_shapes.get(IMAGE_KEY)
    policy_class = policy_class or config.policy_class
    if policy_class == "residual":
        base = build_policy(config, env, config.residual.base_class)
        return ResidualPolicy(base, state_dim, config.residual)
    if policy_class in ("diffusion", "flow"):
        chunked = DiffusionPolicy if policy_class == "diffusion" else FlowPolicy
        policy = chunked(state_dim, env.action_dim, getattr(config, policy_class), image_shape=image_shape)
        trainable = config.ppo.trainable_steps
        if config.algo == "ppo" and trainable is not None and config.policy_class != "residual":
            check(
                trainable <= policy.steps,
                "ppo.trainable_steps",
                f"must be ≤ the policy's {policy.steps} sampling steps, got {trainable}",
            )
            policy.freeze_early_steps(policy.steps - trainable)
        return policy
    if image_shape is not None:
        raise config_io.ConfigError(
            "sim.image.cameras", "the Gaussian policy reads states only: use policy_class diffusion or flow"
        )
    return GaussianPolicy(state_dim, env.action_dim, config.policy)


def build(config: RunConfig, env: VecEnv) -> Algorithm:
    """The policy and algorithm a config describes, for an env."""
    policy = build_policy(config, env)
    if config.algo == "bc":
        cameras = config.sim.image.cameras
        demos = load_demonstrations(config.bc, config.sim.task, env, cameras)
        return BC(policy, demo_windows(policy, demos, config.bc, cameras), config.bc)
    if config.algo == "sac":
        return SAC(policy, env.obs_shapes, config.sac)
    steps_per_iteration = env.num_envs * config.ppo.rollout_steps * getattr(policy, "act_steps", 1)
    iterations = math.ceil(config.runner.total_env_steps / steps_per_iteration)
    critic_dim = env.obs_shapes[config.ppo.critic_obs_key][0]
    return PPO(policy, critic_dim, env.num_envs, config.ppo, iterations)


class Runner:
    """Owns one run directory: trains, evaluates, checkpoints, resumes."""

    def __init__(self, config: RunConfig, run_dir: Path, console: Console | None = None):
        self.config, self.run_dir = config, Path(run_dir)
        self.console = console or Console()
        torch.set_num_threads(config.runner.torch_threads)
        _seed_everything(config.seed)
        self.env = make_env(config.sim, seed=config.seed)
        self.compile_seconds = float(getattr(self.env, "compile_seconds", 0.0))
        """Seconds the simulator spent compiling (MJX), reported apart from steps/s."""
        if self.compile_seconds:
            self.console.print(
                f"[dim]compiled the {config.sim.backend} simulation in {self.compile_seconds:.1f} s "
                "(cached on disk for the next run; not counted in steps/s)[/dim]"
            )
        self.obs = self.env.reset(seed=config.seed)
        self.algo = build(config, self.env)
        if config.init_policy:
            _load_initial_policy(self.algo.policy, config.init_policy)
        self.iteration, self.env_steps, self.wall_time = 0, 0, 0.0
        """env_steps counts the algorithm's step unit: environment steps, or gradient steps for behaviour cloning."""
        self._episodes: dict[str, list[float]] = {"return": [], "success": [], "length": []}
        self.step_hooks: list[StepCallback] = []
        """Extra callables given every training step's `info` (benchmarks use them to time episodes)."""
        self._resumed_from: int | None = None

    @classmethod
    def start(cls, config: RunConfig, console: Console | None = None) -> Runner:
        """A new run in `config.run_dir` (which must not hold a run yet); saves the resolved config."""
        run_dir = config.run_dir
        if (run_dir / "checkpoints").exists():
            raise FileExistsError(
                f"{run_dir} already holds a run: resume it with `policyforge train --resume {run_dir}` "
                "or pick another name=..."
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        config_io.save(config, run_dir / CONFIG_FILE)
        return cls(config, run_dir, console)

    @classmethod
    def resume(cls, run_dir: Path, console: Console | None = None, overrides: list[str] | None = None) -> Runner:
        """Continue a run from its latest checkpoint, exactly where it stopped. `runner.*` overrides (a longer
        run, other evaluation settings) are allowed; anything else would change what is being resumed."""
        run_dir = Path(run_dir)
        overrides = overrides or []
        for item in overrides:
            if not item.startswith("runner."):
                raise config_io.ConfigError(item.split("=")[0], "a resumed run accepts only runner.* overrides")
        config = config_io.load(RunConfig, run_dir / CONFIG_FILE, overrides)
        if overrides:
            config_io.save(config, run_dir / CONFIG_FILE)
        state = checkpoint.load(run_dir)
        runner = cls(config, run_dir, console)
        runner.algo.load_state_dict(state["algo"])
        runner.iteration, runner.env_steps, runner.wall_time = (
            state["iteration"],
            state["env_steps"],
            state["wall_time"],
        )
        if state["env"] is not None:
            runner.env.set_state(state["env"])
            runner.obs = state["obs"]
        else:  # a backend without snapshots restarts its episodes
            runner.obs = runner.env.reset(seed=config.seed + runner.iteration)
        checkpoint.set_rng_state(state["rng"])
        runner._resumed_from = runner.env_steps
        return runner

    # -- training ----------------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        cfg = self.config.runner
        total = self.algo.total_steps(cfg.total_env_steps)
        logger = MetricsLogger(self.run_dir, self._resumed_from, cfg.tensorboard, self.algo.step_unit)
        display = ProgressDisplay(self.console, total, self.env_steps)
        next_eval = self._next_multiple(cfg.eval_every_steps)
        try:
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
                if next_eval and self.env_steps >= next_eval:
                    metrics.update(self.evaluate(video=cfg.video == "every_eval"))
                    next_eval = self._next_multiple(cfg.eval_every_steps)
                logger.log(self.env_steps, metrics)
                display.update(
                    self.env_steps, metrics["perf/sps"], metrics.get("train/return"), metrics.get("train/success")
                )
                if self.iteration % cfg.checkpoint_every == 0:
                    self.save_checkpoint()
            final = self.evaluate(video=cfg.video != "none")
            logger.log(self.env_steps, {**final, "perf/wall_s": self.wall_time})
            self.save_checkpoint()
        finally:
            display.close()
            logger.close()
        plot = plot_learning_curves(self.run_dir, f"{self.config.sim.task} · {self.config.algo}")
        summary = {
            self.algo.step_unit: self.env_steps,
            "iterations": self.iteration,
            "wall_s": round(self.wall_time, 1),
            "compile_s": round(self.compile_seconds, 1),
            **final,
            "plot": str(plot),
            "checkpoint": str(self.run_dir / "checkpoints" / checkpoint.LATEST),
        }
        write_json(self.run_dir / "summary.json", summary)
        return summary

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

    def save_checkpoint(self) -> Path:
        payload = {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "wall_time": self.wall_time,
            "algo": self.algo.state_dict(),
            "env": self.env.get_state(),
            "obs": self.obs,
            "rng": checkpoint.rng_state(),
            "config": config_io.to_dict(self.config),
        }
        return checkpoint.save(
            self.run_dir / "checkpoints", payload, self.iteration, self.config.runner.keep_checkpoints
        )

    def close(self) -> None:
        self.env.close()

    # -- internals ---------------------------------------------------------------------------------------

    def _record_episodes(self, info: dict[str, Any]) -> None:
        for hook in self.step_hooks:
            hook(info)
        episode = info["episode"]
        done = episode["done"]
        if done.any():
            self._episodes["return"] += episode["return"][done].tolist()
            self._episodes["success"] += episode["success"][done].float().tolist()
            self._episodes["length"] += episode["length"][done].float().tolist()

    def _episode_metrics(self) -> dict[str, float]:
        metrics = {f"train/{k}": float(np.mean(v)) for k, v in self._episodes.items() if v}
        self._episodes = {k: [] for k in self._episodes}
        return metrics

    def _next_multiple(self, every: int) -> int:
        return (self.env_steps // every + 1) * every if every > 0 else 0


def load_run(
    run_dir: Path, checkpoint_file: str | None = None, num_envs: int | None = None, backend: str | None = None
) -> tuple[RunConfig, Policy, VecEnv]:
    """A run's config, its trained policy (latest or given checkpoint) and a fresh env of `num_envs`
    (default: the run's evaluation size) seeded for evaluation, on `backend` (default: the run's)."""
    run_dir = Path(run_dir)
    config = config_io.load(RunConfig, run_dir / CONFIG_FILE)
    sim = dataclasses.replace(
        config.sim, num_envs=num_envs or config.runner.eval_envs, backend=backend or config.sim.backend
    )
    env = make_env(sim, seed=config.seed + EVAL_SEED_OFFSET)
    policy = build_policy(config, env)
    policy.load_state_dict(checkpoint.load(Path(checkpoint_file) if checkpoint_file else run_dir)["algo"]["policy"])
    return config, policy.eval(), env


_RL_ONLY = ("noise_net.",)
"""Modules only RL uses (ReinFlow's noise network): a pre-trained policy may have one or not."""


def _load_initial_policy(policy: Policy, source: str) -> None:
    """Load init_policy's weights: the whole policy, or a residual policy's base from a run of the base."""
    path = Path(source)
    if not path.exists():
        raise config_io.ConfigError("init_policy", f"{path} does not exist; give a run directory or a checkpoint file")
    weights = checkpoint.load(path)["algo"]["policy"]
    whole = not isinstance(policy, ResidualPolicy) or any(key.startswith("base.") for key in weights)
    target = policy if whole else policy.base
    frozen_steps = getattr(target, "frozen_steps", 0)
    if frozen_steps:  # load the full network, then freeze a copy of *these* weights for the early steps
        target.freeze_early_steps(0)
    own = target.state_dict()
    weights = {k: v for k, v in weights.items() if k in own or not k.startswith(_RL_ONLY)}
    try:
        missing, unexpected = target.load_state_dict(weights, strict=False)
        mismatched = [k for k in missing if not k.startswith(_RL_ONLY)] + unexpected
        if mismatched:
            raise RuntimeError(f"keys {mismatched[:4]}")
    except RuntimeError as err:
        raise config_io.ConfigError(
            "init_policy",
            f"{path} holds a different architecture than this config describes ({err}); copy the policy "
            "section of the run you start from",
        ) from err
    if frozen_steps:
        target.freeze_early_steps(frozen_steps)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
