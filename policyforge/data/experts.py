"""Scripted experts for the arm tasks: state machines over privileged task state, in `ee_delta_topdown` mode.

They prove each task solvable and produce demonstrations. Two knobs degrade them on purpose, so that behaviour
cloning on their demonstrations lands at a moderate success rate: `action_noise` (Gaussian noise on every action,
`noise_correlation` making it a slowly turning push instead of jitter: `ActionNoise`) and `hesitation` (random
pauses, which make the same state lead to different actions).
"""

from __future__ import annotations

import abc

import numpy as np
import torch

from policyforge.policies.base import Obs, Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.task import TaskState
from policyforge.sims.tasks.arm_base import ArmTask, grasp_yaw, tcp_yaw
from policyforge.sims.tasks.arm_instructed import TOUCH_HEIGHT, ArmInstructed
from policyforge.sims.tasks.arm_tasks import CUBE_HALF, ArmLiftCube, ArmPushCube, ArmReach
from policyforge.sims.tasks.instructions import FAMILIES
from policyforge.sims.xmath import quat_rotate, wrap_angle

OPEN, CLOSED = 1.0, -1.0


class ActionNoise:
    """Gaussian noise of standard deviation `std` on actions [N, A], each env's an AR(1) process with lag-one
    correlation `correlation`, restarted at each episode: 0 draws it afresh every step (jitter around the plan);
    near 1 it pushes the same way for 1 / (1 - correlation) steps or so, so an arm wanders across its workspace
    (play-like rollouts: the poses a reward model must learn are not the task's, as an RL policy's early ones)."""

    def __init__(self, std: float, correlation: float, num_envs: int, rng: np.random.Generator):
        if not 0.0 <= correlation < 1.0:
            raise ValueError(f"noise_correlation is a lag-one correlation in [0, 1), got {correlation}")
        self.std, self.correlation, self.rng = std, correlation, rng
        self.state: np.ndarray | None = None
        self.fresh = np.ones(num_envs, dtype=bool)

    def reset(self, env_ids: np.ndarray) -> None:
        """Envs `env_ids` begin an episode: their noise starts afresh."""
        self.fresh[env_ids] = True

    def __call__(self, action: np.ndarray) -> np.ndarray:
        """`action` [N, A] plus this step's noise (unclipped)."""
        if self.std == 0:
            return action
        draw = self.rng.standard_normal(action.shape)
        if self.correlation > 0 and self.state is not None:
            carried = self.correlation * self.state + np.sqrt(1 - self.correlation**2) * draw
            draw = np.where(self.fresh[:, None], draw, carried)
        self.state, self.fresh[:] = draw, False
        return action + self.std * draw


