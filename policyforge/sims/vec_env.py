"""The batched environment contract every backend implements, and the pieces backends share.

    obs = env.reset(seed)                          # {"policy": [N, D], "critic": [N, Dc], "image"?: uint8}
    obs, reward, terminated, truncated, info = env.step(action)   # action [N, A] in [-1, 1]
    obs = env.reset_envs([0, 2])                   # new episodes in envs 0 and 2 only
    texts = env.instructions()                     # N strings: each env's current instruction, or None
    frames = env.images([0, 2])                    # image observations of envs 0 and 2 now, uint8 [2, V, H, W, 3]
    frames = env.images([0, 2], final=True)        # … as they were at the end of the last step, before any reset

Tensors live on `env.device`: observations float32 (images uint8 [N, V, H, W, 3]), `reward` float32 [N],
`terminated` and `truncated` bool [N]. `terminated` (a terminal state: fell, broke) and `truncated` (the time
limit, never where terminated) are kept apart. Finished environments (`terminated | truncated`) reset
automatically within the step: `obs` is then the first observation of the new episode, while
`info["final_obs"]` holds the last observation of every env before any reset (equal to `obs` for envs that
did not finish), so values can be bootstrapped on time-outs.

`info` is a `StepInfo`: `final_obs`, `episode` (statistics of the episodes that ended at this step),
`reward_terms` (the task's named reward components) and, for tasks with a success flag, `success`. Backends
build it with `make_step_info` from the outcome of `episodes.end_step`, the one implementation of time
limits, episode statistics and counter resets; `check_step_result` checks a step against this declaration
(every backend's test runs it).

Language: tasks that take an instruction (`Task.instructions` is not None, e.g. `arm-instructed`) draw one per
episode at reset; `env.instructions()` returns the instruction of every env's current episode as a list of N
Python strings (the episode `obs` belongs to: after a step, the new episode's in rows that auto-reset), and None
for tasks without language. Strings stay out of `obs` (tensors only) and `info`; `make_env` adds the instruction's
token ids as `obs["instruction"]` int32 [N, L] (`instruction_obs`). A caller that needs the
instruction of an episode that just ended reads `instructions()` before the step (it is fixed within an episode).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, TypedDict, cast

import numpy as np
import torch

Obs = dict[str, torch.Tensor]
"""Observations by key, [N, ...] each: float32, except `image` uint8."""

EpisodeStats = TypedDict(  # functional form: `return` is a keyword
    "EpisodeStats",
    {
        "done": torch.Tensor,
        "return": torch.Tensor,
        "length": torch.Tensor,
        "success": torch.Tensor,
        "success_once": torch.Tensor,
    },
)
EpisodeStats.__doc__ = """Statistics of the episodes that ended at this step, one [N] tensor per key, valid where
`done` and zero/false elsewhere (dtypes in `EPISODE_DTYPES`):
  done          bool: the episode ended at this step (`terminated | truncated`);
  return        float32: sum of the episode's rewards;
  length        int64: control steps in the episode, the last one included;
  success       bool: the task's success flag at the last step (false for tasks without one);
  success_once  bool: the success flag was true at some step of the episode."""

EPISODE_DTYPES: dict[str, torch.dtype] = {
    "done": torch.bool,
    "return": torch.float32,
    "length": torch.int64,
    "success": torch.bool,
    "success_once": torch.bool,
}
"""dtype of each `EpisodeStats` tensor (every one is [N])."""


class _StepInfoRequired(TypedDict):
    final_obs: Obs
    """Each env's observation at the end of this step, before any auto-reset: the keys, shapes and dtypes of
    `obs`; equal to `obs` in the rows that did not finish. Value targets bootstrap from it on time-outs."""
    episode: EpisodeStats
    """Statistics of the episodes that ended at this step (see `EpisodeStats`)."""
    reward_terms: dict[str, torch.Tensor]
    """The task's named reward components and diagnostics, float32 [N] each, exactly as `Task.reward` returned
    them beside the reward at the end of this step (before any reset). The reward is the task's function of
    them, not necessarily their sum (the pendulum's terms are weighted and sum to it; the quadruped's are
    unweighted, and its velocity-error diagnostics weigh nothing). The names are fixed per task and the same
    on every backend; empty where the simulator exposes no components (gymnasium). Evaluation reports their
    per-step means (`eval/terms/<name>`)."""


class StepInfo(_StepInfoRequired, total=False):
    """The `info` of `VecEnv.step`: every backend returns exactly these keys, all but `success` always
    (`__required_keys__`, `__optional_keys__`); the required ones are declared in `_StepInfoRequired`
    (a separate class because `NotRequired` is not read from postponed annotations on Python 3.11)."""

    success: torch.Tensor
    """bool [N] the task's success flag at the end of this step (before any reset); present exactly when the
    task has one (`Task.success` is not None)."""


StepResult = tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, StepInfo]
"""(obs, reward float32 [N], terminated bool [N], truncated bool [N], info)."""


class SimulationError(RuntimeError):
    """The simulation of some environments broke (non-finite state, contact buffer overflow, engine error)."""

    def __init__(self, env_ids: np.ndarray, cause: str):
        self.env_ids = np.asarray(env_ids)
        self.cause = cause
        shown = ", ".join(str(i) for i in self.env_ids[:8]) + (", ..." if len(self.env_ids) > 8 else "")
        super().__init__(f"simulation failed in env {shown}: {cause}")


OBS_DTYPES = {"image": torch.uint8, "instruction": torch.int32}
"""Observation entries that are not float32: camera images, an instruction's token ids."""


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
    env_steps_per_step: int = 1
    """Simulator steps each `step` executes: 1, or a decision's steps for a wrapper that executes several
    (`algos.steering.NoiseSteeredEnv`). Algorithms count env steps (`runner.total_env_steps`) by it."""
    render_mode: str = "rgb_array"
    """`render` returns RGB arrays (gymnasium's name for it)."""

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env; a seed makes everything after it reproducible."""

    @abc.abstractmethod
    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        """Advance every env by one control step: `(obs, reward, terminated, truncated, info)` with `info` a
        `StepInfo`; finished envs are reset (module docstring). Implementations account the step with
        `episodes.end_step` and build `info` with `make_step_info`."""

    @abc.abstractmethod
    def render(
        self, camera: str | None = None, env_ids: Any = None, width: int = 320, height: int = 240, final: bool = False
    ) -> np.ndarray:
        """RGB frames [n, H, W, 3] uint8 of envs `env_ids` (all by default) from `camera` (default: the first).
        `final`: the state at the end of the last step before any auto-reset, as `info["final_obs"]` observes it
        (the same frame as without it for envs that did not finish), so a film can end on an episode's last
        frame; NotImplementedError where the simulator resets inside its own step (gym)."""

    @property
    @abc.abstractmethod
    def cameras(self) -> list[str]:
        """Names of the cameras `render` accepts."""

    def instructions(self) -> list[str] | None:
        """The language instruction of every env's current episode (N strings), or None for tasks without one
        (module docstring)."""
        return None

    def images(self, env_ids: Any, final: bool = False) -> torch.Tensor:
        """Image observations uint8 [n, V, H, W, 3] of envs `env_ids` as they are now (the state the last returned
        `obs` describes), rendered on request: the `image` that `sim.image.render: on_request` leaves out of obs (the
        same frames; the fast renderer draws a subset in other tiles of its buffer, a level apart in a few pixels).
        `final`: the state at the end of the last step before any auto-reset, as `info["final_obs"]` observes it
        (a reward model scores the last state of an episode that just ended)."""
        raise RuntimeError(f"{type(self).__name__} renders no image observations (sim.image.cameras is empty)")

    def reset_to(self, initial: Any) -> Obs:
        """Reset every env to the given initial states (a `task.ResetState` of [N, ...] arrays, e.g. from
        another backend or a demonstration); its `dr_*` variables, if present, set the physical parameters."""
        raise RuntimeError(f"{type(self).__name__} cannot reset to given states")

    def reset_envs(self, env_ids: Any) -> Obs:
        """Start new episodes in envs `env_ids` only (ints in [0, N)), exactly as auto-reset does when an
        episode ends there (fresh initial state, episode counters zero, physical parameters redrawn where
        randomisation resamples on reset); the other envs continue untouched. Returns the observations of
        all N envs, the given rows being their new episodes' first observations."""
        raise RuntimeError(f"{type(self).__name__} cannot reset a subset of its envs; reset() resets all of them")

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


