"""The Panda-kinematics arm shared by `arm-*` tasks: control modes, differential IK, observations.

Control modes (actions [N, A] in [-1, 1]; the last entry always opens (+1) or closes (-1) the gripper):
- `joint_delta` (A = 8): joint targets q + a · v_max · control_dt · joint_speed_fraction.
- `ee_delta_pose` (A = 7): TCP translation a[:3] · ee_step (world frame, metres) and rotation vector
  a[3:6] · ee_rot_step (world frame, radians), solved by damped least-squares differential IK.
- `ee_delta_topdown` (A = 5): TCP translation and yaw a[3] · ee_rot_step, the gripper kept pointing down.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import mujoco
import numpy as np

from policyforge.config import check, check_in
from policyforge.sims.motion import FRANKA_LIMITS, limited_motion
from policyforge.sims.task import Array, ResetState, Sampler, Task, TaskConfig, TaskState, Xp, asset_path
from policyforge.sims.xmath import (
    cross,
    quat_conj,
    quat_from_rotation_vector,
    quat_mul,
    quat_rotate,
    quat_to_axis_angle,
    wrap_angle,
    yaw_quat,
)

HOME_QPOS = np.array([0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4])
"""The Panda's 'ready' pose: TCP at (0.307, 0, 0.487) m pointing down."""
VELOCITY_LIMITS = np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61])
"""Panda joint velocity limits, rad/s (datasheet)."""
FINGER_OPEN = 0.04
"""Opening of each finger when the gripper is open, m (Franka Hand: 80 mm stroke)."""
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
POLICY_SENSORS = [f"q{i}" for i in range(1, 8)] + [f"dq{i}" for i in range(1, 8)] + ["tcp_pos", "tcp_quat"]
DOWN_QUAT = np.array([0.0, 1.0, 0.0, 0.0])
"""TCP orientation pointing down with zero yaw: a half turn about world x."""

ControlMode = Literal["joint_delta", "ee_delta_pose", "ee_delta_topdown"]