class ArmExpert(abc.ABC):
    """Base: turns per-env TCP targets into `ee_delta_topdown` actions [N, 5].

    `action_noise`: standard deviation of Gaussian noise added to every action (before clipping to [-1, 1]),
    `noise_correlation` its correlation from one step to the next (`ActionNoise`).
    `hesitation`: per-step probability that an env starts a pause of 2–6 steps (this one included), during which
    it commands no motion (translation and yaw 0) and keeps its last gripper command.
    """

    PAUSE_STEPS = (2, 6)
    """Shortest and longest pause, control steps."""

    def __init__(
        self,
        task: ArmTask,
        num_envs: int,
        action_noise: float = 0.0,
        seed: int = 0,
        hesitation: float = 0.0,
        noise_correlation: float = 0.0,
    ):
        if task.config.control_mode != "ee_delta_topdown":
            raise ValueError(
                f"scripted experts act in control_mode 'ee_delta_topdown', not {task.config.control_mode!r}"
            )
        if not 0.0 <= hesitation < 1.0:
            raise ValueError(f"hesitation is a per-step probability in [0, 1), got {hesitation}")
        self.task = task
        self.phase = np.zeros(num_envs, dtype=np.int64)
        self.timer = np.zeros(num_envs, dtype=np.int64)
        self.hesitation = hesitation
        self.pause_left = np.zeros(num_envs, dtype=np.int64)
        self.last_gripper = np.full(num_envs, np.nan)  # NaN: no command yet this episode
        self.rng = np.random.default_rng(seed)
        self.noise = ActionNoise(action_noise, noise_correlation, num_envs, self.rng)

    def reset(self, env_ids: np.ndarray) -> None:
        """Start envs `env_ids` from the first phase, unpaused (call when they begin a new episode)."""
        self.phase[env_ids] = 0
        self.timer[env_ids] = 0
        self.pause_left[env_ids] = 0
        self.last_gripper[env_ids] = np.nan
        self.noise.reset(env_ids)

    def act(self, state: TaskState) -> np.ndarray:
        """Actions [N, 5] for the current state: the plan, with pauses when `hesitation` > 0."""
        action = self._plan(state)
        if self.hesitation > 0:
            shortest, longest = self.PAUSE_STEPS
            starts = (self.pause_left == 0) & (self.rng.random(len(action)) < self.hesitation)
            self.pause_left[starts] = self.rng.integers(shortest, longest + 1, int(starts.sum()))
            paused = self.pause_left > 0
            action[paused, :-1] = 0.0
            held = paused & ~np.isnan(self.last_gripper)
            action[held, -1] = self.last_gripper[held]
            self.pause_left[paused] -= 1
        self.last_gripper = action[:, -1].copy()
        return action

    def _move(self, state: TaskState, target: np.ndarray, yaw: np.ndarray, gripper: np.ndarray) -> np.ndarray:
        """Action moving the controller's TCP target (which the arm follows with a lag) towards `target`."""
        valid = state.vars["ee_target_valid"][:, None] > 0
        reference = np.where(valid, state.vars["ee_target_pos"], self.task.tcp_pos(state))
        quat = np.where(valid, state.vars["ee_target_quat"], self.task.sensor(state.phys["sensordata"], "tcp_quat"))
        translation = np.clip((target - reference) / self.task.config.ee_step, -1.0, 1.0)
        turn = np.clip(wrap_angle(yaw - tcp_yaw(quat, np), np) / self.task.config.ee_rot_step, -1.0, 1.0)
        action = np.concatenate([translation, turn[:, None], gripper[:, None]], axis=1)
        return np.clip(self.noise(action), -1.0, 1.0)

    def _reached(self, state: TaskState, target: np.ndarray, tolerance: float) -> np.ndarray:
        return np.linalg.norm(target - self.task.tcp_pos(state), axis=1) < tolerance

    def _cube_yaw(self, state: TaskState) -> np.ndarray:
        quat = self.task.cube_quat(state)
        x_axis = quat_rotate(quat, np.broadcast_to([1.0, 0.0, 0.0], quat[:, 1:].shape), np)
        cube_yaw = np.arctan2(x_axis[:, 1], x_axis[:, 0])
        return grasp_yaw(cube_yaw, tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np), np)

    @abc.abstractmethod
    def _plan(self, state: TaskState) -> np.ndarray:
        """The state machine's actions [N, 5] for the current state (advancing its phases)."""


class ReachExpert(ArmExpert):
    """Go straight to the goal."""

    def _plan(self, state: TaskState) -> np.ndarray:
        n = len(self.phase)
        yaw = tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np)
        return self._move(state, state.vars["goal"], yaw, np.full(n, OPEN))


class LiftExpert(ArmExpert):
    """Hover above the cube with the fingers lined up, descend, close the gripper where it is, lift."""

    HOVER = 0.08

    def __init__(self, task: ArmTask, num_envs: int, *args, **kwargs):
        super().__init__(task, num_envs, *args, **kwargs)
        self.hold = np.zeros((num_envs, 3))

    def _plan(self, state: TaskState) -> np.ndarray:
        cube, tcp = self.task.cube_pos(state), self.task.tcp_pos(state)
        yaw = self._cube_yaw(state)
        hover = cube + [0.0, 0.0, self.HOVER]
        lifted = self.hold + [0.0, 0.0, self.task.config.lift_height + 0.04]
        phase = self.phase[:, None]
        target = np.select([phase == 0, phase == 1, phase == 2], [hover, cube, self.hold], lifted)
        action = self._move(state, target, yaw, np.where(self.phase >= 2, CLOSED, OPEN))
        self.timer += 1
        aligned = np.abs(yaw - tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np)) < 0.05
        xy_error = np.linalg.norm((cube - tcp)[:, :2], axis=1)
        advance = (
            ((self.phase == 0) & self._reached(state, hover, 0.015) & aligned)
            | ((self.phase == 1) & (xy_error < 0.006) & (np.abs(cube - tcp)[:, 2] < 0.008))
            | ((self.phase == 2) & (self.timer > 6))
        )
        self.hold = np.where(((self.phase == 1) & advance)[:, None], tcp, self.hold)
        self.phase = np.where(advance, self.phase + 1, self.phase)
        self.timer = np.where(advance, 0, self.timer)
        return action