def env_ids_of(env_ids: Any, num_envs: int) -> np.ndarray:
    """`env_ids` (an int or a sequence of ints) as a sorted int64 array of distinct ids; ValueError naming the
    ids outside [0, num_envs)."""
    ids = np.unique(np.atleast_1d(np.asarray(env_ids, dtype=np.int64)))
    outside = ids[(ids < 0) | (ids >= num_envs)]
    if len(outside):
        raise ValueError(f"env ids {outside.tolist()} are out of range: this VecEnv has envs 0..{num_envs - 1}")
    return ids


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


def make_step_info(
    final_obs: Obs,
    episode: dict[str, Any],
    reward_terms: dict[str, Any],
    success: Any | None,
    tensor: Callable[[Any], torch.Tensor],
) -> StepInfo:
    """A backend's `info`, from its arrays (numpy or JAX, [N] each; `episode` from `episodes.end_step`) and
    `tensor`, which brings one array to torch on the env's device; the declared dtypes are applied here."""
    stats = {key: _tensor_of(tensor, episode[key], dtype) for key, dtype in EPISODE_DTYPES.items()}
    info: StepInfo = {
        "final_obs": final_obs,
        "episode": cast(EpisodeStats, stats),
        "reward_terms": {name: _tensor_of(tensor, value, torch.float32) for name, value in reward_terms.items()},
    }
    if success is not None:
        info["success"] = _tensor_of(tensor, success, torch.bool)
    return info


