"""Native MuJoCo backend: N simulations in one `mujoco.batch.Batch`, stepped by C threads without the GIL.

Physics state lives in the batch; task functions read its bound arrays ([N, ...] numpy views, no copies)
and results reach torch through `torch.from_numpy` (no copies on the CPU). Per-env physical parameters are
the batch's expanded model fields, written by the randomiser.
"""

from __future__ import annotations

from typing import Any

import mujoco
import mujoco.batch
import numpy as np
import torch

from policyforge.sims import render as _render  # sets MUJOCO_GL before mujoco is imported
from policyforge.sims.actuators import actuators_of
from policyforge.sims.config import ActuatorConfig, ImageConfig, RandomizationConfig
from policyforge.sims.episodes import EpisodeCounters, end_step
from policyforge.sims.randomization import Randomizer
from policyforge.sims.task import NumpySampler, ResetState, Task, TaskState
from policyforge.sims.vec_env import (
    Obs,
    SimulationError,
    StepResult,
    VecEnv,
    check_finite,
    env_ids_of,
    make_step_info,
    to_torch,
    validate_action,
)

_WARNING_CAUSES = {
    mujoco.mjtWarning.mjWARN_CONTACTFULL: "contact buffer overflow: too many contacts for the arena; "
    "raise <size memory=...> in the MJCF or reduce colliding geoms",
    mujoco.mjtWarning.mjWARN_CNSTRFULL: "constraint buffer overflow: too many constraints for the arena; "
    "raise <size memory=...> in the MJCF",
    mujoco.mjtWarning.mjWARN_BADQPOS: "non-finite or huge joint positions: the simulation diverged",
    mujoco.mjtWarning.mjWARN_BADQVEL: "non-finite or huge joint velocities: the simulation diverged",
    mujoco.mjtWarning.mjWARN_BADQACC: "non-finite or huge accelerations: the simulation diverged",
    mujoco.mjtWarning.mjWARN_BADCTRL: "non-finite control: the task's action mapping produced NaN/inf",
}
_DIVERGED_HINT = " (MuJoCo reset this env; lower the timestep or gains, or check the actions)"


