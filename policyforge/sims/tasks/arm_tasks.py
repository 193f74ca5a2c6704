"""`arm-reach`, `arm-push-cube`, `arm-lift-cube` on the Panda-kinematics arm (see `tasks/arm_base.py`).

Dense rewards are shaped progress in [0, 1] and equal 1 on success, so dense and sparse returns compare.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from policyforge.config import check_bounds, check_in
from policyforge.sims.task import Array, ResetState, Sampler, TaskState, Xp
from policyforge.sims.tasks.arm_base import ArmConfig, ArmTask
from policyforge.sims.xmath import yaw_quat

CUBE_HALF = 0.02
"""Half the cube's edge, m."""
CUBE_XY_LOW, CUBE_XY_HIGH = np.array([0.4, -0.15]), np.array([0.6, 0.15])
"""Where cubes start on the table, m."""


def _xyz(name: str) -> list[str]:
    """Feature names of a vector [3] in the world frame (m)."""
    return [f"{name}.{axis}" for axis in "xyz"]


def closeness(distance: Array, xp: Xp, scale: float = 5.0) -> Array:
    """1 at zero distance, falling smoothly towards 0: 1 − tanh(scale · d)."""
    return 1.0 - xp.tanh(scale * distance)


def _reset_cube(task: ArmTask, sampler: Sampler, qpos: Array, n: int, xp: Xp) -> tuple[Array, Array]:
    """Place the cube at a random table position and yaw; returns (qpos, cube xy [n, 2])."""
    xy = sampler.uniform(CUBE_XY_LOW, CUBE_XY_HIGH, (n, 2))
    yaw = sampler.uniform(-np.pi / 4, np.pi / 4, (n,))
    cube = xp.concatenate([xy, xp.full((n, 1), CUBE_HALF), yaw_quat(yaw, xp)], axis=1)
    start = task.cube_qpos
    return xp.concatenate([qpos[:, :start], cube, qpos[:, start + 7 :]], axis=1), xy


@dataclasses.dataclass
class ReachConfig(ArmConfig):
    """Options of `arm-reach`."""

    closeness_scale: float = 5.0
    """The dense reward's closeness 1 − tanh(scale · d) (d in m): 5 rewards coming within a few cm; 20 also
    rewards the last centimetres (a precise reach, e.g. 0.71 at 1.5 cm against 0.93)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.closeness_scale, "closeness_scale", "(0, 1000]", unit=" /m")


class ArmReach(ArmTask):
    """Move the TCP to a goal point (green marker) sampled in the workspace."""

    name = "arm-reach"
    config_class = ReachConfig
    config: ReachConfig
    has_cube = False
    goal_low = np.array([0.3, -0.3, 0.1])
    goal_high = np.array([0.7, 0.3, 0.5])

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        qpos, ctrl = self.reset_arm(sampler, n, xp)
        goal = sampler.uniform(self.goal_low, self.goal_high, (n, 3))
        return self.make_reset(qpos, ctrl, goal, goal, xp)

    def _distance(self, state: TaskState, xp: Xp) -> Array:
        return xp.linalg.norm(state.vars["goal"] - self.tcp_pos(state), axis=1)

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        goal = state.vars["goal"]
        obs = xp.concatenate([self.proprioception(state, xp), goal, goal - self.tcp_pos(state)], axis=1)
        return {"policy": obs, "critic": obs}

    def observation_names(self) -> list[str]:
        return [*self.proprioception_names(), *_xyz("goal"), *_xyz("goal-tcp")]

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        distance = self._distance(state, xp)
        success = distance < self.config.success_threshold
        terms = {"reach": closeness(distance, xp, self.config.closeness_scale), "distance": distance}
        return self.finish_reward(terms["reach"], success, state, action, terms, xp)

    def success(self, state: TaskState, xp: Xp) -> Array:
        return self._distance(state, xp) < self.config.success_threshold


@dataclasses.dataclass
class PushConfig(ArmConfig):
    """Options of `arm-push-cube`."""

    episode_seconds: float = 6.0
    """Episode length in seconds."""
    goal_distance: tuple[float, float] = (0.1, 0.2)
    """Range of the goal's distance from the cube's start, m."""

    def __post_init__(self) -> None:
        super().__post_init__()
        why = "m; from cubes 0.4-0.6 m ahead of the arm, 0.3 m reaches the edge of the Panda's 0.85 m reach"
        check_bounds(self.goal_distance, "goal_distance", "[0, 0.3]", why)


class ArmPushCube(ArmTask):
    """Push the cube along the table into a goal region (green marker) without lifting it."""

    name = "arm-push-cube"
    config_class = PushConfig
    config: PushConfig

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        qpos, ctrl = self.reset_arm(sampler, n, xp)
        qpos, cube_xy = _reset_cube(self, sampler, qpos, n, xp)
        heading = sampler.uniform(-np.pi, np.pi, (n,))
        distance = sampler.uniform(*self.config.goal_distance, (n,))
        offset = xp.stack([xp.cos(heading), xp.sin(heading)], axis=1) * distance[:, None]
        goal = xp.concatenate([cube_xy + offset, xp.full((n, 1), CUBE_HALF)], axis=1)
        return self.make_reset(qpos, ctrl, goal, goal, xp)

    def _goal_distance(self, state: TaskState, xp: Xp) -> Array:
        return xp.linalg.norm((state.vars["goal"] - self.cube_pos(state))[:, :2], axis=1)

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        cube, goal, tcp = self.cube_pos(state), state.vars["goal"], self.tcp_pos(state)
        cube_quat = self.sensor(state.phys["sensordata"], "cube_quat")
        obs = xp.concatenate([self.proprioception(state, xp), cube, cube_quat, goal, cube - tcp, goal - cube], axis=1)
        touch = xp.stack(self.touching(state), axis=1).astype(obs.dtype)
        return {"policy": obs, "critic": xp.concatenate([obs, touch], axis=1)}

    def observation_names(self) -> list[str]:
        cube = [*_xyz("cube_pos"), *(f"cube_quat.{a}" for a in "wxyz")]
        return [*self.proprioception_names(), *cube, *_xyz("goal"), *_xyz("cube-tcp"), *_xyz("goal-cube")]

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        cube, goal, tcp = self.cube_pos(state), state.vars["goal"], self.tcp_pos(state)
        direction = (goal - cube)[:, :2]
        direction = direction / xp.maximum(xp.linalg.norm(direction, axis=1, keepdims=True), 1e-6)
        behind = cube[:, :2] - direction * (CUBE_HALF + 0.02)
        push_pose = xp.concatenate([behind, cube[:, 2:]], axis=1)
        distance = self._goal_distance(state, xp)
        success = distance < self.config.success_threshold
        terms = {
            "reach": closeness(xp.linalg.norm(push_pose - tcp, axis=1), xp),
            "push": closeness(distance, xp),
            "distance": distance,
        }
        dense = (terms["reach"] + 2.0 * terms["push"]) / 3.0
        return self.finish_reward(dense, success, state, action, terms, xp)

    def success(self, state: TaskState, xp: Xp) -> Array:
        return self._goal_distance(state, xp) < self.config.success_threshold


@dataclasses.dataclass
class LiftConfig(ArmConfig):
    """Options of `arm-lift-cube`."""

    episode_seconds: float = 6.0
    """Episode length in seconds."""
    lift_height: float = 0.1
    """Success: the cube's bottom face at least this far above the table, m."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.lift_height, "lift_height", "(0, 0.5]", unit=" m")