_NUMPY_DTYPES = {torch.float32: np.float32, torch.bool: np.bool_, torch.int64: np.int64}


def _tensor_of(tensor: Callable[[Any], torch.Tensor], array: Any, dtype: torch.dtype) -> torch.Tensor:
    """`array` as a `dtype` tensor, cast by the array's own library where it holds that dtype (numpy's cast
    costs a fifth of torch's for [N] arrays; JAX without x64 has no int64, so torch casts those)."""
    if array.dtype != _NUMPY_DTYPES[dtype] and (isinstance(array, np.ndarray) or dtype != torch.int64):
        array = array.astype(_NUMPY_DTYPES[dtype])
    result = tensor(array)
    return result if result.dtype == dtype else result.to(dtype)


def check_step_result(env: VecEnv, result: StepResult) -> None:
    """Raise ValueError naming the first place where `env.step`'s result departs from the contract (keys,
    shapes, dtypes and devices of obs, flags and `StepInfo`; episode statistics zero where not `done`)."""
    obs, reward, terminated, truncated, info = result
    n = env.num_envs

    def check(name: str, tensor: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != dtype or tuple(tensor.shape) != shape or tensor.device != env.device:
            raise ValueError(
                f"{name} must be {dtype} {list(shape)} on {env.device}, "
                f"got {tensor.dtype} {list(tensor.shape)} on {tensor.device}"
            )

    def check_obs(name: str, value: Obs) -> None:
        if set(value) != set(env.obs_shapes):
            raise ValueError(f"{name} has keys {sorted(value)}, env.obs_shapes declares {sorted(env.obs_shapes)}")
        for key, shape in env.obs_shapes.items():
            dtype = OBS_DTYPES.get(key, torch.float32)
            check(f"{name}[{key!r}]", value[key], dtype, (n, *shape))

    check_obs("obs", obs)
    check("reward", reward, torch.float32, (n,))
    check("terminated", terminated, torch.bool, (n,))
    check("truncated", truncated, torch.bool, (n,))
    if (terminated & truncated).any():
        raise ValueError("truncated must be false where terminated (a terminal state is not a time-out)")
    declared = StepInfo.__required_keys__ | StepInfo.__optional_keys__
    if not StepInfo.__required_keys__ <= set(info) <= declared:
        raise ValueError(
            f"info has keys {sorted(info)}; StepInfo declares {sorted(declared)}, all but success required"
        )
    check_obs('info["final_obs"]', info["final_obs"])
    episode = info["episode"]
    if list(episode) != list(EPISODE_DTYPES):
        raise ValueError(f'info["episode"] has keys {list(episode)}, EpisodeStats declares {list(EPISODE_DTYPES)}')
    for key, dtype in EPISODE_DTYPES.items():
        check(f'info["episode"][{key!r}]', episode[key], dtype, (n,))
    if not torch.equal(episode["done"], terminated | truncated):
        raise ValueError('info["episode"]["done"] must equal terminated | truncated')
    for key in EPISODE_DTYPES:
        if episode[key][~episode["done"]].any():
            raise ValueError(f'info["episode"][{key!r}] must be zero where the episode did not end')
    if (episode["length"][episode["done"]] < 1).any():
        raise ValueError('info["episode"]["length"] must count the steps of an ended episode (>= 1)')
    for name, value in info["reward_terms"].items():
        check(f'info["reward_terms"][{name!r}]', value, torch.float32, (n,))
    if "success" in info:
        check('info["success"]', info["success"], torch.bool, (n,))


def to_torch(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """Wrap a numpy array without copying (on the CPU), then move it to `device` if needed."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)
