"""The task contract: an MJCF model plus pure, batched functions of the simulator state.

Task functions take an array namespace `xp` (numpy here, jax.numpy on MJX) and never touch a simulator,
so one task runs unchanged on every backend. A backend owns the physics; per control step it calls

    ctrl, vars = task.actuate(action, state, xp)    # action [N, A] in [-1, 1] -> ctrl [N, nu] (via `control`)
    ... physics steps with ctrl held (control decimation) ...
    vars = task.update_vars(state, action, xp)       # task variables after the step (last action, timers)
    reward, terms = task.reward(state, action, xp)   # [N], {name: [N]}
    terminated = task.terminated(state, xp)          # bool [N]
    obs = task.observe(state, xp)                     # {"policy": [N, D], "critic": [N, Dc]}

where `state.phys` holds the MjData fields named in `task.physics_fields` (batched, [N, ...]) and
`state.vars` the task's own variables (goals, commands, last action, randomised parameters).
"""

from __future__ import annotations

import abc
import dataclasses
from importlib import resources
from typing import Any, ClassVar, NamedTuple, Protocol

import mujoco
import numpy as np

from policyforge.config import ConfigError, check_in

Array = Any  # a numpy or jax array
Xp = Any  # an array namespace: numpy or jax.numpy


class TaskState(NamedTuple):
    """Batched simulator state seen by task functions (a pytree: two dicts of arrays)."""

    phys: dict[str, Array]
    """MjData fields, [N, ...]: those named in `Task.physics_fields`."""
    vars: dict[str, Array]
    """Task variables, [N, ...]: goals, commands, last action, `dr_*` randomised parameters."""


class Sampler(Protocol):
    """Random numbers for `Task.reset`, backed by numpy or by JAX keys."""

    def uniform(self, low: Any, high: Any, shape: tuple[int, ...]) -> Array: ...

    def normal(self, shape: tuple[int, ...]) -> Array: ...