class PushExpert(ArmExpert):
    """Drop the closed gripper behind the cube (seen from the goal) and push it slowly along the line to the
    goal; start over when the cube slips off the gripper's face."""

    HEIGHT = CUBE_HALF + 0.002
    PUSH_SPEED = 0.4

    def _plan(self, state: TaskState) -> np.ndarray:
        cube, goal, tcp = self.task.cube_pos(state), state.vars["goal"], self.task.tcp_pos(state)
        offset = (goal - cube)[:, :2]
        remaining = np.linalg.norm(offset, axis=1, keepdims=True)
        direction = offset / np.maximum(remaining, 1e-6)
        low = _at_height(cube[:, :2] - direction * (CUBE_HALF + 0.03), self.HEIGHT)
        above = low + [0.0, 0.0, 0.08]
        contact = cube[:, :2] - direction * (CUBE_HALF + 0.005)
        push = _at_height(contact + direction * np.minimum(remaining, 0.03), self.HEIGHT)
        current_yaw = tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np)
        facing = np.arctan2(direction[:, 1], direction[:, 0]) + np.pi / 2  # the fingers' flat side to the cube
        yaw = current_yaw + _wrap_half_turn(facing - current_yaw)
        rise_first = tcp[:, 2:] < above[:, 2:] - 0.03  # leave the table vertically, not through the cube
        above = np.where(rise_first, _at_height(tcp[:, :2], float(above[0, 2])), above)
        phase = self.phase[:, None]
        target = np.select([phase == 0, phase == 1], [above, low], push)
        arrived = remaining < 0.02
        target = np.where(arrived, tcp, target)  # there: stop rather than nudge it past the goal
        action = self._move(state, target, yaw, np.full(len(cube), CLOSED))
        slow_down = np.clip(remaining / 0.08, 0.25, 1.0)  # the arm lags its targets: ease off near the goal
        action[:, :3] *= np.where(phase == 2, self.PUSH_SPEED * slow_down, 1.0)
        advance = ((self.phase == 0) & ~rise_first[:, 0] & self._reached(state, above, 0.02)) | (
            (self.phase == 1) & self._reached(state, low, 0.01)
        )
        self.phase = np.where(advance, self.phase + 1, self.phase)
        to_cube = (cube - tcp)[:, :2]
        behind = np.sum(to_cube * direction, axis=1) > CUBE_HALF
        lateral = np.abs(to_cube[:, 0] * direction[:, 1] - to_cube[:, 1] * direction[:, 0])
        lost = (self.phase == 2) & (~behind | (lateral > 0.02)) & ~arrived[:, 0]
        self.phase = np.where(lost, 0, self.phase)
        return action


def _at_height(xy: np.ndarray, height: float) -> np.ndarray:
    return np.concatenate([xy, np.full((len(xy), 1), height)], axis=1)


def _wrap_half_turn(angle: np.ndarray) -> np.ndarray:
    """Angles wrapped into [-π/2, π/2): the gripper is symmetric under a half turn."""
    return (angle + np.pi / 2) % np.pi - np.pi / 2


class PlaceExpert(LiftExpert):
    """Grasp the cube as `LiftExpert` does, lift it, carry it over the goal (the pad), lower it, open, rise."""

    CARRY = 0.12
    """TCP height while carrying, m: the held cube clears the other cubes."""

    def _plan(self, state: TaskState) -> np.ndarray:
        cube, tcp, goal = self.task.cube_pos(state), self.task.tcp_pos(state), state.vars["goal"]
        current_yaw = tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np)
        yaw = np.where(self.phase <= 1, self._cube_yaw(state), current_yaw)
        hover = cube + [0.0, 0.0, self.HOVER]
        carry = _at_height(tcp[:, :2] + (goal - cube)[:, :2], self.CARRY)  # the cube, not the TCP, over the goal
        lowered = _at_height(tcp[:, :2] + (goal - cube)[:, :2], CUBE_HALF + 0.004)
        phase = self.phase[:, None]
        targets = [hover, cube, self.hold, _at_height(self.hold[:, :2], self.CARRY), carry, lowered, tcp]
        target = np.select([phase == k for k in range(len(targets))], targets, _at_height(tcp[:, :2], self.CARRY))
        gripper = np.where((self.phase >= 2) & (self.phase <= 5), CLOSED, OPEN)
        action = self._move(state, target, yaw, gripper)
        self.timer += 1
        aligned = np.abs(wrap_angle(yaw - current_yaw, np)) < 0.05
        xy_error = np.linalg.norm((cube - tcp)[:, :2], axis=1)
        over_goal = np.linalg.norm((goal - cube)[:, :2], axis=1) < 0.008
        advance = (
            ((self.phase == 0) & self._reached(state, hover, 0.015) & aligned)
            | ((self.phase == 1) & (xy_error < 0.006) & (np.abs(cube - tcp)[:, 2] < 0.008))
            | ((self.phase == 2) & (self.timer > 6))
            | ((self.phase == 3) & (cube[:, 2] > self.CARRY - 0.03))
            | ((self.phase == 4) & over_goal)
            | ((self.phase == 5) & (cube[:, 2] < CUBE_HALF + 0.006))
            | ((self.phase == 6) & (self.timer > 6))
        )
        self.hold = np.where(((self.phase == 1) & advance)[:, None], tcp, self.hold)
        self.phase = np.where(advance, self.phase + 1, self.phase)
        self.timer = np.where(advance, 0, self.timer)
        return action


