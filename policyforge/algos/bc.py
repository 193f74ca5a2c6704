"""Behaviour cloning of any policy class from a demonstration dataset, with EMA weights and a warm-up + cosine
learning-rate schedule. The runner drives it like an RL algorithm (iterations, evaluation rollouts in the
VecEnv, checkpoints, plots); its steps are gradient steps.

Training samples are windows of one episode: the observation history [T_o, D] ending at frame i (the first
frame repeated before the episode starts) and the actions [H, A] from frame i on (the last repeated after it
ends), as in Diffusion Policy.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from diffusers.optimization import get_cosine_schedule_with_warmup

from policyforge.algos.base import Algorithm, StepCallback
from policyforge.algos.registry import AlgoConfig, AlgorithmEntry, register_algorithm
from policyforge.algos.scenes import SceneFrames
from policyforge.config import ConfigError, check, check_in
from policyforge.data.dataset import DatasetError, Demonstrations
from policyforge.data.layout import ACTION, ENV_STATE, OBS_KEY_COLUMNS
from policyforge.policies.base import IMAGE_FEATURES_KEY, IMAGE_KEY, Obs, Policy
from policyforge.sims.instruction_obs import INSTRUCTION_KEY
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig

MAX_BATCH_SIZE = 65_536
"""Most windows per gradient step (Diffusion Policy trains with 64-256); more is a typo that fails to allocate."""


@dataclasses.dataclass
class BCConfig(AlgoConfig):
    """Behaviour cloning (`algo: {class: bc, ...}`)."""

    dataset: str = ""
    """Demonstration dataset directory (`policyforge collect <task>` writes one)."""
    max_episodes: int = 0
    """Use only the first this many demonstrations (0: all)."""
    gradient_steps: int = 20_000
    """Gradient steps to train for (the run's length)."""
    steps_per_iteration: int = 250
    """Gradient steps between logging points (checkpoints come every runner.checkpoint_every of these)."""
    batch_size: int = 256
    """Windows per gradient step."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    warmup_steps: int = 500
    """Linear learning-rate warm-up, then cosine decay to 0 at gradient_steps."""
    ema_decay: float = 0.999
    """Decay of the exponential moving average of the weights that is evaluated, checkpointed and exported."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this (0: off)."""
    scene_frames: int = 0
    """Fresh simulated scenes (the first frames of this many new episodes of sim.task, rendered once at the start)
    whose privileged state the policy's auxiliary loss also regresses, a batch of them beside every batch of
    windows: layouts by the thousand where the dataset has one per demonstration (`algos/scenes.py`). Needs a
    policy with that loss (a VLA's policy.privileged_aux_weight > 0); 0: off."""
    scene_motion_steps: int = 0
    """Take each scene after this many env steps in which the arm holds a random action for a random part of them
    (`SceneFrames`): the arm anywhere in view and its state unrelated to the named object's place, where in the
    demonstrations it is at that object; 0: the episodes' first frames."""

    def __post_init__(self) -> None:
        check_in(self.scene_frames, "scene_frames", "[0, 1_000_000]", "0: off")
        check_in(self.scene_motion_steps, "scene_motion_steps", "[0, 1000]", "0: first frames")
        check(
            not self.scene_motion_steps or self.scene_frames > 0,
            "scene_motion_steps",
            "moves the arm in algo.scene_frames' scenes: set scene_frames > 0 as well",
        )
        check_in(self.max_episodes, "max_episodes", "[0, inf)", "0: all")
        check_in(self.gradient_steps, "gradient_steps", "[1, inf)")
        check_in(
            self.steps_per_iteration,
            "steps_per_iteration",
            f"[1, gradient_steps={self.gradient_steps}]",
            "past gradient_steps the cosine schedule raises the learning rate again",
        )
        check_in(self.batch_size, "batch_size", f"[1, {MAX_BATCH_SIZE}]")
        check_in(self.lr, "lr", "(0, 1)", "AdamW moves every weight by about lr per step")
        check_in(self.weight_decay, "weight_decay", "[0, 1]", "AdamW shrinks weights by lr × weight_decay per step")
        check_in(self.warmup_steps, "warmup_steps", "[0, inf)")
        check_in(self.ema_decay, "ema_decay", "[0, 1)")
        check_in(self.grad_clip, "grad_clip", "[0, inf)", "0: off; a negative clip reverses every gradient")


class DemoWindows:
    """Random training windows from a dataset: observation histories and action chunks, as tensors."""

    def __init__(
        self,
        demos: Demonstrations,
        obs_key: str,
        n_obs_steps: int,
        horizon: int,
        cameras: list[str],
        max_episodes: int = 0,
        instructions: bool = False,
        privileged_key: str | None = None,
    ):
        """`instructions`: give each window its episode's instruction as token ids (`obs["instruction"]`, from
        the dataset's `task`), for policies that read it (a VLA); DatasetError when the dataset has none.
        `privileged_key`: give each window its frame's privileged state (`observation.environment_state`) under
        this key (`Policy.bc_privileged_key`); DatasetError when the dataset has none."""
        bounds = demos.episode_bounds[: max_episodes or None]
        self.obs_key, self.n_obs_steps, self.horizon = obs_key, n_obs_steps, horizon
        self.states = torch.as_tensor(demos.column(obs_column(demos, obs_key)), dtype=torch.float32)
        """Every frame's observation under `obs_key` [N, D] (the privileged state's column for `critic`)."""
        self.actions = torch.as_tensor(demos.column(ACTION), dtype=torch.float32)
        self.images: torch.Tensor | None = None
        """Every frame's camera images [N, V, Hi, Wi, 3] uint8, or (`use_image_features`) their features."""
        self.image_key = IMAGE_KEY
        if cameras:
            self.images = torch.as_tensor(np.stack([demos.images(camera) for camera in cameras], axis=1))
        lengths = bounds[:, 1] - bounds[:, 0]
        self.instructions = instruction_ids(demos) if instructions else None
        self.privileged_key, self.env_states = privileged_key, None
        """Every frame's privileged state [N, D_e] (with `privileged_key`)."""
        if privileged_key is not None:
            self.env_states = torch.as_tensor(privileged_states(demos), dtype=torch.float32)
        self.frames = torch.as_tensor(np.concatenate([np.arange(a, b) for a, b in bounds]))
        self.first = torch.as_tensor(np.repeat(bounds[:, 0], lengths))
        self.last = torch.as_tensor(np.repeat(bounds[:, 1] - 1, lengths))

    def __len__(self) -> int:
        return len(self.frames)

    def use_image_features(self, policy: Policy) -> None:
        """Keep what the policy's frozen image encoder makes of each frame instead of the frame (exact, and the
        encoder then runs once per frame instead of once per sample of it); nothing without one."""
        features = policy.frozen_image_features(self.images) if self.images is not None else None
        if features is not None:
            self.images, self.image_key = features, IMAGE_FEATURES_KEY

    def sample(self, batch: int) -> tuple[Obs, torch.Tensor]:
        """Observations (state [B, T_o, D] or [B, D] without history; image [B, T_o, V, H, W, 3]) and action
        chunks [B, H, A]."""
        pick = torch.randint(len(self.frames), (batch,))
        frame, first, last = self.frames[pick, None], self.first[pick, None], self.last[pick, None]
        history = max(self.n_obs_steps, 1)
        obs_index = torch.maximum(frame - torch.arange(history - 1, -1, -1), first)
        action_index = torch.minimum(frame + torch.arange(self.horizon), last)
        obs = {self.obs_key: self.states[obs_index]}
        if self.images is not None:
            obs[self.image_key] = self.images[obs_index]
        if not self.n_obs_steps:
            obs = {k: v[:, 0] for k, v in obs.items()}
        if self.instructions is not None:  # fixed within an episode: no history axis
            obs[INSTRUCTION_KEY] = self.instructions[frame[:, 0]]
        if self.env_states is not None:  # the current frame's: training-time supervision, not a history
            obs[self.privileged_key] = self.env_states[frame[:, 0]]
        return obs, self.actions[action_index]


def obs_column(demos: Demonstrations, obs_key: str) -> str:
    """The dataset column that holds the env's observation `obs_key`; DatasetError naming the fix otherwise."""
    if obs_key not in OBS_KEY_COLUMNS:
        raise DatasetError(
            f"demonstrations hold the observations {sorted(OBS_KEY_COLUMNS)}, not {obs_key!r}: set the policy's "
            "obs_key (policy.encoder.obs_key) to one of them"
        )
    column = OBS_KEY_COLUMNS[obs_key]
    if column not in demos.info["features"]:
        raise DatasetError(
            f"{demos.root} has no {column} (the env's {obs_key!r} observation): record the demonstrations with "
            "this version's `policyforge collect`, which writes the critic observation there, or set "
            "policy.encoder.obs_key=policy"
        )
    return column


def privileged_states(demos: Demonstrations) -> np.ndarray:
    """Each frame's `observation.environment_state` [N, D_e]; DatasetError naming the fix when it has none."""
    if ENV_STATE not in demos.info["features"]:
        raise DatasetError(
            f"{demos.root} has no {ENV_STATE} (the privileged simulator state policy.privileged_aux_weight "
            "regresses): record the demonstrations with this version's `policyforge collect`, which writes the "
            "task's critic observation there, or set policy.privileged_aux_weight=0"
        )
    return demos.column(ENV_STATE)


def instruction_ids(demos: Demonstrations) -> torch.Tensor:
    """Each frame's instruction (its episode's `task`) as token ids int32 [N, L] (`sims.instruction_obs`)."""
    from policyforge.sims.instruction_obs import tokenizer

    if not demos.tasks:
        raise DatasetError(
            f"{demos.root} has no task instructions (meta/tasks.parquet, LeRobot's `task`): a policy that reads "
            "obs['instruction'] learns from instructed demonstrations, e.g. `policyforge collect arm-instructed`"
        )
    try:
        ids = tokenizer()(demos.tasks)
    except ValueError as err:  # an empty or overlong instruction
        raise DatasetError(f"{demos.root}: task {err}") from None
    return ids[torch.as_tensor(demos.column("task_index").astype(np.int64))]


class BC(Algorithm):
    """Supervised training of `policy.bc_loss` on demonstration windows."""

    step_unit = "gradient_steps"

    def __init__(self, policy: Policy, windows: DemoWindows, config: BCConfig, scenes: SceneFrames | None = None):
        """`scenes`: simulated scenes whose privileged state `policy.privileged_loss` learns beside the windows."""
        self.config, self.windows, self.scenes = config, windows, scenes
        self.model = policy
        """The weights being trained."""
        fitted = {policy.obs_key: windows.states}
        if windows.env_states is not None:
            fitted[windows.privileged_key] = windows.env_states
        if scenes is not None:
            key, scene_states = scenes.privileged_key, scenes.obs[scenes.privileged_key]
            fitted[key] = torch.cat([fitted[key], scene_states]) if key in fitted else scene_states
        policy.update_normalizer(fitted)
        self.policy = copy.deepcopy(policy).requires_grad_(False).eval()
        """The EMA of `model`: what is evaluated, checkpointed as the policy, and exported."""
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.schedule = get_cosine_schedule_with_warmup(self.optimizer, config.warmup_steps, config.gradient_steps)
        self.step = 0

    def total_steps(self, default: int) -> int:
        return self.config.gradient_steps

    def steps_per_iteration(self, env: VecEnv) -> int:
        return self.config.steps_per_iteration

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        cfg = self.config
        self.model.train()
        losses, norms, scene_losses = [], [], []
        for _ in range(cfg.steps_per_iteration):
            batch_obs, actions = self.windows.sample(cfg.batch_size)
            loss = self.model.bc_loss(batch_obs, actions)
            if self.scenes is not None:
                scene_loss = self.model.privileged_loss(self.scenes.sample(cfg.batch_size))
                scene_losses.append(float(scene_loss.detach()))
                loss = loss + scene_loss
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)))
            self.optimizer.step()
            self.schedule.step()
            self._update_ema()
            losses.append(float(loss.detach()))
        metrics = {"loss/bc": float(np.mean(losses)), "loss/lr": self.schedule.get_last_lr()[0]}
        if norms:
            metrics["loss/grad_norm"] = float(np.mean(norms))
        if scene_losses:
            metrics["loss/scene_aux"] = float(np.mean(scene_losses))
        return obs, metrics

    @torch.no_grad()
    def _update_ema(self) -> None:
        self.step += 1
        decay = min(self.config.ema_decay, (1 + self.step) / (10 + self.step))  # short memory early on
        for average, current in zip(self.policy.parameters(), self.model.parameters(), strict=True):
            if current.requires_grad:  # a frozen weight (a VLA's MiniLM and EfficientNet) is its own average
                average.lerp_(current, 1 - decay)
        for average, current in zip(self.policy.buffers(), self.model.buffers(), strict=True):
            average.copy_(current)

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "step": self.step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.step = state["step"]


