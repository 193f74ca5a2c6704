"""An `arm-*` task's policy on a Franka, through a digital twin of the simulator: the task's own `observe` and
`control` run on its MuJoCo model set to the measured joints, so observations, the differential IK and the
Cartesian target memory are the simulator's code.

Tasks with objects (`arm-instructed`) need the scene the policy acts on: the cubes' and pads' poses and the
instruction. The twin takes them from the task's own reset drawn with a seed (`scene_seed`; the cubes must stand
where it says, and stay there: the twin cannot see them move), so only families that leave the cubes where they
are deploy (touch); lift, push and place need a stream of measured cube poses, which deploy does not read yet."""

from __future__ import annotations

import mujoco
import numpy as np

from policyforge.real_robot.deploy import DeployError
from policyforge.real_robot.robot import Command, RobotState
from policyforge.sims.task import NumpySampler, TaskState
from policyforge.sims.tasks.arm_base import FINGER_OPEN, HOME_QPOS

STATIC_FAMILIES = ("touch",)
"""Instruction families whose cubes stay where the scene put them: those a twin without cube tracking can deploy."""


class ArmAdapter:
    """Observations [D] from the robot's state and commands from actions, with the simulator's code. `goal`: the
    reach target [3] (m, base frame) of a task without a scene; `obs_key`: the observation the policy reads
    (`policy`, or `critic` for a student of the privileged state); `scene_seed`: the seed of a scene task's layout
    and instruction."""

    def __init__(
        self,
        task_name: str,
        task_options: dict,
        goal: np.ndarray,
        cartesian: bool = False,
        obs_key: str = "policy",
        scene_seed: int = 0,
        instruction: str | None = None,
    ):
        from policyforge.sims.make import make_task

        self.task = make_task(task_name, task_options)
        self.data = mujoco.MjData(self.task.model)
        self._scratch = mujoco.MjData(self.task.model)
        self.cartesian, self.obs_key = cartesian, obs_key
        self.action_dim = self.task.action_dim
        self.default_pose = HOME_QPOS.copy()
        self.has_scene = hasattr(self.task, "instruction_rows")  # arm-instructed: cubes, pads and an instruction
        if self.has_scene:
            self.vars = self._draw_scene(scene_seed, instruction)
        else:
            self.vars = {
                k: np.asarray(v) for k, v in self.task.reset_vars(1, np.asarray(goal, float)[None], np).items()
            }
        self._twin: TaskState | None = None
        self.obs_dim = self._observation_size()
        """Size D of the observations it builds."""

    @property
    def goal(self) -> np.ndarray:
        """Where the end effector should end [3] (m, base frame): the reach goal, or the scene's touch point."""
        return np.asarray(self.vars["goal"][0], dtype=np.float64)

    @property
    def success_distance(self) -> float:
        """The task's success distance of the end effector to `goal`, m."""
        config = self.task.config
        return float(config.touch_distance if self.has_scene else config.success_threshold)

    def scene_cubes(self) -> np.ndarray:
        """Where the scene's cubes stand [3, 3] (m, base frame; `instructions.CUBE_COLOURS` order)."""
        return self.task.cubes(self._twin_state(self._scratch), np)[0]

    def scene_lines(self) -> list[str]:
        """What the scene is, for the operator to set up: the instruction and where each cube stands."""
        if not self.has_scene:
            return []
        from policyforge.sims.tasks import instructions as language

        cubes = self.scene_cubes()
        where = ", ".join(
            f"{colour} ({x:.3f}, {y:.3f}, {z:.3f})"
            for colour, (x, y, z) in zip(language.CUBE_COLOURS, cubes, strict=True)
        )
        return [f"instruction: {self.task.instructions(self.vars)[0]!r}", f"cubes (m, base frame): {where}"]

    def set_goal(self, goal: np.ndarray) -> None:
        self.vars["goal"] = np.asarray(goal, dtype=np.float64)[None]

    def observation(self, state: RobotState, last_action: np.ndarray) -> np.ndarray:
        return self.task.observe(self._sync(state), np)[self.obs_key][0]

    def command(self, action: np.ndarray) -> Command:
        twin, action = self._twin, np.asarray(action, dtype=np.float64)[None]
        targets = self.task.control(action, twin, np)[0, :7]
        self.data.ctrl[:7] = targets
        command = Command(position=targets)
        if self.cartesian:
            position, orientation = self.task.ee_target(twin, action, np)
            command.ee_target, command.ee_orientation = position[0], orientation[0]
        self.vars = {**self.vars, **self.task.update_vars(twin, action, np)}
        return command

    def pose_command(self, position: np.ndarray) -> Command:
        return Command(position=np.asarray(position, dtype=np.float64))

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """The TCP position [3] (m, base frame) of joint positions [7], on a scratch copy of the twin."""
        scratch = self._scratch
        scratch.qpos[self.task.arm_qpos] = joint_pos
        mujoco.mj_kinematics(self.task.model, scratch)
        return scratch.site("tcp").xpos.copy()

    def twin_copy(self) -> mujoco.MjData:
        """A copy of the twin with the scene (cubes, pads), for a renderer on another thread (`success_detector`)."""
        copy = mujoco.MjData(self.task.model)
        copy.qpos[:], copy.ctrl[:] = self._scratch.qpos, self._scratch.ctrl
        if self.task.model.nmocap:
            copy.mocap_pos[:] = self._scratch.mocap_pos
        return copy

    def pose(self, data: mujoco.MjData, joint_pos: np.ndarray) -> None:
        """Put the arm of `data` (a `twin_copy`) at joint positions [7], fingers open, kinematics current."""
        data.qpos[self.task.arm_qpos], data.qpos[self.task.finger_qpos] = joint_pos, FINGER_OPEN
        mujoco.mj_forward(self.task.model, data)

    def _draw_scene(self, seed: int, instruction: str | None) -> dict[str, np.ndarray]:
        """The layout and instruction of the task's reset with `seed` (another `instruction` in its place, with its
        goal), put into the twin (and its scratch copy); DeployError for families whose cubes move."""
        families = [f for f in getattr(self.task.config, "families", []) if f not in STATIC_FAMILIES]
        if families:
            raise DeployError(
                f"{self.task.name} policies of the families {families} move the cubes, and deploy has no stream of "
                f"measured cube poses to follow them: deploy a policy trained on {list(STATIC_FAMILIES)} "
                "(sim.task_options.families)"
            )
        initial = self.task.reset(NumpySampler(np.random.default_rng(seed)), 1, np)
        for data in (self.data, self._scratch):
            data.qpos[:], data.ctrl[:] = initial.qpos[0], initial.ctrl[0]
            if self.task.model.nmocap:
                data.mocap_pos[:] = initial.mocap_pos[0]
        scene = {k: np.asarray(v) for k, v in initial.vars.items()}
        if instruction is not None:
            cubes = self.task.cubes(self._twin_state(self._scratch, scene), np)  # [1, 3, 3], the scene just drawn
            scene.update(self._instructed(instruction, cubes, scene["pads"]))
        return scene

    def _instructed(self, text: str, cubes: np.ndarray, pads: np.ndarray) -> dict[str, np.ndarray]:
        """The ids of instruction `text` and its goal in the drawn scene (cubes, pads [1, 3, 3]); DeployError
        naming --instruction for a text that is not one of the task's, or of a family the policy was not trained on."""
        from policyforge.sims.tasks import instructions as language

        try:
            ids = language.parse(text)
        except ValueError as err:
            raise DeployError(f"--instruction: {err}") from None
        family, families = language.FAMILIES[ids[0]], self.task.config.families
        if family not in families:
            raise DeployError(
                f"--instruction: {text!r} is a {family} instruction; the policy was trained on {families}"
            )
        named = {name: np.array([value], dtype=np.int32) for name, value in zip(language.ID_NAMES, ids, strict=True)}
        goal = self.task.goal(named, cubes[:, ids[1]], pads, np)
        return {**named, "goal": goal}

    def _sync(self, state: RobotState) -> TaskState:
        """The twin at the measured joints (gripper open), as the task's batched state [1, ...]."""
        self.data.qpos[self.task.arm_qpos], self.data.qvel[self.task.arm_dofs] = state.joint_pos, state.joint_vel
        self.data.qpos[self.task.finger_qpos] = FINGER_OPEN
        if self._twin is None:  # `joint_delta` steps from the previous targets: start at the measured joints
            self.data.ctrl[:7] = state.joint_pos
        self._twin = self._twin_state(self.data)
        return self._twin

    def _twin_state(self, data: mujoco.MjData, task_vars: dict[str, np.ndarray] | None = None) -> TaskState:
        """`data` (kinematics made current) with the twin's variables (or `task_vars`), as the task's state [1, ...]."""
        mujoco.mj_forward(self.task.model, data)
        phys = {name: np.array(getattr(data, name))[None] for name in self.task.physics_fields}
        return TaskState(phys, self.vars if task_vars is None else task_vars)

    def _observation_size(self) -> int:
        """D of the task's observations, from the scratch copy of the twin at the home pose (leaves the twin be)."""
        scratch = self._scratch
        scratch.qpos[self.task.arm_qpos], scratch.qpos[self.task.finger_qpos] = self.default_pose, FINGER_OPEN
        return int(self.task.observe(self._twin_state(scratch), np)[self.obs_key].shape[-1])
