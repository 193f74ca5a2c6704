"""The batched environment contract every backend implements, and the pieces backends share.

    obs = env.reset(seed)                          # {"policy": [N, D], "critic": [N, Dc], "image"?: uint8}
    obs, reward, terminated, truncated, info = env.step(action)   # action [N, A] in [-1, 1]

Tensors live on `env.device`. Finished environments reset automatically: `obs` is then the first
observation of the new episode, while `info["final_obs"]` holds the last observation of every env before
any reset (equal to `obs` for envs that did not finish), so values can be bootstrapped on time-outs.
`terminated` (a terminal state) and `truncated` (time limit) are never merged. `info["episode"]` holds the
statistics of episodes that ended at this step, valid where `info["episode"]["done"]` is true.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import torch

Obs = dict[str, torch.Tensor]
StepResult = tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


class SimulationError(RuntimeError):
    """The simulation of some environments broke (non-finite state, contact buffer overflow, engine error)."""

    def __init__(self, env_ids: np.ndarray, cause: str):
        self.env_ids = np.asarray(env_ids)
        self.cause = cause
        shown = ", ".join(str(i) for i in self.env_ids[:8]) + (", ..." if len(self.env_ids) > 8 else "")
        super().__init__(f"simulation failed in env {shown}: {cause}")


class VecEnv(abc.ABC):
    """N environments stepped together; see the module docstring for the contract."""

    num_envs: int
    """N, the number of environments."""
    action_dim: int
    """A: actions are [N, A] in [-1, 1]."""
    obs_shapes: dict[str, tuple[int, ...]]
    """Per-env shape of each observation key, e.g. {"policy": (D,), "critic": (Dc,)}."""
    device: torch.device
    """Where observations, rewards and flags are returned."""
    control_dt: float
    """Seconds of simulated time per step."""
    episode_steps: int
    """Steps after which an episode is truncated."""
    render_mode: str = "rgb_array"
    """`render` returns RGB arrays (gymnasium's name for it)."""

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; a seed makes everything after it reproducible."""

    @abc.abstractmethod
    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        """Advance every env by one control step."""

    @abc.abstractmethod
    def render(self, camera: str | None = None, env_ids: Any = None, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB frames [n, H, W, 3] uint8 of envs `env_ids` (all by default) from `camera` (default: the first)."""

    @property
    @abc.abstractmethod
    def cameras(self) -> list[str]:
        """Names of the cameras `render` accepts."""

    def reset_to(self, initial: Any) -> Obs:
        """Reset every env to the given initial states (a `task.ResetState` of [N, ...] arrays, e.g. from
        another backend or a demonstration); its `dr_*` variables, if present, set the physical parameters."""
        raise RuntimeError(f"{type(self).__name__} cannot reset to given states")

    def get_state(self) -> dict[str, Any] | None:
        """A snapshot from which `set_state` continues exactly (for resumable training), or None if the
        backend cannot snapshot its simulators."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a `get_state` snapshot."""
        raise RuntimeError(f"{type(self).__name__} cannot restore snapshots")

    def close(self) -> None:
        """Release simulator resources."""

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def validate_action(action: torch.Tensor | np.ndarray, num_envs: int, action_dim: int) -> np.ndarray:
    """Actions as float64 numpy [N, A] clipped to [-1, 1]; raises ValueError on wrong shape or NaN/inf."""
    if isinstance(action, torch.Tensor):
        action = action.detach().cpu().numpy()
    action = np.asarray(action, dtype=np.float64)
    if action.shape != (num_envs, action_dim):
        raise ValueError(action_shape_error(num_envs, action_dim, action.shape))
    finite = np.isfinite(action).all(axis=1)
    if not finite.all():
        raise ValueError(non_finite_action_error(np.flatnonzero(~finite)))
    return np.clip(action, -1.0, 1.0)


def action_shape_error(num_envs: int, action_dim: int, shape: tuple[int, ...]) -> str:
    return f"action must have shape [num_envs, action_dim] = [{num_envs}, {action_dim}], got {list(shape)}"


def non_finite_action_error(env_ids: np.ndarray) -> str:
    return (
        f"action is NaN or inf in env {', '.join(map(str, env_ids[:8]))}: the policy produced non-finite outputs; "
        "check its parameters and observation normalisation"
    )


def check_finite(env_ids_all: int, named: dict[str, np.ndarray]) -> None:
    """Raise SimulationError naming the envs whose arrays [N, ...] in `named` hold NaN or inf."""
    for name, array in named.items():
        finite = np.isfinite(array.reshape(env_ids_all, -1)).all(axis=1)
        if not finite.all():
            raise SimulationError(np.flatnonzero(~finite), f"non-finite {name} (NaN or inf)")


class EpisodeTracker:
    """Running return, length and success of each env; reports finished episodes for `info["episode"]`."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.success_once = np.zeros(num_envs, dtype=bool)

    def add(self, reward: np.ndarray, success: np.ndarray | None) -> None:
        self.returns += reward
        self.lengths += 1
        if success is not None:
            self.success_once |= success

    def finish(self, done: np.ndarray, success: np.ndarray | None, device: torch.device) -> dict[str, torch.Tensor]:
        """Statistics of the episodes ending now (rows where `done`), then zero those envs' counters."""
        if success is None:
            success = np.zeros_like(done)
        stats = {
            "done": done.copy(),
            "return": np.where(done, self.returns, 0.0).astype(np.float32),
            "length": np.where(done, self.lengths, 0),
            "success": done & success,
            "success_once": done & (self.success_once | success),
        }
        self.returns[done] = 0.0
        self.lengths[done] = 0
        self.success_once[done] = False
        return {k: torch.from_numpy(v).to(device) for k, v in stats.items()}

    def clear(self) -> None:
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self.success_once[:] = False


def to_torch(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Wrap a numpy array without copying (on the CPU), then move it to `device` if needed."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)
