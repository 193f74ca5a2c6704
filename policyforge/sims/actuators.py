"""Actuator models (`sim.actuator`): what the simulated motors make of the PD targets, every physics step.

- `pd` (ideal PD, the default): the model's position servos, torque clipped to the model's fixed forcerange.
- `dc_motor`: the same servos, their torque held within the motor's torque–speed curve at the joint's speed at
  every physics step. A DC motor gives its stall torque τ_s at rest and nothing more in the direction of motion at
  its no-load speed ω₀: τ ∈ [−τ_s·(1 + ω/ω₀), τ_s·(1 − ω/ω₀)], within ±forcerange (Isaac Lab's DC motor).

- `network`: an actuator network fitted to a drive's log (`sims/actuator_net.py`) gives the torque from the PD
  law's terms over the last physics steps (kept per env in the task variable `actuator_history`); the servo is
  handed the control that makes it give exactly that torque, q + (τ + kd·q̇)/kp, so MuJoCo still clamps it to the
  forcerange and keeps the damping implicit (with `implicitfast` the torque delivered differs from τ by kd·Δq̇ over
  the step, as for any implicit damper).

Two event parameters act here as well (`sim.randomization`, drawn per env): `motor_strength` scales the torque a
motor gives (forcerange and τ_s), and `command_delay_steps` holds the previous control step's command for the
first k physics steps of each control step (a delayed PD with zero-order hold; k < the control decimation).

MuJoCo computes the servo torque and the clamp (with its implicit integration); this module only moves the clamp,
by setting per-env `actuator_forcerange` before each physics step on both backends, from the same function.
"""

from __future__ import annotations

import mujoco
import numpy as np

from policyforge.config import ConfigError
from policyforge.sims.actuator_net import FEATURES, ActuatorNet
from policyforge.sims.config import ActuatorConfig, RandomizationConfig
from policyforge.sims.randomization import position_servos
from policyforge.sims.task import Array, Xp


