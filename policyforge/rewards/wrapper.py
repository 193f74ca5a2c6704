"""A VecEnv whose reward comes from a reward model reading the env's cameras and instruction (`sim.reward_model`).

    env = RewardWrapper(make_env(sim), model, RewardModelConfig(path=..., signal="dense", every=4))
    obs, reward, terminated, truncated, info = env.step(action)
    info["reward_terms"]["gt_reward"]        # the task's own reward, logged beside (never seen by the learner)
    info["reward_terms"]["model_progress"]   # the model's latest progress of each env (its success: model_success)
    info["success"]                          # still the simulator's flag: evaluation reads ground truth

Every `every` control steps (and at the last step of every episode) the model scores the frames of the state after
the step — the env's image observations, or `env.images(ids, final=True)` where it renders on request, so an
ended episode's last state is scored, not the next episode's first. The reward (`sim.reward_model.signal`) is the
progress itself at each scored step, or (dense) the progress gained since the env's previous scored frame (0 before
an episode's first: that is an episode's baseline), so that an episode's rewards sum to its last progress.
`info["episode"]["return"]` sums the rewards this wrapper returns.

Asynchronous scoring: step t's frames go to a worker thread and step t + 1's simulation runs meanwhile; step t's
reward is returned with step t + 1 — one step late, which the learner sees (a return's discounting moves by one
step) — except at an episode's end, where the wrapper waits, so no reward crosses into the next episode and the
returns equal the synchronous ones (tested).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardModel, RewardScores
from policyforge.rewards.config import RewardModelConfig
from policyforge.sims.config import ImageConfig
from policyforge.sims.vec_env import Obs, StepResult, VecEnv
from policyforge.sims.wrapper import VecEnvWrapper

LOGGED_TERMS = ("gt_reward", "model_reward", "model_progress", "model_success")
"""The `info["reward_terms"]` the wrapper adds (evaluation reports their means: `eval/terms/<name>`), and
`model_disagreement` where the model says how unsure it is (an ensemble's spread of progress)."""


@dataclasses.dataclass
class _Job:
    """One scoring: the envs scored, which of them ended their episode, and the model's answer (a future)."""

    env_ids: torch.Tensor
    ended: torch.Tensor
    scores: Future[RewardScores]


class RewardWrapper(VecEnvWrapper):
    """`env` with `model`'s reward (module docstring)."""

    def __init__(self, env: VecEnv, model: RewardModel, config: RewardModelConfig, image: ImageConfig):
        super().__init__(env)
        self.model, self.config = model, config
        self.views = camera_views(model, image)
        self.on_request = image.render == "on_request"
        inputs = model.inputs
        if inputs.window > 1 and inputs.frame_stride != config.every:
            raise ConfigError(
                "sim.reward_model.every",
                f"the model reads windows of {inputs.window} frames {inputs.frame_stride} control steps apart: "
                f"score every {inputs.frame_stride} steps (got {config.every})",
            )
        n = env.num_envs
        frame = (len(self.views), inputs.height, inputs.width, 3)
        self.history = torch.zeros((n, inputs.window, *frame), dtype=torch.uint8)
        """Each env's last `window` scored frames [N, T, V, H, W, 3]."""
        self.fresh = torch.ones(n, dtype=torch.bool)
        """Envs whose episode has no scored frame yet (their window starts as copies of the first one)."""
        self.last_progress = torch.zeros(n)
        self.progress, self.success, self.disagreement = torch.zeros(n), torch.zeros(n), torch.zeros(n)
        """The latest scores of each env (logged)."""
        self.undelivered = torch.zeros(n)
        """Rewards scored but not returned yet (asynchronous mode)."""
        self.returns = torch.zeros(n, dtype=torch.float64)
        self.steps = 0
        self.pending: _Job | None = None
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="reward-model") if config.asynchronous else None

    # -- the contract --------------------------------------------------------------------------------------

    def started(self, obs: Obs, env_ids: torch.Tensor | None) -> Obs:
        self._settle()
        restarted = self.started_mask(env_ids)
        self._restart(restarted)
        self.undelivered[restarted] = 0.0
        if env_ids is None:
            self.steps = 0
        return obs

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        instructions = self.env.instructions()  # before the step: the instruction of each episode being scored
        obs, gt_reward, terminated, truncated, info = self.env.step(action)
        ended = (terminated | truncated).cpu()
        self.steps += 1
        scored = ended.clone() if self.steps % self.config.every else torch.ones_like(ended)
        job = self._submit(scored.nonzero()[:, 0], ended, info, instructions) if scored.any() else None
        if self.pending is not None:
            self._resolve(self.pending)
        self.pending = job
        if job is not None and (self.worker is None or ended.any()):
            self._resolve(job)
            self.pending = None
        model_reward, self.undelivered = self.undelivered, torch.zeros_like(self.undelivered)
        reward = self._env_reward(model_reward, gt_reward.cpu()).to(gt_reward.device)
        self._account(info, reward, ended, gt_reward, model_reward)
        return obs, reward, terminated, truncated, info

    def get_state(self) -> dict[str, Any] | None:
        state = self.env.get_state()
        if state is None:
            return None
        self._settle()
        mine = {name: getattr(self, name).clone() for name in _STATE_TENSORS}
        return {"env": state, "reward_wrapper": {**mine, "steps": self.steps}}

    def set_state(self, state: dict[str, Any]) -> None:
        self._settle()
        self.env.set_state(state["env"])
        for name in _STATE_TENSORS:
            if name in state["reward_wrapper"]:  # a snapshot from before `disagreement` was kept has none
                getattr(self, name).copy_(state["reward_wrapper"][name])
        self.steps = state["reward_wrapper"]["steps"]

    def close(self) -> None:
        self._settle()
        if self.worker is not None:
            self.worker.shutdown()
        self.env.close()

    # -- internals -----------------------------------------------------------------------------------------

    def _submit(self, env_ids: torch.Tensor, ended: torch.Tensor, info: Any, instructions: list[str] | None) -> _Job:
        if instructions is None:
            raise ValueError(
                f"instructions: {type(self.env).__name__}'s task has none, and a reward model scores the instructed "
                "task: use a task that draws instructions (e.g. arm-instructed)"
            )
        frames = self._frames(env_ids, info)
        fresh = self.fresh[env_ids]
        window = self.history[env_ids]
        window[fresh] = frames[fresh, None]  # a new episode's window: its first scored frame repeated
        window = torch.cat([window[:, 1:], frames[:, None]], dim=1)
        self.history[env_ids] = window
        self.fresh[env_ids] = ended[env_ids]
        texts = [instructions[i] for i in env_ids.tolist()]
        if self.worker is None:
            scores: Future[RewardScores] = Future()
            scores.set_result(self.model.score(window, texts))
        else:
            scores = self.worker.submit(self.model.score, window, texts)
        return _Job(env_ids, ended[env_ids], scores)

    def _frames(self, env_ids: torch.Tensor, info: Any) -> torch.Tensor:
        """The frames [n, V, H, W, 3] of envs `env_ids` after the step (before any auto-reset), the model's views."""
        if self.on_request:
            frames = self.env.images(env_ids.numpy(), final=True)
        else:
            frames = info["final_obs"]["image"][env_ids.to(info["final_obs"]["image"].device)]
        return frames[:, self.views].cpu()

    def _resolve(self, job: _Job) -> None:
        """Turn a job's scores into rewards (in submission order: the dense reward differences chain)."""
        scores = job.scores.result()
        progress, success = scores.progress.cpu(), scores.success.cpu()
        ids = job.env_ids
        reward = torch.zeros(len(ids))
        if self.config.signal in ("progress", "progress_success"):
            reward += progress
        if self.config.signal == "progress_success":
            reward += success
        if self.config.signal in ("dense", "both"):
            reward += progress - self.last_progress[ids]
        if self.config.signal in ("sparse", "both"):
            reward += (success >= self.config.success_threshold).float()
        self.undelivered[ids] += reward
        self.last_progress[ids] = torch.where(job.ended, 0.0, progress)
        self.progress[ids], self.success[ids] = progress, success
        if scores.disagreement is not None:
            self.disagreement[ids] = scores.disagreement.cpu()

    def _settle(self) -> None:
        """Resolve a pending asynchronous job (before a reset or a snapshot)."""
        if self.pending is not None:
            self._resolve(self.pending)
            self.pending = None

    def _restart(self, envs: torch.Tensor) -> None:
        self.fresh[envs] = True
        self.last_progress[envs] = 0.0
        self.returns[envs] = 0.0

    def _env_reward(self, model_reward: torch.Tensor, gt_reward: torch.Tensor) -> torch.Tensor:
        scaled = self.config.scale * model_reward
        return (scaled if self.config.mode == "replace" else gt_reward + scaled).float()

    def _account(
        self, info: Any, reward: torch.Tensor, ended: torch.Tensor, gt_reward: torch.Tensor, model_reward: torch.Tensor
    ) -> None:
        """The logged terms, and the episode returns of the rewards returned."""
        self.returns += reward.cpu().double()
        episode = info["episode"]
        device = episode["return"].device
        episode["return"] = torch.where(ended, self.returns, 0.0).float().to(device)
        self.returns[ended] = 0.0
        terms = {
            "gt_reward": gt_reward.float(),
            "model_reward": model_reward,
            "model_progress": self.progress.clone(),
            "model_success": self.success.clone(),
        }
        if self.model.reports_disagreement:
            terms["model_disagreement"] = self.disagreement.clone()
        info["reward_terms"] = {**info["reward_terms"], **{k: v.to(device) for k, v in terms.items()}}


_STATE_TENSORS = ("history", "fresh", "last_progress", "progress", "success", "disagreement", "undelivered", "returns")
"""The wrapper's own state, snapshot with the env's (`get_state`)."""


def camera_views(model: RewardModel, image: ImageConfig) -> list[int]:
    """Indices into sim.image.cameras of the model's cameras, in its order; ConfigError naming sim.image.* where the
    env renders other cameras or another size."""
    inputs = model.inputs
    missing = [camera for camera in inputs.cameras if camera not in image.cameras]
    if missing:
        rendered = image.cameras or "none"
        raise ConfigError(
            "sim.image.cameras",
            f"the reward model reads cameras {list(inputs.cameras)}; the env renders {rendered}: add {missing}",
        )
    if (image.width, image.height) != (inputs.width, inputs.height):
        raise ConfigError(
            "sim.image.width",
            f"the reward model reads {inputs.width} x {inputs.height} frames; the env renders {image.width} x "
            f"{image.height}: set sim.image.width={inputs.width} sim.image.height={inputs.height}",
        )
    return [image.cameras.index(camera) for camera in inputs.cameras]