class MujocoVecEnv(VecEnv):
    """The `mujoco` backend of the VecEnv contract for a policyforge `Task`."""

    def __init__(
        self,
        task: Task,
        num_envs: int,
        *,
        num_threads: int = 0,
        device: str | torch.device = "cpu",
        randomization: RandomizationConfig | None = None,
        actuator: ActuatorConfig | None = None,
        image: ImageConfig | None = None,
        seed: int = 0,
    ):
        self.task = task
        self.num_envs = num_envs
        self.action_dim = task.action_dim
        self.device = torch.device(device)
        self.control_dt = task.config.control_dt
        self.episode_steps = task.episode_steps
        model = task.model
        self.batch = mujoco.batch.Batch(model, num_envs, num_threads, persistent=True)
        self.phys = {name: self.batch.bind(name) for name in task.physics_fields}
        self._state_fields = {name: self.batch.bind(name) for name in ("qpos", "qvel", "ctrl")}
        if model.nmocap:
            self._state_fields["mocap_pos"] = self.batch.bind("mocap_pos")
        randomization = randomization or RandomizationConfig()
        self.randomizer = Randomizer(randomization, model, task.root_body, task.name)
        self.actuators = actuators_of(task, actuator, randomization)
        self._resample_on_reset = randomization.resample_on_reset
        self._image = image if image is not None and image.cameras else None
        self._images_each_step = self._image is not None and self._image.render == "every_step"
        self._renderers = _render.RendererCache(task.model)
        self._scratch = mujoco.MjData(model)
        self._final_poses: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        """qpos and mocap_pos, by env, of the envs the last step reset, as they were before the reset."""
        self.rng = np.random.default_rng(seed)
        self.episodes: EpisodeCounters
        """Return, length (the time-limit clock) and success so far of each env's episode."""
        self.vars: dict[str, np.ndarray] = {}
        self._expanded_fields: set[str] = set()
        self._warning_counts = np.zeros(self.batch.warning.shape[:2], dtype=np.int64)
        obs = self.reset(seed)
        self.obs_shapes = {key: tuple(value.shape[1:]) for key, value in obs.items()}
        if self._image is not None:
            self.obs_shapes["image"] = (len(self._image.cameras), self._image.height, self._image.width, 3)

    # -- contract ----------------------------------------------------------------------------------------

    @property
    def cameras(self) -> list[str]:
        return _render.camera_names(self.task.model)

    def reset(self, seed: int | None = None) -> Obs:
        self._final_poses = {}
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._reset_envs(np.arange(self.num_envs), resample=True)
        self.episodes = EpisodeCounters.zeros(self.num_envs, np, np.float64, np.int64)
        obs = self.task.observe(self.state, np)
        return self._to_torch_obs(obs, self._obs_images(np.arange(self.num_envs)))

    def instructions(self) -> list[str] | None:
        return self.task.instructions(self.vars)

    def images(self, env_ids: Any, final: bool = False) -> torch.Tensor:
        if self._image is None:
            return super().images(env_ids, final)
        ids = np.atleast_1d(np.asarray(env_ids, dtype=np.int64))
        env_ids_of(ids, self.num_envs)  # ValueError naming ids out of range
        return to_torch(self._images(ids, final), self.device)

    def reset_to(self, initial: ResetState) -> Obs:
        self._final_poses = {}
        self._reset_envs(np.arange(self.num_envs), resample=True, initial=initial)
        self.episodes = EpisodeCounters.zeros(self.num_envs, np, np.float64, np.int64)
        return self._to_torch_obs(self.task.observe(self.state, np), self._obs_images(np.arange(self.num_envs)))

    def reset_envs(self, env_ids: Any) -> Obs:
        ids = env_ids_of(env_ids, self.num_envs)
        self._reset_envs(ids, resample=self._resample_on_reset)
        self.episodes = self.episodes.restart(np.isin(np.arange(self.num_envs), ids), np)
        return self._to_torch_obs(self.task.observe(self.state, np), self._obs_images(np.arange(self.num_envs)))

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        action = validate_action(action, self.num_envs, self.action_dim)
        task = self.task
        previous = self._state_fields["ctrl"].copy() if self.actuators.per_physics_step else None
        self._state_fields["ctrl"][:], self.vars = task.actuate(action, self.state, np)
        if self.randomizer.push_dofs is not None:  # the interval event
            push = self.randomizer.push(self.episodes.lengths, self.control_dt, NumpySampler(self.rng), np)
            self._state_fields["qvel"][:, self.randomizer.push_dofs] += push
        self._physics_step(previous)
        self.vars = task.update_vars(self.state, action, np)
        state = self.state
        reward, terms = task.reward(state, action, np)
        success = task.success(state, np)
        terminated = np.asarray(task.terminated(state, np), dtype=bool)
        obs = task.observe(state, np)
        check_finite(self.num_envs, {"reward": reward, **{f"observation {k!r}": v for k, v in obs.items()}})
        outcome = end_step(self.episodes, reward, terminated, success, np, episode_steps=self.episode_steps)
        self.episodes = outcome.counters
        images = self._obs_images(np.arange(self.num_envs))
        final_obs = self._to_torch_obs(obs, images)
        info = make_step_info(final_obs, outcome.episode, terms, success, self._tensor)
        next_obs = final_obs
        self._final_poses = {}
        if outcome.done.any():
            ids = np.flatnonzero(outcome.done)
            self._keep_final_poses(ids)
            self._reset_envs(ids, resample=self._resample_on_reset)
            next_obs = self._merge_reset_obs(obs, images, ids)
        reward = to_torch(reward.astype(np.float32), self.device)
        return next_obs, reward, self._tensor(terminated), self._tensor(outcome.truncated), info

    def render(
        self, camera: str | None = None, env_ids: Any = None, width: int = 320, height: int = 240, final: bool = False
    ) -> np.ndarray:
        ids = np.arange(self.num_envs) if env_ids is None else np.atleast_1d(np.asarray(env_ids))
        renderer = self._renderers.get(width, height)
        return np.stack([renderer.render(self._state_of(env, final), camera) for env in map(int, ids)])

    def _state_of(self, env: int, final: bool) -> mujoco.MjData:
        """Env `env`'s state in the scratch MjData (`final`: its pose before the last step's auto-reset, if any)."""
        data = self.batch.get_data(env, self._scratch)
        if final and env in self._final_poses:
            qpos, mocap_pos = self._final_poses[env]
            _render.pose_before_reset(self.task.model, data, qpos, mocap_pos)
        return data

    def get_state(self) -> dict[str, Any]:
        """Physics state rows, per-env model fields, task variables, counters and the RNG."""
        return {
            "physics": self.batch.state.copy(),
            "model_fields": {name: self.batch.expand(name).copy() for name in self._expanded_fields},
            "vars": {k: v.copy() for k, v in self.vars.items()},
            "tracker": tuple(counter.copy() for counter in self.episodes),  # returns, lengths, success_once
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state["physics"].shape != self.batch.state.shape:
            raise ValueError(f"snapshot of {state['physics'].shape[0]} envs cannot restore {self.num_envs} envs")
        for name, values in state["model_fields"].items():
            self.batch.expand(name)[:] = values
            self._expanded_fields.add(name)
        if self.randomizer.changes_mass:
            self.batch.set_const()
        self.batch.state[:] = state["physics"]
        self.vars = {k: v.copy() for k, v in state["vars"].items()}
        self.episodes = EpisodeCounters(*(np.array(counter) for counter in state["tracker"]))
        self.rng.bit_generator.state = state["rng"]
        self._final_poses = {}
        # positions and velocities current, as after a step; the next step continues from them
        self.batch.forward(stage=mujoco.mjtStage.mjSTAGE_VEL)
        self._warning_counts[:] = self.batch.warning[:, :, 1]

    def close(self) -> None:
        self._renderers.close()

    # -- internals ---------------------------------------------------------------------------------------

    @property
    def state(self) -> TaskState:
        return TaskState(self.phys, self.vars)

    def _physics_step(self, previous: np.ndarray | None) -> None:
        """One control step of physics; with an actuator model acting within it (`sims/actuators.py`), one physics
        step at a time: the delayed command, the torque limits at the joints' speed. `previous`: the controls
        [N, nu] of the last control step."""
        stage, decimation = mujoco.mjtStage.mjSTAGE_VEL, self.task.control_decimation
        try:
            if not self.actuators.per_physics_step:
                self.batch.step(nstep=decimation, stage=stage)
            else:
                ctrl, qvel, actuators = self._state_fields["ctrl"], self._state_fields["qvel"], self.actuators
                new, strength, delay = ctrl.copy(), self.vars["dr_strength"], self.vars["dr_delay"]
                if actuators.saturation is not None:  # the curve moves the limits; otherwise the randomiser set them
                    forcerange = self.batch.expand("actuator_forcerange")
                    self._expanded_fields.add("actuator_forcerange")
                gains = (self.vars["dr_kp"], self.vars["dr_kd"])
                for step in range(decimation):
                    ctrl[:] = actuators.ctrl_at(step, previous, new, delay, np)
                    if actuators.net is not None:
                        qpos, history = self._state_fields["qpos"], self.vars["actuator_history"]
                        ctrl[:], history[:] = actuators.network_ctrl(ctrl, qpos, qvel, history, gains, np)
                    if actuators.saturation is not None:
                        forcerange[:] = actuators.torque_range(qvel, strength, np)
                    self.batch.step(nstep=1, stage=stage)
                ctrl[:] = new
        except mujoco.batch.SimulationError as err:
            raise self._engine_error(err) from err
        self._check_warnings()

    def _engine_error(self, err: mujoco.batch.SimulationError) -> SimulationError:
        message = self.batch.error(int(err.ids[0]))
        if "out of memory" in message:
            message = f"contact buffer overflow: the arena ran out of memory; raise <size memory=...> ({message})"
        return SimulationError(err.ids, f"MuJoCo error: {message}")

    def _check_warnings(self) -> None:
        """Raise if any env's MuJoCo warning counters rose (divergence, buffer overflow) since last checked."""
        counts = self.batch.warning[:, :, 1]
        risen = counts > self._warning_counts
        if risen.any():
            env_ids, kinds = np.nonzero(risen)
            kind = mujoco.mjtWarning(int(kinds[0]))
            cause = _WARNING_CAUSES.get(kind, f"MuJoCo warning {kind.name}")
            diverged = kind in (mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQVEL)
            raise SimulationError(np.unique(env_ids), cause + (_DIVERGED_HINT if diverged else ""))
        self._warning_counts[:] = counts

    def _reset_envs(self, ids: np.ndarray, resample: bool, initial: ResetState | None = None) -> None:
        """Draw initial states (and, if asked, physical parameters) for envs `ids`, or take them from
        `initial` (whose `dr_*` variables, if present, are the parameters), then run mj_forward."""
        sampler = NumpySampler(self.rng)
        if initial is None:
            initial = self.task.reset(sampler, len(ids), np)
        else:
            initial = ResetState(*(None if x is None else _host_copy(x) for x in initial))
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        new_vars = self.actuators.reset_vars(len(ids), np) | dict(initial.vars)
        if resample or not self.vars:
            given = all(name in new_vars for name in self.randomizer.params)
            params = (
                {k: new_vars[k] for k in self.randomizer.params}
                if given
                else self.randomizer.sample(sampler, len(ids), np)
            )
            for name, values in self.randomizer.model_fields(params, np).items():
                self.batch.expand(name)[ids] = values
                self._expanded_fields.add(name)
            if self.randomizer.changes_mass:
                self.batch.set_const(ids)  # before writing the state: mj_setConst uses the data as scratch
            new_vars.update(params)
        for name, values in (("qpos", initial.qpos), ("qvel", initial.qvel), ("ctrl", initial.ctrl)):
            self._state_fields[name][ids] = values
        if initial.mocap_pos is not None:
            self._state_fields["mocap_pos"][ids] = initial.mocap_pos
        self._write_vars(ids, new_vars)
        self._warning_counts[ids] = 0  # mj_resetData cleared them
        try:
            self.batch.forward(ids)
        except mujoco.batch.SimulationError as err:
            raise self._engine_error(err) from err
        self._check_warnings()

    def _write_vars(self, ids: np.ndarray, new_vars: dict[str, np.ndarray]) -> None:
        if not self.vars:
            self.vars = {
                k: np.zeros((self.num_envs, *np.shape(v)[1:]), np.asarray(v).dtype) for k, v in new_vars.items()
            }
        for name, values in new_vars.items():
            self.vars[name][ids] = values

    def _keep_final_poses(self, ids: np.ndarray) -> None:
        """Remember the poses of envs `ids`, which are about to reset, for `render(final=True)`."""
        qpos = self._state_fields["qpos"][ids].copy()
        mocap = self._state_fields["mocap_pos"][ids].copy() if "mocap_pos" in self._state_fields else None
        self._final_poses = {
            int(env): (qpos[row], None if mocap is None else mocap[row]) for row, env in enumerate(ids)
        }

    def _merge_reset_obs(self, obs: dict[str, np.ndarray], images: np.ndarray | None, ids: np.ndarray) -> Obs:
        """Observations after resetting envs `ids`: their first observations, everyone else's unchanged."""
        subset = TaskState({k: v[ids] for k, v in self.phys.items()}, {k: v[ids] for k, v in self.vars.items()})
        fresh = self.task.observe(subset, np)
        merged = {key: value.copy() for key, value in obs.items()}
        for key, value in fresh.items():
            merged[key][ids] = value
        if images is not None:
            images = images.copy()
            images[ids] = self._obs_images(ids)
        return self._to_torch_obs(merged, images)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return to_torch(array, self.device)

    def _obs_images(self, ids: np.ndarray) -> np.ndarray | None:
        """The `image` observations of envs `ids` [n, V, H, W, 3] uint8, or None where obs carry none."""
        return self._images(ids) if self._images_each_step else None

    def _images(self, ids: np.ndarray, final: bool = False) -> np.ndarray:
        """Images [n, V, H, W, 3] uint8 of envs `ids`' current state from the configured cameras (`final`: the
        state before the last step's auto-reset, `render`'s `final`)."""
        assert self._image is not None
        cfg = self._image
        if cfg.quality == "fast":
            states = (self._state_of(int(env), final) for env in ids)
            return self._renderers.tiled(cfg.width, cfg.height).render(states, cfg.cameras)
        renderer = self._renderers.get(cfg.width, cfg.height)
        frames = np.empty((len(ids), len(cfg.cameras), cfg.height, cfg.width, 3), dtype=np.uint8)
        for row, env in enumerate(ids):
            data = self._state_of(int(env), final)
            for view, camera in enumerate(cfg.cameras):
                frames[row, view] = renderer.render(data, camera)
        return frames

    def _to_torch_obs(self, obs: dict[str, np.ndarray], images: np.ndarray | None) -> Obs:
        out = {key: to_torch(value.astype(np.float32), self.device) for key, value in obs.items()}
        if images is not None:
            out["image"] = to_torch(images, self.device)
        return out


def _host_copy(value: Any) -> Any:
    """A numpy copy of an array from any array library (or of each array in a dict)."""
    if isinstance(value, dict):
        return {key: np.array(item) for key, item in value.items()}
    return np.array(value, dtype=np.float64)