class Actuators:
    """The configured actuator model of one task's MjModel, shared by the native and the MJX backend."""

    def __init__(
        self,
        config: ActuatorConfig,
        model: mujoco.MjModel,
        curve: tuple[np.ndarray, np.ndarray] | None,
        task: str,
        delay: tuple[int, int] | None,
        decimation: int,
    ):
        self.config = config
        self.forcerange = model.actuator_forcerange.copy()
        """The model's torque limits [nu, 2] (±inf where an actuator is not force-limited)."""
        self.forcerange[~model.actuator_forcelimited.astype(bool)] = (-np.inf, np.inf)
        self.joint_dofs = _actuated_dofs(model)
        self.on_joint = (model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT).astype(float)
        """1 for actuators on a joint (their speed is the joint's), 0 for others (no speed limit applies)."""
        self.saturation = self.no_load_speed = None
        if config.model == "dc_motor":
            unlimited = [model.actuator(i).name for i in np.flatnonzero(~model.actuator_forcelimited.astype(bool))]
            if unlimited:  # MuJoCo clamps a force only where forcelimited is set
                raise ConfigError(
                    "sim.actuator.model", f"dc_motor needs force-limited actuators; task {task}'s {unlimited} are not"
                )
            self.saturation, self.no_load_speed = self._curve(config, model.nu, curve, task)
        if delay is not None and max(delay) >= decimation:
            raise ConfigError(
                "sim.randomization.command_delay_steps",
                f"{list(delay)} physics steps: at most {decimation - 1} (the task's control decimation less 1); a "
                "longer delay is an action latency of whole control steps: sim.corruption.action_latency_steps",
            )
        self.delayed = delay is not None and max(delay) > 0
        self.net = self._network(config, model, task) if config.model == "network" else None

    @property
    def per_physics_step(self) -> bool:
        """Whether the backends must step physics one step at a time (a curve, a delay or a network acts within a
        control step)."""
        return self.saturation is not None or self.delayed or self.net is not None

    def reset_vars(self, n: int, xp: Xp) -> dict[str, Array]:
        """Task variables of n new episodes: `actuator_history` [n, nu, H, FEATURES] for a network (NaN: an
        episode's first physics step takes its features as its past), none otherwise."""
        if self.net is None:
            return {}
        return {"actuator_history": xp.full((n, len(self.joint_dofs), self.net.history, FEATURES), np.nan)}

    def network_ctrl(
        self, target: Array, qpos: Array, qvel: Array, history: Array, gains: tuple[Array, Array], xp: Xp
    ) -> tuple[Array, Array]:
        """Servo controls [N, nu] that give the network's torque this physics step, and the updated history
        [N, nu, H, FEATURES], from position targets [N, nu], the state (qpos [N, nq], qvel [N, nv]) and the
        history; `gains`: the envs' kp and kd scales, [N] each (motor strength scales the forcerange that clamps
        the torque, as for the other models)."""
        kp_scale, kd_scale = gains
        q, qd = qpos[:, self.joint_qpos], qvel[:, self.joint_dofs]
        kp, kd = xp.asarray(self.kp)[None] * kp_scale[:, None], xp.asarray(self.kd)[None] * kd_scale[:, None]
        now = self.net.features(target, q, qd, kp, kd, xp)[:, :, None]
        fresh = xp.isnan(history[:, :1, :1, :1])
        history = xp.concatenate([now, xp.where(fresh, now, history)[:, :, :-1]], axis=2)
        return q + (self.net.torque(history, xp) + kd * qd) / kp, history

    def ctrl_at(self, step: int | Array, previous: Array, new: Array, delay: Array, xp: Xp) -> Array:
        """Controls [N, nu] at physics step `step` of a control step: the previous command [N, nu] for the first
        `delay` [N] steps, then the new one [N, nu]."""
        return xp.where((step < delay)[:, None], previous, new)

    def torque_range(self, qvel: Array, strength: Array, xp: Xp) -> Array:
        """Per-env torque limits [N, nu, 2] at joint velocities `qvel` [N, nv], for motors of `strength` [N]."""
        base = xp.asarray(self.forcerange)[None] * strength[:, None, None]
        if self.saturation is None:
            return base
        omega = qvel[:, self.joint_dofs] * xp.asarray(self.on_joint) / xp.asarray(self.no_load_speed)
        stall = xp.asarray(self.saturation) * strength[:, None]
        # past ω₀ the curve only brakes (its upper limit below 0); the clamp keeps the range within ±forcerange
        low = xp.minimum(xp.maximum(base[..., 0], -stall * (1.0 + omega)), base[..., 1])
        high = xp.maximum(xp.minimum(base[..., 1], stall * (1.0 - omega)), base[..., 0])
        return xp.stack([low, high], axis=-1)

    @staticmethod
    def _curve(config: ActuatorConfig, nu: int, curve, task: str) -> tuple[np.ndarray, np.ndarray]:
        values = []
        for field, default in zip(("saturation_torque", "no_load_speed"), curve or (None, None), strict=True):
            given = getattr(config, field)
            if given is None and default is None:
                raise ConfigError(
                    f"sim.actuator.{field}", f"task {task} has no datasheet motor curve; give {field} per actuator"
                )
            if given is not None and len(given) not in (1, nu):
                raise ConfigError(
                    f"sim.actuator.{field}", f"give one value or {nu} (one per actuator), not {len(given)}"
                )
            value = np.broadcast_to(np.asarray(given if given is not None else default, dtype=float), (nu,)).copy()
            values.append(value)
        return values[0], values[1]

    def _network(self, config: ActuatorConfig, model: mujoco.MjModel, task: str) -> ActuatorNet:
        net = ActuatorNet.load(config.network)
        if not np.isclose(net.step_seconds, model.opt.timestep, rtol=1e-6):
            raise ConfigError(
                "sim.actuator.network",
                f"{config.network} counts lags in {net.step_seconds} s physics steps; task {task} steps "
                f"{model.opt.timestep} s: fit it with --step-seconds {model.opt.timestep}",
            )
        if len(net.torque_scale) != model.nu or not np.allclose(net.torque_scale, model.actuator_forcerange[:, 1]):
            raise ConfigError(
                "sim.actuator.network",
                f"{config.network} was fitted to motors of τ_max {net.torque_scale.tolist()} N·m; task {task}'s are "
                f"{model.actuator_forcerange[:, 1].tolist()}",
            )
        if not position_servos(model).all():
            raise ConfigError("sim.actuator.network", f"task {task}'s actuators are not all PD position servos")
        self.joint_qpos = _actuated_qpos(model)
        self.kp, self.kd = model.actuator_gainprm[:, 0].copy(), -model.actuator_biasprm[:, 2].copy()
        return net


def _actuated_qpos(model: mujoco.MjModel) -> np.ndarray:
    """The qpos address [nu] of each actuator's joint."""
    return np.array([model.jnt_qposadr[model.actuator_trnid[i, 0]] for i in range(model.nu)], dtype=np.int64)


def _actuated_dofs(model: mujoco.MjModel) -> np.ndarray:
    """The dof [nu] each joint actuator drives (0 for actuators on other transmissions: `on_joint` masks them)."""
    dofs = np.zeros(model.nu, dtype=np.int64)
    for i in range(model.nu):
        if model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT:
            dofs[i] = model.jnt_dofadr[model.actuator_trnid[i, 0]]
    return dofs


def actuators_of(task, config: ActuatorConfig | None, randomization: RandomizationConfig) -> Actuators:
    """The actuator model of `task` (a `Task`) for a sim config's `actuator` and `randomization` sections."""
    return Actuators(
        config or ActuatorConfig(),
        task.model,
        task.motor_curve(),
        task.name,
        randomization.command_delay_steps,
        task.control_decimation,
    )