class TouchExpert(ArmExpert):
    """Hover above the cube with the open fingers lined up with its faces, then descend around it and stay."""

    HOVER = 0.08

    def _plan(self, state: TaskState) -> np.ndarray:
        cube = self.task.cube_pos(state)
        hover, touch = cube + [0.0, 0.0, self.HOVER], cube + [0.0, 0.0, TOUCH_HEIGHT]
        yaw = self._cube_yaw(state)
        misalignment = wrap_angle(yaw - tcp_yaw(self.task.sensor(state.phys["sensordata"], "tcp_quat"), np), np)
        target = np.where(self.phase[:, None] == 0, hover, touch)
        action = self._move(state, target, yaw, np.full(len(cube), OPEN))
        advance = (self.phase == 0) & self._reached(state, hover, 0.015) & (np.abs(misalignment) < 0.05)
        self.phase = np.where(advance, 1, self.phase)
        return action


class InstructedExpert(ArmExpert):
    """`arm-instructed`: each env follows its instruction's family with that family's expert (`LiftExpert`,
    `PushExpert`, `PlaceExpert`, `TouchExpert`), on the instructed cube and towards the instruction's goal."""

    def __init__(
        self,
        task: ArmTask,
        num_envs: int,
        action_noise: float = 0.0,
        seed: int = 0,
        hesitation: float = 0.0,
        noise_correlation: float = 0.0,
    ):
        super().__init__(task, num_envs, action_noise, seed, hesitation)
        by_family = {"lift": LiftExpert, "push": PushExpert, "place": PlaceExpert, "touch": TouchExpert}
        self.family_experts = [
            by_family[family](task, num_envs, action_noise, seed + 1 + k, noise_correlation=noise_correlation)
            for k, family in enumerate(FAMILIES)
        ]
        """One expert per family, in the order of the family ids (`instructions.FAMILIES`)."""

    def reset(self, env_ids: np.ndarray) -> None:
        super().reset(env_ids)
        for expert in self.family_experts:
            expert.reset(env_ids)

    def _plan(self, state: TaskState) -> np.ndarray:
        family = np.asarray(state.vars["family"])[:, None]
        plans = [expert._plan(state) for expert in self.family_experts]
        return np.select([family == k for k in range(len(plans))], plans)


EXPERTS: dict[type[ArmTask], type[ArmExpert]] = {
    ArmReach: ReachExpert,
    ArmLiftCube: LiftExpert,
    ArmPushCube: PushExpert,
    ArmInstructed: InstructedExpert,
}
"""Scripted expert of each arm task class."""


class PolicyExpert:
    """A trained policy as the demonstrator (distilling an RL expert, e.g. a PPO gait, into a generative
    policy): its deterministic `act` through a `ChunkedActor`, plus optional Gaussian `action_noise`."""

    def __init__(
        self, policy: Policy, num_envs: int, action_noise: float = 0.0, seed: int = 0, noise_correlation: float = 0.0
    ):
        self.actor = ChunkedActor(policy, num_envs)
        self.noise = ActionNoise(action_noise, noise_correlation, num_envs, np.random.default_rng(seed))

    def reset(self, env_ids: np.ndarray) -> None:
        """Envs `env_ids` start a new episode: fresh observation history and chunk."""
        done = torch.zeros(self.actor.num_envs, dtype=torch.bool)
        done[torch.as_tensor(env_ids, dtype=torch.long)] = True
        self.actor.episodes_ended(done)
        self.noise.reset(env_ids)

    def act(self, obs: Obs) -> np.ndarray:
        """Actions [N, A] for observations obs[key] [N, ...]."""
        return np.clip(self.noise(self.actor(obs).numpy()), -1.0, 1.0)
