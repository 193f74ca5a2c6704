"""Deploying a trained policy: the exported file run one observation at a time, the task adapters that build
observations and commands with the simulator's own code, and `deploy()` behind `policyforge deploy`."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import mujoco
import numpy as np

from policyforge.policies.export import load_exported
from policyforge.real_robot.robot import Command, RobotState
from policyforge.sims.task import TaskState, asset_path
from policyforge.sims.tasks.arm import FINGER_OPEN, HOME_QPOS
from policyforge.sims.tasks.quadruped import JOINT_NAMES, STAND_QPOS, QuadrupedConfig, joint_targets, policy_observation


class ExportedPolicy:
    """An exported policy (ONNX or TorchScript, see `policyforge export`) as obs [D] → action [A]: keeps the
    observation history of chunked policies and executes `act_steps` actions of each chunk, like the
    simulator's `ChunkedActor`; a per-step residual runs its base's exported chunks and corrects each action."""

    def __init__(self, path: Path):
        self.path = Path(path)
        description = self.path.with_suffix(".json")
        if not description.exists():
            raise FileNotFoundError(f"{description} is missing: export with `policyforge export RUN` (it writes both)")
        self.spec = json.loads(description.read_text())
        if self.spec.get("image_shape"):
            raise ValueError(f"{self.path} takes camera images; deploying image policies is not supported yet")
        self.run = load_exported(self.path)
        self.action_dim = int(self.spec["action_dim"])
        self.history_len = int(self.spec.get("n_obs_steps") or 0)
        self.act_steps = int(self.spec.get("act_steps") or self.spec.get("chunk_len", 1))
        self.base = ExportedPolicy(self.path.with_name(self.spec["base"])) if self.spec.get("base") else None
        self.reset()

    def reset(self) -> None:
        if self.base is not None:
            self.base.reset()
        self.history: collections.deque[np.ndarray] = collections.deque(maxlen=max(self.history_len, 1))
        self.chunk: np.ndarray | None = None
        self.cursor = self.act_steps

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        if not self.history:
            self.history.extend([obs] * self.history.maxlen)  # a new episode: the first frame fills the history
        else:
            self.history.append(obs)
        if self.cursor >= self.act_steps:
            batch = np.stack(self.history)[None] if self.history_len else obs[None]
            inputs = (batch,) if self.base is None else (batch, self.base(obs)[None])
            self.chunk, self.cursor = np.asarray(self.run(*inputs))[0].reshape(-1, self.action_dim), 0
        action = self.chunk[self.cursor]
        self.cursor += 1
        return action


@dataclasses.dataclass
class QuadrupedAdapter:
    """`quadruped-walk` on a Go2: the task's observation and PD-target code, the simulator's actuator gains."""

    task: QuadrupedConfig
    """The trained run's task options (action scale)."""
    velocity_command: tuple[float, float, float] = (0.5, 0.0, 0.0)
    """Commanded forward, sideways (m/s) and turn (rad/s) velocity."""

    def __post_init__(self) -> None:
        model = mujoco.MjModel.from_xml_path(str(asset_path("go2.xml")))
        self.kp = model.actuator_gainprm[:12, 0].copy()
        self.kd = -model.actuator_biasprm[:12, 2].copy()
        ranges = model.jnt_range[[model.joint(name).id for name in JOINT_NAMES]]
        self.low, self.high = ranges[:, 0].copy(), ranges[:, 1].copy()
        self.action_dim = 12
        self.default_pose = STAND_QPOS.copy()

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        rows = [state.gyro, state.imu_quat, np.asarray(self.velocity_command), state.joint_pos, state.joint_vel]
        return policy_observation(*(np.asarray(r, np.float64)[None] for r in rows), last_action[None], np)[0]

    def command(self, action: np.ndarray) -> Command:
        return self.pose_command(
            joint_targets(np.asarray(action)[None], self.low, self.high, self.task.action_scale, np)[0]
        )

    def pose_command(self, position: np.ndarray) -> Command:
        zeros = np.zeros(12)
        return Command(
            position=np.asarray(position, np.float64), velocity=zeros, torque=zeros.copy(), kp=self.kp, kd=self.kd
        )


class ArmAdapter:
    """An `arm-*` task on a Franka, through a digital twin: the simulator's own model is set to the measured
    joints, and the task's `observe` and `control` run on it, so observations, the differential IK and the
    Cartesian target memory are the simulator's code. `goal`: the reach target [3] (m, base frame)."""

    def __init__(self, task_name: str, task_options: dict, goal: np.ndarray, cartesian: bool = False):
        from policyforge.config import from_dict
        from policyforge.sims.tasks import TASKS

        cls = TASKS[task_name]
        self.task = cls(
            cls.load_model(from_dict(cls.config_class, task_options)), from_dict(cls.config_class, task_options)
        )
        self.data = mujoco.MjData(self.task.model)
        self._scratch = mujoco.MjData(self.task.model)
        self.cartesian = cartesian
        self.action_dim = self.task.action_dim
        self.default_pose = HOME_QPOS.copy()
        self.vars = {k: np.asarray(v) for k, v in self.task.reset_vars(1, np.asarray(goal, float)[None], np).items()}
        self._twin: TaskState | None = None

    def set_goal(self, goal: np.ndarray) -> None:
        self.vars["goal"] = np.asarray(goal, dtype=np.float64)[None]

    def _sync(self, state: RobotState) -> TaskState:
        """The twin at the measured joints (gripper open), as the task's batched state [1, ...]."""
        self.data.qpos[self.task.arm_qpos], self.data.qvel[self.task.arm_dofs] = state.joint_pos, state.joint_vel
        self.data.qpos[self.task.finger_qpos] = FINGER_OPEN
        if self._twin is None:  # `joint_delta` steps from the previous targets: start at the measured joints
            self.data.ctrl[:7] = state.joint_pos
        mujoco.mj_forward(self.task.model, self.data)
        phys = {name: np.array(getattr(self.data, name))[None] for name in self.task.physics_fields}
        self._twin = TaskState(phys, self.vars)
        return self._twin

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        return self.task.observe(self._sync(state), np)["policy"][0]

    def command(self, action: np.ndarray) -> Command:
        twin, action = self._twin, np.asarray(action, dtype=np.float64)[None]
        targets = self.task.control(action, twin, np)[0, :7]
        self.data.ctrl[:7] = targets
        command = Command(position=targets)
        if self.cartesian:
            position, orientation = self.task.ee_target(twin, action, np)
            command.ee_target, command.ee_orientation = position[0], orientation[0]
        self.vars = self.task.update_vars(twin, action, np)
        return command

    def pose_command(self, position: np.ndarray) -> Command:
        return Command(position=np.asarray(position, dtype=np.float64))

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """The TCP position [3] (m, base frame) of joint positions [7], on a scratch copy of the twin."""
        scratch = self._scratch
        scratch.qpos[self.task.arm_qpos] = joint_pos
        mujoco.mj_kinematics(self.task.model, scratch)
        return scratch.site("tcp").xpos.copy()