class NumpySampler:
    """`Sampler` over a numpy Generator."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def uniform(self, low: Any, high: Any, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.uniform(low, high, shape)

    def normal(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.standard_normal(shape)


class ResetState(NamedTuple):
    """Initial state of n environments, as returned by `Task.reset`."""

    qpos: Array
    """[n, nq] joint positions."""
    qvel: Array
    """[n, nv] joint velocities."""
    ctrl: Array
    """[n, nu] initial actuator controls."""
    mocap_pos: Array | None
    """[n, nmocap, 3] positions of mocap bodies (goal markers), or None."""
    vars: dict[str, Array]
    """Task variables [n, ...]; the same keys and trailing shapes on every reset."""


MAX_EPISODE_SECONDS = 3600.0
"""Longest episode, s: an hour of simulated time (the tasks' episodes last 4-20 s); evaluation waits for every env's
first episode to end, so a longer one is a run that never finishes."""


@dataclasses.dataclass
class TaskConfig:
    """Options shared by every task; each task extends this with its own fields."""

    control_dt: float = 0.02
    """Seconds between policy actions; a multiple of the model's physics timestep."""
    episode_seconds: float = 10.0
    """Episode length in seconds; episodes past it are truncated (not terminated)."""

    def __post_init__(self) -> None:
        check_in(self.control_dt, "control_dt", "(0, 1]", unit=" s")
        interval = f"[control_dt={self.control_dt:g}, {MAX_EPISODE_SECONDS:g}]"
        check_in(self.episode_seconds, "episode_seconds", interval, unit=" s")


class SensorIndex:
    """Slices of `sensordata` by sensor name, computed once from the model."""

    def __init__(self, model: mujoco.MjModel):
        self.slices: dict[str, slice] = {}
        for i in range(model.nsensor):
            adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
            self.slices[model.sensor(i).name] = slice(adr, adr + dim)
        self._groups: dict[tuple[str, ...], np.ndarray] = {}

    def __call__(self, sensordata: Array, name: str) -> Array:
        """Sensor `name` of every env: [N, dim]."""
        return sensordata[:, self.slices[name]]

    def group(self, sensordata: Array, names: list[str] | tuple[str, ...], xp: Xp) -> Array:
        """Sensors `names` side by side: [N, sum of dims] (one gather)."""
        key = tuple(names)
        if key not in self._groups:
            self._groups[key] = np.concatenate([np.arange(self.slices[n].start, self.slices[n].stop) for n in key])
        return sensordata[:, self._groups[key]]


class Task(abc.ABC):
    """A robot task: an MJCF model and pure batched functions over an array namespace."""

    name: ClassVar[str]
    """Registry name, e.g. `arm-reach`."""
    config_class: ClassVar[type[TaskConfig]] = TaskConfig
    """Dataclass of this task's options (filled from `sim.task_options`)."""
    xml_file: ClassVar[str]
    """MJCF file in `policyforge/sims/assets`."""
    physics_fields: ClassVar[tuple[str, ...]] = ("qpos", "qvel", "sensordata")
    """MjData fields the task functions read; both backends provide them."""
    root_body: ClassVar[str | None] = None
    """Body whose centre of mass `randomization.com_offset` moves."""

    def __init__(self, model: mujoco.MjModel, config: TaskConfig):
        self.model = model
        self.config = config
        self.sensor = SensorIndex(model)
        decimation = config.control_dt / model.opt.timestep
        if abs(decimation - round(decimation)) > 1e-6 or round(decimation) < 1:
            raise ConfigError(
                "control_dt",
                f"{config.control_dt} s is not a multiple of the physics timestep {model.opt.timestep} s",
            )
        self.control_decimation = round(decimation)
        """Physics steps per control step."""
        self.episode_steps = max(1, round(config.episode_seconds / config.control_dt))
        """Control steps per episode before truncation."""

    @classmethod
    def load_model(cls, config: TaskConfig) -> mujoco.MjModel:
        """Compile the task's MJCF; tasks edit the spec here when options change the model."""
        return mujoco.MjModel.from_xml_path(str(asset_path(cls.xml_file)))

    @property
    @abc.abstractmethod
    def action_dim(self) -> int:
        """Size A of actions [N, A] in [-1, 1]."""

    @abc.abstractmethod
    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        """Initial states of n environments (the reset distribution)."""

    @abc.abstractmethod
    def control(self, action: Array, state: TaskState, xp: Xp) -> Array:
        """Actuator controls [N, nu] from actions [N, A] in [-1, 1] (action scaling, IK, clipping)."""

    def motor_curve(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The motors' datasheet torque–speed curve: stall torque [nu] (N·m) and no-load speed [nu] (rad/s), for
        `sim.actuator.model: dc_motor`; None where the task has none (the config must then give them)."""
        return None

    def actuate(self, action: Array, state: TaskState, xp: Xp) -> tuple[Array, dict[str, Array]]:
        """What the physics holds this step: controls [N, nu] and the task variables [N, ...] with them. `control`
        says what the policy commands (what a robot driver sends); a task whose robot runs its own controller on
        that command (a motion generator: `sims/motion.py`) passes it through here, keeping the controller's
        state in the variables. By default the commands themselves, variables unchanged."""
        return self.control(action, state, xp), state.vars

    @abc.abstractmethod
    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        """Observations: `policy` [N, D] (what a real robot senses), `critic` [N, Dc] (privileged)."""

    @abc.abstractmethod
    def observation_names(self) -> list[str]:
        """Names of the D features of `observe(...)["policy"]` [N, D], in order, with any scaling the task applies
        (e.g. `FR_hip.vel*0.05`): what an exported policy's description tells a deployer."""

    def observation_terms(self) -> dict[str, slice]:
        """Named groups of the policy observation's features, {term: columns}, for per-term noise and bias
        (`sim.corruption`); none by default (only `all` is known then)."""
        return {}

    @abc.abstractmethod
    def action_meaning(self) -> str:
        """What an action [A] in [-1, 1] commands, in words, with this config's scales (`control` described)."""

    @abc.abstractmethod
    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        """Reward [N] after a step, and its named terms {name: [N]}."""

    def terminated(self, state: TaskState, xp: Xp) -> Array:
        """bool [N]: the episode reached a terminal state (fell, broke); not time-outs."""
        return xp.zeros(state.phys["qpos"].shape[0], dtype=bool)

    def success(self, state: TaskState, xp: Xp) -> Array | None:
        """bool [N] success flag, or None for tasks without one."""
        return None

    def instructions(self, vars_: dict[str, Array]) -> list[str] | None:
        """The language instruction of each env's current episode, N strings, rendered on the host from the task
        variables [N, ...] (numpy or JAX arrays); None for tasks that take no instruction."""
        return None

    def update_vars(self, state: TaskState, action: Array, xp: Xp) -> dict[str, Array]:
        """Task variables after a step; by default only `last_action` [N, A] is updated. Return new arrays,
        never views of `state.phys` (backends write reset envs' rows in place)."""
        return {**state.vars, "last_action": action}


def asset_path(name: str) -> Any:
    """Path of an MJCF asset shipped in `policyforge/sims/assets`."""
    return resources.files("policyforge.sims") / "assets" / name
