"""A training run's config: simulation, policy, algorithm and runner settings (the YAML files in configs/)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Literal

import policyforge.policies  # noqa: F401  (registers the policy classes)
from policyforge.algos import bc, ppo, run_files, sac  # noqa: F401  (register the algorithms)
from policyforge.algos.bc import BCConfig
from policyforge.algos.ppo_config import PPOConfig
from policyforge.algos.run_checks import check_sections
from policyforge.algos.sac import SACConfig
from policyforge.config import TAG_KEY, check, check_in, check_seed
from policyforge.io import is_plain_name
from policyforge.policies.base import PolicyConfig
from policyforge.sims import SimConfig
from policyforge.sims.config import MAX_ENVS, MAX_THREADS

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
    """Run name, one plain path component (letters, digits, '.', '_', '-'); the run directory is out_dir/name
    (default: <task>-<algo>)."""
    out_dir: str = "runs"
    """Parent directory of run directories (any path)."""
    seed: int = 0
    """Seed of networks, sampling and environments."""
    algo: str = "ppo"
    """Algorithm, a registered name: `ppo`, `sac` or `bc` (behaviour cloning); its section below is used."""
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    """Simulation."""
    policy: PolicyConfig = dataclasses.field(default_factory=lambda: PolicyConfig.registry["gaussian"]())
    """The policy: a registered class and its settings, `policy: {class: gaussian | diffusion | flow | residual,
    ...}` (a residual's frozen base is a section of its own: `policy: {class: residual, base: {class: flow, ...}}`).
    Without `class:` the section describes a Gaussian policy."""
    bc: BCConfig = dataclasses.field(default_factory=BCConfig)
    """Behaviour cloning settings (algo: bc)."""
    init_policy: str = ""
    """Start from the policy of this run directory (its latest checkpoint) or checkpoint file, e.g. a BC run to
    fine-tune with PPO; the policy sections must describe the same architecture. For a residual policy, its
    base's weights (required)."""
    ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
    """PPO settings (algo: ppo)."""
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    """SAC settings (algo: sac)."""
    runner: RunnerConfig = dataclasses.field(default_factory=RunnerConfig)
    """Run length, evaluation, checkpoints."""

    def __post_init__(self) -> None:
        check(not self.name or is_plain_name(self.name), "name", run_files.plain_name_message(self.name))
        check_seed(self.seed, "seed", EVAL_SEED_OFFSET)
        check_sections(self)
        if self.ppo.update_policy_normalizer is None:  # a new part's statistics start empty; loaded ones stay
            self.ppo.update_policy_normalizer = not self.init_policy or bool(self.policy.pretrained_part)

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Read the layout before policy sections were tagged (`policy_class: flow` beside `flow: {...}`) as
        `policy: {class: flow, ...}`, warning once; the other classes' sections, which that layout ignored, go."""
        if "policy_class" not in data:
            return data
        data = dict(data)
        kind = data.pop("policy_class")
        sections = {name: data.pop(name, None) or {} for name in ("diffusion", "flow", "residual")}
        sections["gaussian"] = data.pop("policy", None) or {}
        policy = {TAG_KEY: kind, **sections.get(kind, {})}
        if kind == "residual":
            base = policy.pop("base_class", "diffusion")
            policy["base"] = {TAG_KEY: base, **sections.get(base, {})}
        data["policy"] = policy
        warnings.warn(
            f"this run config uses the old layout (policy_class: {kind} and a section per class); read as "
            f"policy: {{class: {kind}, ...}}, the layout configs/ use now",
            stacklevel=2,
        )
        return data

    @property
    def run_dir(self) -> Path:
        """out_dir/name; the default name is the task's (any character a name may not hold becomes '-')."""
        return Path(self.out_dir) / (self.name or run_files.plain_name(f"{self.sim.task}-{self.algo}"))