@dataclasses.dataclass
class ArmConfig(TaskConfig):
    """Options shared by the `arm-*` tasks."""

    control_dt: float = 0.04
    """Seconds between actions (25 Hz) over 5 ms physics steps."""
    episode_seconds: float = 4.0
    """Episode length in seconds."""
    control_mode: ControlMode = "ee_delta_topdown"
    """How actions drive the arm: `joint_delta`, `ee_delta_pose` or `ee_delta_topdown` (module docstring)."""
    reward_type: Literal["dense", "sparse"] = "dense"
    """`dense`: shaped progress in [0, 1]; `sparse`: 1 on success, else 0."""
    terminate_on_success: bool = False
    """End the episode (terminated) as soon as the task succeeds."""
    success_threshold: float = 0.05
    """Distance (m) under which a position counts as reached."""
    joint_speed_fraction: float = 0.5
    """`joint_delta`: fraction of each joint's velocity limit commanded by |action| = 1."""
    ee_step: float = 0.03
    """`ee_delta_*`: TCP translation per control step at |action| = 1, m."""
    ee_rot_step: float = 0.15
    """`ee_delta_*`: TCP rotation per control step at |action| = 1, rad."""
    ik_damping: float = 0.05
    """Damping λ of the least-squares IK, Δq = Jᵀ(JJᵀ + λ²I)⁻¹ e."""
    init_joint_noise: float = 0.05
    """Initial arm joints: the ready pose plus uniform noise of this size, rad."""
    action_rate_penalty: float = 0.0
    """Subtracted from the reward times the mean squared change of the action since the last step. A policy
    that chatters bang-bang at its goal looks fine here (the PD smooths it) but shakes a real arm; 0: off."""
    motion_generator: Literal["none", "franka"] = "none"
    """Between the policy's joint targets and the PD: `none` (the PD tracks each target, stiffly: joint
    accelerations of 40–200 rad/s²), or `franka`: franky's motion to each target, with the Franka's velocity and
    acceleration limits (sims/motion.py), so a policy trained on it moves on a Franka as it did here. Not with
    `joint_delta`, whose targets step from the previous target rather than from the measured joints."""
    motion_dynamics_factor: float = 0.5
    """`franka`: fraction of the Franka's limits the motion uses, franky's relative_dynamics_factor (deploy runs
    the driver with the policy's value)."""
    motion_acceleration_fraction: float = 0.6
    """`franka`: fraction of those acceleration limits the arm reaches when every control step starts a new motion
    (fitted to franky-sim's desired joints under a 25 Hz reach policy: 0.6, mean error 1.2 cm-rad against 2.7 at
    1.0; ruckig alone, replayed on the same commands, turns faster than franky did)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.success_threshold, "success_threshold", "(0, 1]", unit=" m")
        check_in(self.joint_speed_fraction, "joint_speed_fraction", "(0, 1]")
        check_in(self.ee_step, "ee_step", "(0, 0.5]", "the arm's reach is under 1 m", unit=" m")
        check_in(self.ee_rot_step, "ee_rot_step", "(0, π]", unit=" rad")
        check_in(self.ik_damping, "ik_damping", "[0, inf)")
        check_in(self.init_joint_noise, "init_joint_noise", "[0, π]", unit=" rad")
        check_in(self.action_rate_penalty, "action_rate_penalty", "[0, 1000]", "the reward's other terms are ≤ 1")
        check_in(self.motion_dynamics_factor, "motion_dynamics_factor", "(0, 1]", "franky's relative_dynamics_factor")
        check_in(self.motion_acceleration_fraction, "motion_acceleration_fraction", "(0, 1]")
        check(
            self.motion_generator == "none" or self.control_mode != "joint_delta",
            "motion_generator",
            "the Franka motion generator follows targets set from the measured joints; joint_delta steps from the "
            "previous target: use control_mode ee_delta_topdown or ee_delta_pose, or motion_generator none",
        )


class ArmTask(Task):
    """Base of the arm tasks: model, reset of the arm, control modes, proprioceptive observations."""

    config_class = ArmConfig
    xml_file = "panda_scene.xml"
    physics_fields = ("qpos", "qvel", "ctrl", "sensordata", "cdof", "subtree_com")
    has_cube = True
    config: ArmConfig

    @classmethod
    def load_model(cls, config: ArmConfig) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(asset_path(cls.xml_file)))
        if not cls.has_cube:
            for name in ("cube_pos", "cube_quat"):
                spec.delete(spec.sensor(name))
            spec.delete(spec.body("cube"))
            spec.delete(spec.camera("task"))  # it frames the cube; reach goals span the workspace
            key = spec.key("home")
            key.qpos = list(key.qpos)[:9]
        return spec.compile()

    def __init__(self, model: mujoco.MjModel, config: ArmConfig):
        super().__init__(model, config)
        self.arm_qpos = np.array([model.joint(j).qposadr[0] for j in ARM_JOINTS])
        self.arm_dofs = np.array([model.joint(j).dofadr[0] for j in ARM_JOINTS])
        self.finger_qpos = np.array([model.joint(f"finger_{s}").qposadr[0] for s in ("left", "right")])
        self.joint_low = model.jnt_range[[model.joint(j).id for j in ARM_JOINTS], 0]
        self.joint_high = model.jnt_range[[model.joint(j).id for j in ARM_JOINTS], 1]
        self.max_joint_step = VELOCITY_LIMITS * config.control_dt
        self.max_lead = 2 * self.max_joint_step
        self.cube_qpos = model.joint("cube").qposadr[0] if self.has_cube else None
        self.arm_root = int(model.body_rootid[model.body("hand").id])
        self.motion_limits = FRANKA_LIMITS.scaled(config.motion_dynamics_factor, config.motion_acceleration_fraction)

    @property
    def action_dim(self) -> int:
        return {"joint_delta": 8, "ee_delta_pose": 7, "ee_delta_topdown": 5}[self.config.control_mode]

    # -- reset -------------------------------------------------------------------------------------------

    def reset_arm(self, sampler: Sampler, n: int, xp: Xp) -> tuple[Array, Array]:
        """qpos [n, nq] (arm near the ready pose, gripper open, cube at home) and ctrl [n, nu]."""
        noise = sampler.uniform(-1.0, 1.0, (n, 7)) * self.config.init_joint_noise
        arm = xp.clip(xp.asarray(HOME_QPOS) + noise, self.joint_low, self.joint_high)
        fingers = xp.full((n, 2), FINGER_OPEN)
        rest = xp.broadcast_to(xp.asarray(self.model.key_qpos[0, 9:]), (n, self.model.nq - 9))
        return xp.concatenate([arm, fingers, rest], axis=1), xp.concatenate([arm, fingers], axis=1)

    def reset_vars(self, n: int, goal: Array, xp: Xp) -> dict[str, Array]:
        return {
            "goal": goal,
            "last_action": xp.zeros((n, self.action_dim)),
            "previous_action": xp.zeros((n, self.action_dim)),
            "ee_target_pos": xp.zeros((n, 3)),
            "ee_target_quat": xp.zeros((n, 4)),
            "ee_target_valid": xp.zeros(n),  # 0 until the first step: the target starts at the TCP
            "motion_velocity": xp.zeros((n, 7)),  # the motion generator's reference velocity, rad/s
        }

    def make_reset(self, qpos: Array, ctrl: Array, goal: Array, marker: Array, xp: Xp) -> ResetState:
        n = qpos.shape[0]
        return ResetState(qpos, xp.zeros((n, self.model.nv)), ctrl, marker[:, None, :], self.reset_vars(n, goal, xp))

    # -- control -----------------------------------------------------------------------------------------

    def control(self, action: Array, state: TaskState, xp: Xp) -> Array:
        """PD targets [N, 9].

        `joint_delta` adds joint steps to the previous joint targets. The `ee_delta_*` modes move a
        Cartesian TCP target by the action and servo the measured TCP to it with differential IK, so
        there is no drift and a constant action gives a constant speed despite the PD lag. Joint targets
        stay within `max_lead` of the measured joints, so a blocked arm does not wind up.
        """
        sensordata = state.phys["sensordata"]
        q = self.sensor.group(sensordata, [f"q{i}" for i in range(1, 8)], xp)
        if self.config.control_mode == "joint_delta":
            base = state.phys["ctrl"][:, :7]
            dq = action[:, :7] * self.max_joint_step * self.config.joint_speed_fraction
        else:
            target_pos, target_quat = self.ee_target(state, action, xp)
            base, dq = q, self._ik(self._pose_error(target_pos, target_quat, sensordata, xp), state, q, xp)
        target = xp.clip(base + dq, q - self.max_lead, q + self.max_lead)
        target = xp.clip(target, self.joint_low, self.joint_high)
        fingers = (action[:, -1:] + 1.0) * (FINGER_OPEN / 2)
        return xp.concatenate([target, fingers, fingers], axis=1)

    def actuate(self, action: Array, state: TaskState, xp: Xp) -> tuple[Array, dict[str, Array]]:
        """`control`'s targets, through the Franka motion generator when configured: the PD then tracks the
        generator's reference [N, 7] (kept in `ctrl`; its velocity in the variables) instead of each target."""
        ctrl = self.control(action, state, xp)
        if self.config.motion_generator == "none":
            return ctrl, state.vars
        reference, velocity = limited_motion(
            state.phys["ctrl"][:, :7],
            state.vars["motion_velocity"],
            ctrl[:, :7],
            self.motion_limits,
            self.config.control_dt,
            xp,
        )
        reference = xp.clip(reference, self.joint_low, self.joint_high)
        return xp.concatenate([reference, ctrl[:, 7:]], axis=1), {**state.vars, "motion_velocity": velocity}

    def ee_target(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, Array]:
        """The TCP target after this action: position [N, 3] within `3 · ee_step` of the TCP, quaternion [N, 4]."""
        sensordata, cfg = state.phys["sensordata"], self.config
        tcp, tcp_quat = self.sensor(sensordata, "tcp_pos"), self.sensor(sensordata, "tcp_quat")
        valid = state.vars["ee_target_valid"][:, None] > 0
        pos = xp.where(valid, state.vars["ee_target_pos"], tcp) + action[:, :3] * cfg.ee_step
        lead = 3 * cfg.ee_step
        pos = tcp + xp.clip(pos - tcp, -lead, lead)
        quat = xp.where(valid, state.vars["ee_target_quat"], tcp_quat)
        if cfg.control_mode == "ee_delta_pose":
            return pos, quat_mul(quat_from_rotation_vector(action[:, 3:6] * cfg.ee_rot_step, xp), quat, xp)
        yaw = tcp_yaw(quat, xp) + action[:, 3] * cfg.ee_rot_step
        down = xp.broadcast_to(xp.asarray(DOWN_QUAT), tcp_quat.shape)
        return pos, quat_mul(yaw_quat(yaw, xp), down, xp)

    def update_vars(self, state: TaskState, action: Array, xp: Xp) -> dict[str, Array]:
        new = {**state.vars, "previous_action": state.vars["last_action"], "last_action": action}
        if self.config.control_mode != "joint_delta":
            pos, quat = self.ee_target(state, action, xp)
            new.update(ee_target_pos=pos, ee_target_quat=quat, ee_target_valid=xp.ones_like(new["ee_target_valid"]))
        return new

    def _pose_error(self, target_pos: Array, target_quat: Array, sensordata: Array, xp: Xp) -> Array:
        """TCP twist [N, 6] to the target (translation m, rotation vector rad; world frame), rotation ≤ 3 steps."""
        tcp_quat = self.sensor(sensordata, "tcp_quat")
        rotation = quat_to_axis_angle(quat_mul(target_quat, quat_conj(tcp_quat, xp), xp), xp)
        angle = xp.linalg.norm(rotation, axis=1, keepdims=True)
        limit = 3 * self.config.ee_rot_step
        rotation = rotation * xp.minimum(1.0, limit / xp.maximum(angle, 1e-9))
        return xp.concatenate([target_pos - self.sensor(sensordata, "tcp_pos"), rotation], axis=1)

    def _tcp_jacobian(self, phys: dict[str, Array], xp: Xp) -> Array:
        """TCP Jacobian over the arm joints, [N, 6, 7] (translation rows, then rotation), from the motion
        axes `cdof` [N, nv, 6] as mj_jac computes it: linear part + angular × (point − subtree CoM)."""
        cdof = phys["cdof"][:, self.arm_dofs]  # [N, 7, 6]: angular, linear
        offset = self.sensor(phys["sensordata"], "tcp_pos") - phys["subtree_com"][:, self.arm_root]
        angular = cdof[:, :, :3]
        linear = cdof[:, :, 3:] + cross(angular, offset[:, None, :], xp)
        return xp.swapaxes(xp.concatenate([linear, angular], axis=2), 1, 2)

    def _ik(self, error: Array, state: TaskState, q: Array, xp: Xp) -> Array:
        """Joint step [N, 7] for a TCP twist [N, 6]: damped least squares plus a pull towards the ready pose
        in the Jacobian's null space."""
        jac = self._tcp_jacobian(state.phys, xp)
        jac_t = xp.swapaxes(jac, 1, 2)
        gram = jac @ jac_t + (self.config.ik_damping**2) * xp.eye(6)
        posture = 0.1 * (xp.asarray(HOME_QPOS) - q)
        # one solve for both right-hand sides: Δq = J⁺e + (I − J⁺J)·posture, with J⁺ = Jᵀ(JJᵀ + λ²I)⁻¹
        rhs = xp.stack([error, (jac @ posture[:, :, None])[:, :, 0]], axis=2)
        solved = xp.linalg.solve(gram, rhs)  # [N, 6, 2]
        return (jac_t @ (solved[:, :, 0] - solved[:, :, 1])[:, :, None])[:, :, 0] + posture

    # -- observations ------------------------------------------------------------------------------------

    def proprioception(self, state: TaskState, xp: Xp) -> Array:
        """Joint positions and velocities, gripper opening and TCP pose: [N, 22]."""
        sensordata = state.phys["sensordata"]
        fingers = self.sensor(sensordata, "finger_left_pos") + self.sensor(sensordata, "finger_right_pos")
        return xp.concatenate([self.sensor.group(sensordata, POLICY_SENSORS, xp), fingers], axis=1)

    def proprioception_names(self) -> list[str]:
        """Names of `proprioception`'s 22 features."""
        joints = [f"q{i}" for i in range(1, 8)] + [f"dq{i}" for i in range(1, 8)]
        return [*joints, *(f"tcp_pos.{a}" for a in "xyz"), *(f"tcp_quat.{a}" for a in "wxyz"), "finger_opening"]

    def action_meaning(self) -> str:
        config = self.config
        moves = {
            "joint_delta": f"a[:7]: each joint's target moves by a · {config.joint_speed_fraction:g} · its velocity "
            f"limit · {config.control_dt:g} s",
            "ee_delta_pose": f"a[:3]: the TCP target moves by a · {config.ee_step:g} m, a[3:6]: rotates by the "
            f"rotation vector a · {config.ee_rot_step:g} rad (world frame; differential IK follows it)",
            "ee_delta_topdown": f"a[:3]: the TCP target moves by a · {config.ee_step:g} m (world frame), a[3]: its "
            f"yaw by a · {config.ee_rot_step:g} rad, pointing down (differential IK follows it)",
        }[config.control_mode]
        gripper = f"a[-1]: each finger at (a + 1) · {FINGER_OPEN / 2:g} m (-1 closed, +1 open)"
        return f"control_mode {config.control_mode}, per step: {moves}; {gripper}"

    def tcp_pos(self, state: TaskState) -> Array:
        return self.sensor(state.phys["sensordata"], "tcp_pos")

    def cube_pos(self, state: TaskState) -> Array:
        return self.sensor(state.phys["sensordata"], "cube_pos")

    def cube_quat(self, state: TaskState) -> Array:
        """Orientation of the cube, [N, 4] (w, x, y, z)."""
        return self.sensor(state.phys["sensordata"], "cube_quat")

    def touching(self, state: TaskState) -> tuple[Array, Array]:
        """Whether each finger pad touches something, bool [N] each."""
        sensordata = state.phys["sensordata"]
        return self.sensor(sensordata, "touch_left")[:, 0] > 0, self.sensor(sensordata, "touch_right")[:, 0] > 0

    def terminated(self, state: TaskState, xp: Xp) -> Array:
        if self.config.terminate_on_success:
            return self.success(state, xp)
        return super().terminated(state, xp)

    def finish_reward(
        self, dense: Array, success: Array, state: TaskState, action: Array, terms: dict[str, Array], xp: Xp
    ) -> tuple[Array, dict[str, Array]]:
        """The configured reward [N] and its terms: dense progress in [0, 1] (1 on success) or the sparse
        success flag, less the action-rate penalty (`state`: after the step, `action` [N, A]: this step's)."""
        reward = success.astype(dense.dtype) if self.config.reward_type == "sparse" else xp.where(success, 1.0, dense)
        if self.config.action_rate_penalty > 0:
            rate = xp.mean((action - state.vars["previous_action"]) ** 2, axis=1)
            terms = {**terms, "action_rate": rate}
            reward = reward - self.config.action_rate_penalty * rate
        return reward, terms


def tcp_yaw(tcp_quat: Array, xp: Xp) -> Array:
    """Yaw [N] of a (roughly) downward TCP: the heading of its x axis in the world's xy plane."""
    x_axis = quat_rotate(tcp_quat, xp.broadcast_to(xp.asarray([1.0, 0.0, 0.0]), tcp_quat[:, 1:].shape), xp)
    return xp.arctan2(x_axis[:, 1], x_axis[:, 0])


def grasp_yaw(cube_yaw: Array, tcp_yaw_now: Array, xp: Xp) -> Array:
    """Gripper yaw [N] closest to the current one that lines the fingers up with a cube's faces."""
    return tcp_yaw_now + wrap_angle(4 * (cube_yaw - tcp_yaw_now), xp) / 4
