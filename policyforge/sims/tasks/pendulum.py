"""`pendulum-swingup`: swing a torque-limited pendulum up and balance it (tiny; for fast learning tests)."""

from __future__ import annotations

import dataclasses

import numpy as np

from policyforge.config import check_in
from policyforge.sims.task import Array, ResetState, Sampler, Task, TaskConfig, TaskState, Xp
from policyforge.sims.xmath import wrap_angle


@dataclasses.dataclass
class PendulumConfig(TaskConfig):
    """Options of `pendulum-swingup`."""

    control_dt: float = 0.05
    """Seconds between torque commands (20 Hz, as gymnasium's Pendulum)."""
    episode_seconds: float = 10.0
    """Episode length in seconds (200 control steps)."""
    max_speed: float = 8.0
    """Initial angular speeds are drawn from ±max_speed/8 rad/s; speeds above this are penalised."""
    upright_tolerance: float = 0.3
    """Success: |angle| below this (rad) and |angular velocity| below 1 rad/s."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.max_speed, "max_speed", "[0.1, 100]", "observations and rewards divide by it", " rad/s")
        check_in(self.upright_tolerance, "upright_tolerance", "(0, π]", unit=" rad")


class PendulumSwingup(Task):
    """Angle 0 is upright. Reward (1 + cos θ)/2 − 0.1 θ̇²/max_speed² − 0.01 u², about [-0.1, 1]."""

    name = "pendulum-swingup"
    config_class = PendulumConfig
    xml_file = "pendulum.xml"
    config: PendulumConfig

    @property
    def action_dim(self) -> int:
        return 1

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        angle = sampler.uniform(-np.pi, np.pi, (n, 1))
        speed = sampler.uniform(-1.0, 1.0, (n, 1)) * self.config.max_speed / 8
        return ResetState(
            qpos=angle,
            qvel=speed,
            ctrl=xp.zeros((n, 1)),
            mocap_pos=None,
            vars={"last_action": xp.zeros((n, 1))},
        )

    def control(self, action: Array, state: TaskState, xp: Xp) -> Array:
        return action

    def _angle(self, state: TaskState, xp: Xp) -> tuple[Array, Array]:
        angle = wrap_angle(self.sensor(state.phys["sensordata"], "angle")[:, 0], xp)
        return angle, self.sensor(state.phys["sensordata"], "angvel")[:, 0]

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        angle, speed = self._angle(state, xp)
        obs = xp.stack([xp.cos(angle), xp.sin(angle), speed / self.config.max_speed], axis=1)
        return {"policy": obs, "critic": obs}

    def observation_names(self) -> list[str]:
        return ["cos(angle)", "sin(angle)", "angular_velocity/max_speed"]

    def action_meaning(self) -> str:
        return "a[0]: motor torque a·4 N·m about the hinge (angle 0 is upright)"

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        angle, speed = self._angle(state, xp)
        terms = {
            "upright": (1 + xp.cos(angle)) / 2,
            "speed": -0.1 * (speed / self.config.max_speed) ** 2,
            "effort": -0.01 * action[:, 0] ** 2,
        }
        return terms["upright"] + terms["speed"] + terms["effort"], terms

    def success(self, state: TaskState, xp: Xp) -> Array:
        angle, speed = self._angle(state, xp)
        return (xp.abs(angle) < self.config.upright_tolerance) & (xp.abs(speed) < 1.0)