def load_demonstrations(
    config: Any,
    task: str,
    env: VecEnv,
    cameras: list[str],
    field: str = "dataset",
    index: int | None = None,
    obs_key: str = "policy",
) -> Demonstrations:
    """The dataset `config.<field>` names (`[index]` of a list; an `algo` section with it and `max_episodes`),
    checked against the task and env it will be evaluated in; ConfigError on `algo.<field>` naming what is wrong
    with it (missing, empty, damaged, of another task or size)."""
    name, dataset = f"algo.{field}", getattr(config, field)
    if index is not None:
        name, dataset = f"{name}[{index}]", dataset[index]
    check(
        bool(dataset),
        name,
        f"give the dataset: {name}=data/<task> (write one with `policyforge collect <task> --episodes N`)",
    )
    path = Path(dataset)
    record = f"`policyforge collect {task} --episodes 100 --out {path}`"
    check(path.exists(), name, f"{path} does not exist; write it with {record}")
    try:
        demos = Demonstrations(path)
        recorded = demos.info.get("policyforge", {}).get("task")
        check(recorded in (None, task), name, f"{path} holds demonstrations of {recorded!r}, not sim.task={task!r}")
        check(demos.num_episodes > 0, name, f"{path} holds no episodes: record some with {record}")
        state_dim, action_dim = demos.column(obs_column(demos, obs_key)).shape[1], demos.column(ACTION).shape[1]
    except DatasetError as err:
        raise ConfigError(name, str(err)) from None
    env_dim = env.obs_shapes[obs_key][0]
    check(
        (state_dim, action_dim) == (env_dim, env.action_dim),
        name,
        f"{path} has {obs_key} observations of {state_dim} and actions of {action_dim} values, the env {env_dim} "
        f"and {env.action_dim} (different task_options?)",
    )
    missing = sorted(set(cameras) - set(demos.cameras))
    check(not missing, "sim.image.cameras", f"{path} has no video of {missing}; it has {demos.cameras}")
    wanted = config.max_episodes if field == "dataset" else 0
    check(
        wanted <= demos.num_episodes,
        "algo.max_episodes",
        f"{path} holds {demos.num_episodes} episodes, fewer than {wanted}: set algo.max_episodes to at "
        f"most {demos.num_episodes} (0: all), or record more with {record}",
    )
    return demos


