"""MJX backend: the same tasks on JAX, GPU-vectorised.

One jitted function advances all N envs by a control step: the task's action mapping, `control_decimation`
physics steps (`lax.scan` over `mjx.step`, vmapped over envs and over per-env randomised model fields),
rewards, terminations, episode statistics and auto-reset, all on the JAX device. Observations and actions
cross to torch through DLPack, without copies. Compiled programs are cached per (task, options,
randomisation, N) in the process and on disk (JAX's persistent compilation cache).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import torch

from policyforge.sims import render as _render
from policyforge.sims.config import ActuatorConfig, ImageConfig, RandomizationConfig
from policyforge.sims.mjx_program import EnvState, MjxProgram
from policyforge.sims.task import ResetState, Task
from policyforge.sims.vec_env import (
    Obs,
    SimulationError,
    StepResult,
    VecEnv,
    action_shape_error,
    env_ids_of,
    make_step_info,
    non_finite_action_error,
)

CACHE_DIR_ENV = "POLICYFORGE_JAX_CACHE"
"""Environment variable naming the persistent compilation cache (default ~/.cache/policyforge/jax)."""

_PROGRAMS: dict[tuple, MjxProgram] = {}


class MjxVecEnv(VecEnv):
    """The `mjx` backend of the VecEnv contract for a policyforge `Task`."""

    def __init__(
        self,
        task: Task,
        num_envs: int,
        *,
        device: str | torch.device = "cpu",
        randomization: RandomizationConfig | None = None,
        actuator: ActuatorConfig | None = None,
        image: ImageConfig | None = None,
        seed: int = 0,
    ):
        from policyforge.config import ConfigError

        if image is not None and image.cameras:
            raise ConfigError(
                "sim.image.cameras",
                "image observations are rendered by the mujoco backend only (MJX has no rasteriser here); "
                "use sim.backend=mujoco or remove sim.image.cameras",
            )
        enable_compilation_cache()
        self.task = task
        self.num_envs = num_envs
        self.action_dim = task.action_dim
        self.device = torch.device(device)
        self.control_dt = task.config.control_dt
        self.episode_steps = task.episode_steps
        randomization = randomization or RandomizationConfig()
        self.program, self.compile_seconds = _program(task, num_envs, randomization, actuator or ActuatorConfig())
        """Seconds spent compiling (0 when this process had compiled the same program already)."""
        self._renderers = _render.RendererCache(task.model)
        self.state: EnvState
        self._final_poses: tuple[jax.Array, jax.Array, jax.Array] | None = None
        """done [N], qpos [N, nq] and mocap_pos [N, nmocap, 3] of the last step before its resets."""
        obs = self.reset(seed)
        self.obs_shapes = {key: tuple(value.shape[1:]) for key, value in obs.items()}

    # -- contract ----------------------------------------------------------------------------------------

    @property
    def cameras(self) -> list[str]:
        return _render.camera_names(self.task.model)

    def reset(self, seed: int | None = None) -> Obs:
        self._final_poses = None
        key = jax.random.PRNGKey(seed) if seed is not None else self.state.key
        self.state, obs = self.program.reset(key)
        return self._torch_tree(obs)

    def instructions(self) -> list[str] | None:
        return self.task.instructions(self.state.vars)

    def reset_to(self, initial: ResetState) -> Obs:
        self._final_poses = None
        key = self.state.key
        initial = ResetState(*(jax.tree.map(jnp.asarray, tuple(initial))))
        self.state, obs = self.program.reset_to(key, initial)
        return self._torch_tree(obs)

    def reset_envs(self, env_ids: Any) -> Obs:
        mask = np.isin(np.arange(self.num_envs), env_ids_of(env_ids, self.num_envs))
        self.state, obs = self.program.reset_envs(self.state, jnp.asarray(mask))
        return self._torch_tree(obs)

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        action = self._to_jax_action(action)
        state, out = self.program.step(self.state, action)
        if bool(out["any_bad"]):
            self._raise_bad(out)
        self.state = state
        self._final_poses = (out["episode"]["done"], out["final_qpos"], out["final_mocap_pos"])
        tensor = self._tensor
        final_obs = self._torch_tree(out["final_obs"])
        info = make_step_info(final_obs, out["episode"], out["reward_terms"], out.get("success"), tensor)
        return (
            self._torch_tree(out["obs"]),
            tensor(out["reward"]),
            tensor(out["terminated"]),
            tensor(out["truncated"]),
            info,
        )

    def render(
        self, camera: str | None = None, env_ids: Any = None, width: int = 320, height: int = 240, final: bool = False
    ) -> np.ndarray:
        ids = np.arange(self.num_envs) if env_ids is None else np.atleast_1d(np.asarray(env_ids))
        rows = jax.tree.map(lambda x: x[ids], self.state.data)
        datas = mujoco.mjx.get_data(self.task.model, rows)
        if final and self._final_poses is not None:
            done, qpos, mocap_pos = (np.asarray(x[ids]) for x in self._final_poses)
            for data, reset, env_qpos, env_mocap in zip(datas, done, qpos, mocap_pos, strict=True):
                if reset:
                    _render.pose_before_reset(self.task.model, data, env_qpos, env_mocap)
        renderer = self._renderers.get(width, height)
        return np.stack([renderer.render(data, camera) for data in datas])

    def get_state(self) -> dict[str, Any]:
        """Every array of the device state (physics, task variables, model fields, counters, key) on the host."""
        return {"mjx_leaves": [np.asarray(leaf) for leaf in jax.tree.leaves(self.state)]}

    def set_state(self, state: dict[str, Any]) -> None:
        leaves, treedef = jax.tree.flatten(self.state)
        if "mjx_leaves" not in state:
            raise ValueError("this snapshot comes from another backend; resume with the backend that wrote it")
        saved = list(state["mjx_leaves"])
        if len(saved) == len(leaves) + 1:  # written before `EpisodeCounters`: a `steps` leaf, equal to the lengths,
            del saved[len(leaves) - 4]  # came before returns, lengths, success_once and the key
        if len(saved) != len(leaves) or any(s.shape != np.shape(x) for s, x in zip(saved, leaves, strict=True)):
            raise ValueError("snapshot does not match this env (another task, option or number of envs)")
        self.state = jax.tree.unflatten(treedef, [jnp.asarray(s) for s in saved])
        self._final_poses = None

    def close(self) -> None:
        self._renderers.close()

    # -- internals ---------------------------------------------------------------------------------------

    def _to_jax_action(self, action: torch.Tensor | np.ndarray) -> jax.Array:
        shape = tuple(action.shape)
        if shape != (self.num_envs, self.action_dim):
            raise ValueError(action_shape_error(self.num_envs, self.action_dim, shape))
        if isinstance(action, torch.Tensor):
            return torch_to_jax(action.detach().to(torch.float32))
        return jnp.asarray(action, dtype=jnp.float32)

    def _raise_bad(self, out: dict[str, jax.Array]) -> None:
        bad_action, bad_physics, bad_output = (np.asarray(out[k]) for k in ("bad_action", "bad_physics", "bad_output"))
        if bad_action.any():
            raise ValueError(non_finite_action_error(np.flatnonzero(bad_action)))
        if bad_physics.any():
            raise SimulationError(
                np.flatnonzero(bad_physics),
                "non-finite joint positions or velocities: the simulation diverged "
                "(lower the timestep or gains, or check the actions)",
            )
        raise SimulationError(np.flatnonzero(bad_output), "non-finite reward or observation (NaN or inf)")

    def _tensor(self, array: jax.Array) -> torch.Tensor:
        return jax_to_torch(array, self.device)

    def _torch_tree(self, tree: Any) -> Any:
        return jax.tree.map(self._tensor, tree)


def jax_to_torch(array: jax.Array, device: torch.device) -> torch.Tensor:
    """A torch view of a JAX array through DLPack (no copy when both live on the same device)."""
    tensor = torch.from_dlpack(array)
    return tensor if tensor.device == device else tensor.to(device)


def torch_to_jax(tensor: torch.Tensor) -> jax.Array:
    """A JAX view of a torch tensor through DLPack (no copy for a contiguous tensor on JAX's device; a
    host-to-device copy when torch works on the CPU and JAX on an accelerator)."""
    on_cpu = tensor.device.type == "cpu"
    if jax.default_backend() == "cpu":
        return jnp.from_dlpack((tensor if on_cpu else tensor.cpu()).contiguous())
    return jnp.asarray(tensor.numpy()) if on_cpu else jnp.from_dlpack(tensor.contiguous())


def _program(
    task: Task, num_envs: int, randomization: RandomizationConfig, actuator: ActuatorConfig
) -> tuple[MjxProgram, float]:
    """The compiled program for this task, options, randomisation, actuator model and N (built once per process)."""
    key = (task.name, repr(task.config), repr(randomization), repr(actuator), num_envs)
    if key in _PROGRAMS:
        return _PROGRAMS[key], 0.0
    start = time.perf_counter()
    program = MjxProgram(task, num_envs, randomization, actuator)
    program.compile()
    _PROGRAMS[key] = program
    return program, time.perf_counter() - start


def enable_compilation_cache() -> None:
    """Persist compiled XLA programs on disk, so a second run of the same config skips most compile time."""
    if jax.config.jax_compilation_cache_dir:
        return
    path = Path(os.environ.get(CACHE_DIR_ENV, Path.home() / ".cache" / "policyforge" / "jax"))
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