class ArmLiftCube(ArmTask):
    """Grasp the cube and lift it by `lift_height` (marker shows the target height)."""

    name = "arm-lift-cube"
    config_class = LiftConfig
    config: LiftConfig

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        qpos, ctrl = self.reset_arm(sampler, n, xp)
        qpos, cube_xy = _reset_cube(self, sampler, qpos, n, xp)
        goal = xp.concatenate([cube_xy, xp.full((n, 1), self.config.lift_height + CUBE_HALF)], axis=1)
        return self.make_reset(qpos, ctrl, goal, goal, xp)

    def grasped(self, state: TaskState, xp: Xp) -> Array:
        """Both finger pads touch and the TCP is at the cube, bool [N]."""
        left, right = self.touching(state)
        near = xp.linalg.norm(self.cube_pos(state) - self.tcp_pos(state), axis=1) < 0.03
        return left & right & near

    def _height(self, state: TaskState) -> Array:
        return self.cube_pos(state)[:, 2] - CUBE_HALF

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        cube, tcp = self.cube_pos(state), self.tcp_pos(state)
        cube_quat = self.sensor(state.phys["sensordata"], "cube_quat")
        obs = xp.concatenate([self.proprioception(state, xp), cube, cube_quat, cube - tcp], axis=1)
        touch = xp.stack(self.touching(state), axis=1).astype(obs.dtype)
        return {"policy": obs, "critic": xp.concatenate([obs, touch], axis=1)}

    def observation_names(self) -> list[str]:
        cube = [*_xyz("cube_pos"), *(f"cube_quat.{a}" for a in "wxyz")]
        return [*self.proprioception_names(), *cube, *_xyz("cube-tcp")]

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        grasped = self.grasped(state, xp).astype(action.dtype)
        height = self._height(state)
        success = height >= self.config.lift_height
        terms = {
            "reach": closeness(xp.linalg.norm(self.cube_pos(state) - self.tcp_pos(state), axis=1), xp),
            "grasp": grasped,
            "lift": grasped * xp.clip(height / self.config.lift_height, 0.0, 1.0),
            "height": height,
        }
        dense = (terms["reach"] + terms["grasp"] + 2.0 * terms["lift"]) / 4.0
        return self.finish_reward(dense, success, state, action, terms, xp)

    def success(self, state: TaskState, xp: Xp) -> Array:
        return self._height(state) >= self.config.lift_height