def demo_windows(policy: Policy, demos: Demonstrations, config: BCConfig, cameras: list[str]) -> DemoWindows:
    """Training windows shaped for `policy` (its history length and chunk)."""
    try:
        windows = DemoWindows(
            demos,
            policy.obs_key,
            policy.n_obs_steps,
            policy.chunk_len,
            cameras,
            config.max_episodes,
            instructions=INSTRUCTION_KEY in policy.obs_keys,
            privileged_key=policy.bc_privileged_key,
        )
    except DatasetError as err:  # e.g. a video that does not decode
        raise ConfigError("algo.dataset", str(err)) from None
    if len(windows) == 0:
        raise ConfigError("algo.dataset", f"{config.dataset} has no frames")
    windows.use_image_features(policy)
    return windows


def construct_bc(config: RunConfig, env: VecEnv, policy: Policy) -> BC:
    """Behaviour cloning of the run's dataset (checked against the env it is evaluated in)."""
    check(
        not config.algo.scene_frames or policy.bc_privileged_key is not None,
        "algo.scene_frames",
        f"scenes feed the policy's privileged auxiliary loss and {type(policy).__name__} has none: set "
        "policy.privileged_aux_weight (class vla) or algo.scene_frames=0",
    )
    cameras = config.sim.image.cameras
    demos = load_demonstrations(config.algo, config.sim.task, env, cameras, obs_key=policy.obs_key)
    windows = demo_windows(policy, demos, config.algo, cameras)
    scenes = None
    if config.algo.scene_frames:
        scenes = SceneFrames(config.sim, config.algo.scene_frames, policy, config.seed, config.algo.scene_motion_steps)
    return BC(policy, windows, config.algo, scenes)


register_algorithm("bc", BCConfig, AlgorithmEntry(construct_bc))
