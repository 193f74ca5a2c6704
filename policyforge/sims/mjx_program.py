"""The compiled programs behind the MJX backend: reset and step of N envs as pure functions of an `EnvState`.

The task's functions run with `jax.numpy` as their array namespace on batched [N, ...] arrays; only the
physics is vmapped (over envs and over the per-env model fields domain randomisation writes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from jax import lax
from mujoco import mjx

from policyforge.config import ConfigError
from policyforge.sims.actuators import actuators_of
from policyforge.sims.config import ActuatorConfig, RandomizationConfig
from policyforge.sims.episodes import EpisodeCounters, end_step, where_rows
from policyforge.sims.randomization import Randomizer
from policyforge.sims.task import NumpySampler, ResetState, Task, TaskState

MJX_SENSORS = frozenset(
    getattr(mujoco.mjtSensor, f"mjSENS_{name}")
    for name in [
        *("ACCELEROMETER", "ACTUATORFRC", "ACTUATORPOS", "ACTUATORVEL", "BALLANGVEL", "BALLQUAT", "CAMPROJECTION"),
        *("CLOCK", "CONTACT", "FORCE", "FRAMEANGACC", "FRAMEANGVEL", "FRAMELINACC", "FRAMELINVEL", "FRAMEPOS"),
        *("FRAMEQUAT", "FRAMEXAXIS", "FRAMEYAXIS", "FRAMEZAXIS", "GYRO", "JOINTACTFRC", "JOINTPOS", "JOINTVEL"),
        *("MAGNETOMETER", "RANGEFINDER", "SUBTREEANGMOM", "SUBTREECOM", "SUBTREELINVEL", "TENDONACTFRC"),
        *("TENDONPOS", "TENDONVEL", "TORQUE", "TOUCH", "VELOCIMETER"),
    ]
)
"""Sensor types MJX 3.17 computes; it leaves the others at zero without a word, so we refuse them."""


class EnvState(NamedTuple):
    """Everything that evolves, on the JAX device (a pytree; every leaf but `key` is [N, ...])."""

    data: mjx.Data
    """Physics state of every env."""
    vars: dict[str, jax.Array]
    """Task variables (goals, commands, last action, `dr_*` parameters)."""
    model_fields: dict[str, jax.Array]
    """Per-env values of the model fields domain randomisation changes (empty without randomisation)."""
    episodes: EpisodeCounters
    """Return (float), length (int32; the time-limit clock) and success so far of each env's episode."""
    key: jax.Array
    """PRNG key for resets and randomisation."""


class JaxSampler:
    """`Sampler` over a JAX key: every draw takes a fresh sub-key (works while tracing)."""

    def __init__(self, key: jax.Array):
        self.key = key

    def _next(self) -> jax.Array:
        self.key, sub = jax.random.split(self.key)
        return sub

    def uniform(self, low: Any, high: Any, shape: tuple[int, ...]) -> jax.Array:
        return jax.random.uniform(self._next(), shape, minval=jnp.asarray(low), maxval=jnp.asarray(high))

    def normal(self, shape: tuple[int, ...]) -> jax.Array:
        return jax.random.normal(self._next(), shape)


