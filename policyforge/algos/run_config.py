"""A training run's config: simulation, policy, algorithm and runner settings (the YAML files in configs/)."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import policyforge.policies  # noqa: F401  (registers the policy classes)
from policyforge.algos import bc, distill, ppo, reward_model, run_files, sac  # noqa: F401  (register the algorithms)
from policyforge.algos.ppo_config import PPOConfig
from policyforge.algos.registry import AlgoConfig
from policyforge.algos.run_checks import check_sections
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
    wandb: bool = False
    """Log the same scalars to Weights & Biases too, OFFLINE unless WANDB_MODE says otherwise (files under wandb/;
    upload with `wandb sync`). Needs the optional extra: pip install 'policyforge[wandb]'."""
    wandb_project: str = "policyforge"
    """The W&B project of the run (with runner.wandb)."""

    def __post_init__(self) -> None:
        check_in(self.total_env_steps, "total_env_steps", "[1, inf)")
        check_in(self.eval_every_steps, "eval_every_steps", "[0, inf)", "0: only at the end")
        check_in(self.eval_envs, "eval_envs", f"[1, {MAX_ENVS}]")
        check_in(self.checkpoint_every, "checkpoint_every", "[1, inf)")
        check_in(self.keep_checkpoints, "keep_checkpoints", "[1, inf)")
        check_in(self.torch_threads, "torch_threads", f"[1, {MAX_THREADS}]")
        check(
            bool(re.fullmatch(r"[^/\\#?%:\s]{1,128}", self.wandb_project)),
            "wandb_project",
            f"W&B project names are 1 to 128 characters without spaces or / \\ # ? % :, got {self.wandb_project!r}",
        )


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
    algo: AlgoConfig = dataclasses.field(default_factory=PPOConfig)
    """The algorithm: a registered class and its settings, `algo: {class: ppo | sac | bc, ...}` (bc: behaviour
    cloning); `algo: sac` alone is `{class: sac}` with its defaults. Without `class:` the section describes PPO."""
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    """Simulation."""
    policy: PolicyConfig = dataclasses.field(default_factory=lambda: PolicyConfig.registry["gaussian"]())
    """The policy: a registered class and its settings, `policy: {class: gaussian | diffusion | flow | residual,
    ...}` (a residual's frozen base is a section of its own: `policy: {class: residual, base: {class: flow, ...}}`).
    Without `class:` the section describes a Gaussian policy."""
    init_policy: str = ""
    """Start from the policy of this run directory (its latest checkpoint) or checkpoint file, e.g. a BC run to
    fine-tune with PPO; the policy sections must describe the same architecture. For a residual policy, its
    base's weights (required)."""
    runner: RunnerConfig = dataclasses.field(default_factory=RunnerConfig)
    """Run length, evaluation, checkpoints."""

    def __post_init__(self) -> None:
        check(not self.name or is_plain_name(self.name), "name", run_files.plain_name_message(self.name))
        check_seed(self.seed, "seed", EVAL_SEED_OFFSET)
        check_sections(self)
        self.algo.entry.fill_defaults(self)

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Read the layouts before the policy and algorithm sections were tagged — `policy_class: flow` beside
        `flow: {...}`, `algo: ppo` beside `ppo: {...}` — as `policy: {class: flow, ...}` and `algo: {class: ppo,
        ...}`, warning once; the other classes' sections, which those layouts ignored, go."""
        old = {}
        if "policy_class" in data:
            old["policy_class"] = data["policy_class"]
        algo = data.get("algo", "ppo")  # the old layout's default
        if isinstance(algo, str) and any(name in data for name in OLD_ALGO_SECTIONS):
            old["algo"] = algo  # (`algo: NAME` alone is the new layout's shorthand for `{class: NAME}`)
        if not old:
            return data
        data = dict(data)
        if "policy_class" in old:
            data["policy"] = _tagged_policy(data)
        if "algo" in old:
            sections = {name: data.pop(name, None) or {} for name in OLD_ALGO_SECTIONS}
            section = sections.get(old["algo"], {})
            check(isinstance(section, dict), old["algo"], f"expected a mapping of settings, got {section!r}")
            data["algo"] = {TAG_KEY: old["algo"], **section}
        found = ", ".join(f"{section}: {kind}" for section, kind in old.items())
        new = " and ".join(f"{_NEW_SECTION[section]}: {{class: {kind}, ...}}" for section, kind in old.items())
        warnings.warn(
            f"this run config uses an old layout ({found} and a section per class); read as {new}, the layout "
            "configs/ use now",
            stacklevel=2,
        )
        return data

    @property
    def run_dir(self) -> Path:
        """out_dir/name; the default name is the task's (any character a name may not hold becomes '-')."""
        return Path(self.out_dir) / (self.name or run_files.plain_name(f"{self.sim.task}-{self.algo.tag}"))


OLD_POLICY_SECTIONS = ("diffusion", "flow", "residual")
"""Top-level sections of the policy classes before `policy:` was tagged (a Gaussian's was `policy:`)."""
OLD_ALGO_SECTIONS = ("ppo", "sac", "bc")
"""Top-level sections of the algorithms before `algo:` was tagged."""
_NEW_SECTION = {"policy_class": "policy", "algo": "algo"}
"""The section that holds what an old layout's key named."""


def _tagged_policy(data: dict[str, Any]) -> dict[str, Any]:
    """`policy: {class: KIND, ...}` from `policy_class: KIND` and the per-class sections (popped from `data`)."""
    kind = data.pop("policy_class")
    sections = {name: data.pop(name, None) or {} for name in OLD_POLICY_SECTIONS}
    sections["gaussian"] = data.pop("policy", None) or {}
    policy = {TAG_KEY: kind, **sections.get(kind, {})}
    if kind == "residual":
        base = policy.pop("base_class", "diffusion")
        policy["base"] = {TAG_KEY: base, **sections.get(base, {})}
    return policy
