"""The simulated Go2's physics: go2.xml with torque-controlled motors applying a LowCmd's PD law each step, and
leg-joint physics that can differ from the model's (`JointPhysics`: a peer with known parameters for system
identification, and the candidate models fitted to what it recorded)."""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np
from unitree_sdk2py.idl.unitree_go.msg.dds_ import LowState_
from unitree_sdk2py.utils.crc import CRC

from policyforge.real_robot.go2 import NUM_MOTORS, SERVO_MODE, empty_lowstate
from policyforge.real_robot.robot import Command
from policyforge.sims.task import asset_path
from policyforge.sims.tasks.quadruped import JOINT_NAMES, set_leg_joints

LYING_QPOS = np.tile([0.0, 1.36, -2.65], 4)
"""Folded legs, trunk on the ground: how a Go2 waits for low-level commands."""
HANG_HEIGHT = 0.6
"""Height of the trunk of a hanging Go2 (`JointPhysics.hang`), m: the feet swing clear of the floor."""


@dataclasses.dataclass
class JointPhysics:
    """The leg joints' physics where they differ from go2.xml's: a peer with known parameters for system
    identification (`real_robot.sysid`), and the candidate models fitted to its recordings."""

    damping: float | None = None
    """Viscous damping of every leg joint, N·m·s/rad (None: the model's, 0.1)."""
    armature: float | None = None
    """Rotor inertia reflected at every leg joint, kg·m² (None: the model's, 0.01; calves 0.02)."""
    frictionloss: float | None = None
    """Dry friction of every leg joint, N·m (None: the model's, 0)."""
    motor_strength: float = 1.0
    """Torque the motors apply per unit commanded (a weak or strong motor), before the torque limits."""
    command_delay: float = 0.0
    """Seconds between a command's arrival and its effect."""
    hang: bool = False
    """The trunk hangs fixed HANG_HEIGHT above the floor, legs swinging free (a robot on a gantry)."""

    def peer_flags(self) -> tuple[str, ...]:
        """The `go2_sim` flags that give the peer these physics."""
        flags = ("--hang",) if self.hang else ()
        for field, flag in (
            ("damping", "--joint-damping"),
            ("armature", "--armature"),
            ("frictionloss", "--frictionloss"),
        ):
            if getattr(self, field) is not None:
                flags += (flag, str(getattr(self, field)))
        return (*flags, "--motor-strength", str(self.motor_strength), "--command-delay", str(self.command_delay))


def go2_model(physics: JointPhysics, timestep: float) -> mujoco.MjModel:
    """go2.xml with torque motors (ctrl = N·m, within the torque limits) and `physics`' leg joints."""
    if physics.hang:
        spec = mujoco.MjSpec.from_file(str(asset_path("go2.xml")))
        spec.delete(spec.joint("root"))
        for key in list(spec.keys):
            spec.delete(key)
        spec.body("trunk").pos = [0.0, 0.0, HANG_HEIGHT]
        model = spec.compile()
    else:
        model = mujoco.MjModel.from_xml_path(str(asset_path("go2.xml")))
    model.opt.timestep = timestep
    model.actuator_gaintype[:] = mujoco.mjtGain.mjGAIN_FIXED
    model.actuator_biastype[:] = mujoco.mjtBias.mjBIAS_NONE
    model.actuator_gainprm[:, 0] = 1.0  # ctrl is the motor torque
    model.actuator_ctrlrange[:] = model.actuator_forcerange
    model.actuator_ctrllimited[:] = True
    set_leg_joints(model, physics.damping, physics.armature, physics.frictionloss)
    return model


class SimulatedGo2:
    """MuJoCo Go2 with torque-controlled motors: `step(command)` applies one LowCmd's PD law for one step."""

    def __init__(self, rate_hz: float, physics: JointPhysics | None = None):
        self.physics = physics or JointPhysics()
        self.model = go2_model(self.physics, 1.0 / rate_hz)
        self.data = mujoco.MjData(self.model)
        self.qpos_ids = np.array([self.model.jnt_qposadr[self.model.joint(j).id] for j in JOINT_NAMES])
        self.qvel_ids = np.array([self.model.jnt_dofadr[self.model.joint(j).id] for j in JOINT_NAMES])
        if not self.physics.hang:
            self.data.qpos[:7] = [0.0, 0.0, 0.12, 1.0, 0.0, 0.0, 0.0]
        self.data.qpos[self.qpos_ids] = LYING_QPOS
        mujoco.mj_forward(self.model, self.data)
        self.tick = 0

    @property
    def joint_pos(self) -> np.ndarray:
        return self.data.qpos[self.qpos_ids]

    @property
    def joint_vel(self) -> np.ndarray:
        return self.data.qvel[self.qvel_ids]

    def step(self, command: Command | None, damping_kd: float) -> None:
        """One physics step under `command` (None: damping)."""
        q, dq = self.joint_pos, self.joint_vel
        if command is None:
            torque = -damping_kd * dq
        else:
            torque = command.torque + command.kp * (command.position - q) + command.kd * (command.velocity - dq)
            torque = self.physics.motor_strength * torque
        self.data.ctrl[:NUM_MOTORS] = torque
        mujoco.mj_step(self.model, self.data)
        self.tick += 1

    def sensor(self, name: str) -> np.ndarray:
        return self.data.sensor(name).data

    def lowstate(self, tick_ms: int | None = None) -> LowState_:
        """This state as a LowState_ with CRC; `tick_ms`: the robot clock's stamp (default: simulated ms)."""
        msg = empty_lowstate()
        tick_ms = round(self.tick * self.model.opt.timestep * 1000) if tick_ms is None else tick_ms
        msg.head, msg.level_flag, msg.tick = [0xFE, 0xEF], 0xFF, tick_ms
        imu = msg.imu_state
        imu.quaternion = [float(x) for x in self.sensor("orientation")]
        imu.gyroscope = [float(x) for x in self.sensor("gyro")]
        imu.accelerometer = [float(x) for x in self.sensor("accelerometer")]
        torque = self.data.actuator_force[:NUM_MOTORS]
        for i, motor in enumerate(msg.motor_state[:NUM_MOTORS]):
            motor.mode, motor.q, motor.dq, motor.tau_est = (
                SERVO_MODE,
                *map(float, (self.joint_pos[i], self.joint_vel[i], torque[i])),
            )
        msg.foot_force = [int(min(self.sensor(f"{leg}_touch")[0], 30000)) for leg in ("FR", "FL", "RR", "RL")]
        msg.crc = CRC().Crc(msg)
        return msg

    @property
    def base_position(self) -> np.ndarray:
        return self.data.body("trunk").xpos.copy() if self.physics.hang else self.data.qpos[:3].copy()