class MjxProgram:
    """Jitted `reset(key)`, `reset_to(key, initial)`, `reset_envs(state, mask)` and `step(state, action)` of
    one (task, N, randomisation)."""

    def __init__(
        self, task: Task, num_envs: int, randomization: RandomizationConfig, actuator: ActuatorConfig | None = None
    ):
        self.task = task
        self.num_envs = num_envs
        self.model = put_model(task)
        self._force_limited = np.asarray(task.model.actuator_forcelimited, dtype=bool)
        self.blank = mjx.make_data(self.model)
        self.float = self.blank.qpos.dtype
        """Physics precision: float32, or float64 with `jax_enable_x64` (outputs are float32 either way)."""
        if randomization.com_offset is not None:
            raise ConfigError(
                "sim.randomization.com_offset",
                "moving a centre of mass needs mj_setConst, which MJX lacks; use sim.backend=mujoco for it",
            )
        self.randomizer = Randomizer(randomization, task.model, task.root_body, task.name)
        self.actuators = actuators_of(task, actuator, randomization)
        self.resample_on_reset = randomization.resample_on_reset
        probe = self.randomizer.sample(NumpySampler(np.random.default_rng(0)), 1, np)
        self.field_names = sorted(self._fields(probe, np))
        axes = jax.tree.map(lambda _: None, self.model)
        self.model_axes = axes.tree_replace({name: 0 for name in self.field_names}) if self.field_names else None
        self.reset = jax.jit(self._reset)
        self.reset_to = jax.jit(self._reset_to)
        self.reset_envs = jax.jit(self._reset_envs)
        self.step = jax.jit(self._step)

    def compile(self) -> None:
        """Compile `reset` and `step` ahead of time (call once; the compiled versions replace the jitted ones)."""
        key = jax.random.PRNGKey(0)
        try:
            self.reset = self.reset.lower(key).compile()
            state, _ = self.reset(key)
            action = jnp.zeros((self.num_envs, self.task.action_dim), jnp.float32)
            self.step = self.step.lower(state, action).compile()
        except NotImplementedError as err:
            raise _unsupported(self.task, err) from err

    # -- programs ----------------------------------------------------------------------------------------

    def _reset(self, key: jax.Array) -> tuple[EnvState, dict[str, jax.Array]]:
        key, sub = jax.random.split(key)
        data, vars_, fields = self._fresh(sub, None)
        return self._start(data, vars_, fields, key)

    def _reset_to(self, key: jax.Array, initial: ResetState) -> tuple[EnvState, dict[str, jax.Array]]:
        vars_ = self.actuators.reset_vars(self.num_envs, jnp) | dict(initial.vars)
        if not all(name in vars_ for name in self.randomizer.params):
            key, sub = jax.random.split(key)
            vars_.update(self.randomizer.sample(JaxSampler(sub), self.num_envs, jnp))
        fields = self._fields({name: vars_[name] for name in self.randomizer.params}, jnp)
        return self._start(self._initialize(initial, fields), vars_, fields, key)

    def _reset_envs(self, state: EnvState, mask: jax.Array) -> tuple[EnvState, dict[str, jax.Array]]:
        """New episodes where `mask` (bool [N]), as auto-reset starts them; the other rows unchanged."""
        obs = self.task.observe(TaskState(self._phys(state.data), state.vars), jnp)
        state, obs = self._reset_done(state._replace(episodes=state.episodes.restart(mask, jnp)), obs, mask)
        return state, _float32(obs)

    def _step(self, state: EnvState, action: jax.Array) -> tuple[EnvState, dict[str, Any]]:
        task, n = self.task, self.num_envs
        bad_action = ~jnp.isfinite(action).all(axis=1)
        action = jnp.clip(action, -1.0, 1.0).astype(self.float)
        previous = state.data.ctrl
        ctrl, actuated = task.actuate(action, TaskState(self._phys(state.data), state.vars), jnp)
        state = state._replace(
            vars={name: jnp.asarray(value, state.vars[name].dtype) for name, value in actuated.items()}
        )
        data = state.data.replace(ctrl=ctrl.astype(self.float))
        if self.randomizer.push_dofs is not None:  # the interval event
            key, sub = jax.random.split(state.key)
            push = self.randomizer.push(state.episodes.lengths, task.config.control_dt, JaxSampler(sub), jnp)
            data = data.replace(qvel=data.qvel.at[:, self.randomizer.push_dofs].add(push.astype(self.float)))
            state = state._replace(key=key)
        if self.actuators.per_physics_step:
            names = ("dr_delay", "dr_kp", "dr_kd", "dr_strength", "actuator_history")
            drive = [state.vars.get(name, jnp.zeros(n)) for name in names]  # a history only with a network
            data, history = self._vmap(self._driven_physics, state.model_fields)(data, previous, *drive)
            if self.actuators.net is not None:
                state = state._replace(vars={**state.vars, "actuator_history": history})
        else:
            data = self._vmap(self._physics, state.model_fields)(data)
        phys = self._phys(data)
        vars_ = task.update_vars(TaskState(phys, state.vars), action, jnp)
        vars_ = {name: jnp.asarray(value, state.vars[name].dtype) for name, value in vars_.items()}
        now = TaskState(phys, vars_)
        reward, terms = task.reward(now, action, jnp)
        success = task.success(now, jnp)
        terminated = jnp.asarray(task.terminated(now, jnp), dtype=bool)
        obs = task.observe(now, jnp)
        outcome = end_step(state.episodes, reward, terminated, success, jnp, episode_steps=task.episode_steps)
        done = outcome.done
        after = _strong(state._replace(data=data, vars=vars_, episodes=outcome.counters))
        next_state, next_obs = lax.cond(done.any(), self._reset_done, lambda s, o, d: (s, o), after, obs, done)
        bad_physics = ~(jnp.isfinite(data.qpos).all(axis=1) & jnp.isfinite(data.qvel).all(axis=1))
        bad_output = ~jnp.isfinite(reward)
        for value in obs.values():
            bad_output |= ~jnp.isfinite(value.reshape(n, -1)).all(axis=1)
        out = {
            "obs": _float32(next_obs),
            "final_obs": _float32(obs),
            "final_qpos": data.qpos,  # the pose before any reset, for render(final=True)
            "final_mocap_pos": data.mocap_pos,
            "reward": reward.astype(jnp.float32),
            "terminated": terminated,
            "truncated": outcome.truncated,
            "episode": outcome.episode,
            "reward_terms": {k: jnp.asarray(v, jnp.float32) for k, v in terms.items()},
            "bad_action": bad_action,
            "bad_physics": bad_physics,
            "bad_output": bad_output,
            "any_bad": bad_action.any() | bad_physics.any() | bad_output.any(),
        }
        if success is not None:
            out["success"] = success
        return next_state, out

    # -- pieces ------------------------------------------------------------------------------------------

    def _reset_done(
        self, state: EnvState, obs: dict[str, jax.Array], done: jax.Array
    ) -> tuple[EnvState, dict[str, jax.Array]]:
        """Envs where `done` start new episodes (fresh state and, if configured, fresh parameters; `end_step`
        has zeroed their episode counters)."""
        key, sub = jax.random.split(state.key)
        resample = self.resample_on_reset
        data, vars_, fields = self._fresh(sub, None if resample else state)
        fresh_obs = self.task.observe(TaskState(self._phys(data), vars_), jnp)
        fresh = state._replace(data=data, vars=vars_, model_fields=fields)
        merged = jax.tree.map(
            lambda new, old: where_rows(done, new, old, jnp), fresh._replace(key=None), state._replace(key=None)
        )
        merged_obs = jax.tree.map(lambda new, old: where_rows(done, new, old, jnp), fresh_obs, obs)
        return _strong(merged._replace(key=key)), merged_obs

    def _start(
        self, data: mjx.Data, vars_: dict[str, jax.Array], fields: dict[str, jax.Array], key: jax.Array
    ) -> tuple[EnvState, dict[str, jax.Array]]:
        n = self.num_envs
        obs = self.task.observe(TaskState(self._phys(data), vars_), jnp)
        state = EnvState(data, vars_, fields, EpisodeCounters.zeros(n, jnp, self.float, jnp.int32), key)
        return _strong(state), _float32(obs)

    def _fresh(
        self, key: jax.Array, keep: EnvState | None
    ) -> tuple[mjx.Data, dict[str, jax.Array], dict[str, jax.Array]]:
        """Initial physics, task variables and model fields of all N envs; parameters drawn anew, or kept
        from `keep`."""
        sampler = JaxSampler(key)
        initial = self.task.reset(sampler, self.num_envs, jnp)
        vars_ = self.actuators.reset_vars(self.num_envs, jnp) | dict(initial.vars)
        if keep is None:
            params = self.randomizer.sample(sampler, self.num_envs, jnp)
            fields = self._fields(params, jnp)
        else:
            params, fields = {name: keep.vars[name] for name in self.randomizer.params}, keep.model_fields
        vars_.update(params)
        return self._initialize(initial, fields), vars_, fields

    def _initialize(self, initial: ResetState, fields: dict[str, jax.Array]) -> mjx.Data:
        """Blank data with the initial state written in, after mj_forward (as the native backend's reset)."""
        n = self.num_envs
        data = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)), self.blank)
        update = {"qpos": initial.qpos, "qvel": initial.qvel, "ctrl": initial.ctrl}
        if initial.mocap_pos is not None:
            update["mocap_pos"] = initial.mocap_pos
        data = data.replace(**{k: jnp.asarray(v, self.float) for k, v in update.items()})
        return self._vmap(mjx.forward, fields)(data)

    def _fields(self, params: dict[str, Any], xp: Any) -> dict[str, Any]:
        fields = self.randomizer.model_fields(params, xp)
        fields.update(self.randomizer.derived_constants(params, xp))
        return {name: xp.asarray(value, dtype=self.float) for name, value in fields.items()}

    def _vmap(self, fn: Any, fields: dict[str, jax.Array]) -> Any:
        """`fn(model, data, *per_env)` vmapped over envs, each with its own model fields: a function of data [N]
        (and of more per-env arrays [N, ...])."""
        if not fields:
            return jax.vmap(lambda d, *rest: fn(self.model, d, *rest))
        models = self.model.tree_replace(fields)
        return lambda data, *rest: jax.vmap(fn, in_axes=(self.model_axes, 0) + (0,) * len(rest))(models, data, *rest)

    def _physics(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        """`control_decimation` physics steps of one env, then position and velocity stages at the new state
        (as the native backend's `stage=mjSTAGE_VEL`), so sensors describe the state the policy sees."""
        data, _ = lax.scan(
            lambda d, _: (self._mj_step(model, d), None), data, None, length=self.task.control_decimation
        )
        data = mjx.sensor_pos(model, mjx.fwd_position(model, data))
        return mjx.sensor_vel(model, mjx.fwd_velocity(model, data))

    def _driven_physics(
        self,
        model: mjx.Model,
        data: mjx.Data,
        previous: jax.Array,
        delay: jax.Array,
        kp_scale: jax.Array,
        kd_scale: jax.Array,
        strength: jax.Array,
        history: jax.Array,
    ) -> tuple[mjx.Data, jax.Array]:
        """`_physics` under an actuator model (`sims/actuators.py`), one env: the previous controls [nu] for the
        first `delay` physics steps, then `data.ctrl`; the network's torque from its `history` [nu, H, F] (returned
        updated), or the torque limits at the joints' speed, before each step."""
        new, actuators, gains = data.ctrl, self.actuators, (kp_scale[None], kd_scale[None])

        def one_step(carry: tuple[mjx.Data, jax.Array], step: jax.Array) -> tuple[tuple[mjx.Data, jax.Array], None]:
            d, past = carry
            ctrl = actuators.ctrl_at(step, previous[None], new[None], delay[None], jnp)
            if actuators.net is not None:
                ctrl, past = actuators.network_ctrl(ctrl, d.qpos[None], d.qvel[None], past[None], gains, jnp)
                past = past[0].astype(history.dtype)
            stepped_model = model
            if actuators.saturation is not None:  # the curve moves the limits; otherwise the randomiser set them
                limits = actuators.torque_range(d.qvel[None], strength[None], jnp)[0].astype(self.float)
                stepped_model = model.replace(actuator_forcerange=limits)
            return (self._mj_step(stepped_model, d.replace(ctrl=ctrl[0].astype(self.float))), past), None

        (data, history), _ = lax.scan(one_step, (data, history), jnp.arange(self.task.control_decimation))
        data = data.replace(ctrl=new)
        data = mjx.sensor_pos(model, mjx.fwd_position(model, data))
        return mjx.sensor_vel(model, mjx.fwd_velocity(model, data)), history

    def _mj_step(self, model: mjx.Model, data: mjx.Data) -> mjx.Data:
        """`mjx.step`, except that with `implicitfast` an actuator whose force is clamped to its forcerange
        adds no velocity derivative, as in native MuJoCo (MJX keeps the servo's −kd there, which made the
        Panda and Go2 drift apart from native by 1e-3 rad in one control step at their torque limits)."""
        if not self._force_limited.any() or self.task.model.opt.integrator != mujoco.mjtIntegrator.mjINT_IMPLICITFAST:
            return mjx.step(model, data)
        data = mjx.forward(model, data)
        low, high = model.actuator_forcerange[:, 0], model.actuator_forcerange[:, 1]
        force = data.actuator_force
        clamped = self._force_limited & ((force <= low) | (force >= high))
        keep = jnp.where(clamped, 0.0, 1.0)
        derivative_model = model.replace(
            actuator_biasprm=model.actuator_biasprm.at[:, 2].multiply(keep),
            actuator_gainprm=model.actuator_gainprm.at[:, 2].multiply(keep),
        )
        return mjx.implicit(derivative_model, data)

    def _phys(self, data: mjx.Data) -> dict[str, jax.Array]:
        return {name: getattr(data, name) for name in self.task.physics_fields}


def put_model(task: Task) -> mjx.Model:
    """The task's model on the JAX device, or a ConfigError naming what MJX cannot simulate."""
    model = task.model
    unsupported = sorted({mujoco.mjtSensor(t).name for t in model.sensor_type} - {s.name for s in MJX_SENSORS})
    if unsupported:
        raise _unsupported(task, f"sensor types {unsupported}")
    missing = [name for name in task.physics_fields if name not in mjx.Data.__dataclass_fields__]
    if missing:
        raise _unsupported(task, f"MjData fields {missing} (not in mjx.Data)")
    try:
        return mjx.put_model(model)
    except NotImplementedError as err:
        raise _unsupported(task, err) from err


def _unsupported(task: Task, what: Any) -> ConfigError:
    return ConfigError(
        "sim.backend",
        f"task {task.name!r} uses a MuJoCo feature MJX does not implement ({what}); "
        "use sim.backend=mujoco, or change the model",
    )


def _strong(tree: Any) -> Any:
    """The same arrays with weak types removed, so both branches of `lax.cond` agree on types."""
    return jax.tree.map(lambda x: lax.convert_element_type(x, jnp.result_type(x)), tree)


def _float32(obs: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {key: value.astype(jnp.float32) for key, value in obs.items()}
