"""`quadruped-walk`: a Go2-sized quadruped tracks a commanded body velocity (50 Hz policy, 200 Hz physics).

Actions [N, 12] in [-1, 1] offset the PD position targets from the standing pose, in Unitree's motor
order (FR, FL, RR, RL × hip, thigh, calf). Rewards follow legged_gym / MuJoCo Playground: exponential
velocity tracking plus small regularisers, summed, scaled by the control dt and clipped at zero.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from policyforge.config import check, check_bounds, check_in
from policyforge.sims.randomization import TERRAIN_PREFIX
from policyforge.sims.task import Array, ResetState, Sampler, Task, TaskConfig, TaskState, Xp, asset_path
from policyforge.sims.xmath import projected_gravity

LEGS = ("FR", "FL", "RR", "RL")
JOINT_NAMES = tuple(f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf"))
"""Joint (and motor) order: Unitree's FR, FL, RR, RL × hip, thigh, calf."""
STAND_QPOS = np.tile([0.0, 0.9, -1.8], 4)
"""Standing joint pose, rad."""
STAND_HEIGHT = 0.29
"""Trunk height at reset, m."""
DEFAULT_WEIGHTS = {
    "tracking_lin_vel": 1.5,
    "tracking_ang_vel": 0.8,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -5.0,
    "torques": -2e-4,
    "action_rate": -0.01,
    "feet_air_time": 1.0,
    "joint_pose": -0.1,
}


def policy_observation(
    gyro: Array, orientation: Array, command: Array, joint_pos: Array, joint_vel: Array, last_action: Array, xp: Xp
) -> Array:
    """The policy's observation [N, 45] from what a real Go2 also measures: IMU gyro [N, 3] (rad/s) and
    orientation quaternion [N, 4] (w, x, y, z), the velocity command [N, 3], joint positions and velocities
    [N, 12] in motor order, and the previous action [N, 12]. Shared by the simulator and the deployment code."""
    return xp.concatenate(
        [
            0.25 * gyro,
            projected_gravity(orientation, xp),
            command,
            joint_pos - xp.asarray(STAND_QPOS),
            0.05 * joint_vel,
            last_action,
        ],
        axis=1,
    )


def joint_targets(action: Array, low: Array, high: Array, action_scale: float, xp: Xp) -> Array:
    """PD position targets [N, 12] (rad) of actions [N, 12] in [-1, 1]: offsets from the standing pose, within
    the joint range [low, high]. Shared by the simulator and the deployment code."""
    return xp.clip(xp.asarray(STAND_QPOS) + action_scale * action, low, high)


def set_leg_joints(
    model: mujoco.MjModel, damping: float | None, armature: float | None, frictionloss: float | None
) -> None:
    """Give every leg joint of a Go2 model this damping, armature and dry friction (None: keep the model's)."""
    dofs = np.array([model.jnt_dofadr[model.joint(name).id] for name in JOINT_NAMES])
    for field, value in (("dof_damping", damping), ("dof_armature", armature), ("dof_frictionloss", frictionloss)):
        if value is not None:
            getattr(model, field)[dofs] = value


FLOOR_BELOW_TILES = 0.01
"""With terrain tiles the floor lies this far below their (unraised) tops, m: deeper than a foot sinks into the
tiles (1–2 mm), so that it touches them alone."""


START_PAD = (0.24, 0.2)
"""Half extents (x, y) of the ground under a standing Go2's feet at the start, m: tiles reaching into it are the
start pad, never raised (a robot reset onto a raised tile would start with its feet inside it)."""


def add_terrain_tiles(spec: mujoco.MjSpec, tiles: int, size: float) -> None:
    """An n × n grid of `size` m box tiles on the floor, centred on the origin, tops at z = 0, named
    `terrain_<i>` (the randomiser raises them: `sim.randomization.terrain_roughness`) or, under the start,
    `start_pad_<i>`."""
    depth = 0.2  # a tile raised by the largest roughness still reaches down to the floor
    if tiles:  # under the tiles the feet touch the tiles alone, not a coincident floor too
        spec.geom("floor").pos = [0.0, 0.0, -FLOOR_BELOW_TILES]
        # the world body's bounding-volume tree is built at compile time around the unraised tiles: a foot above
        # it would be culled before its tile is tested; without the midphase every pair the broadphase (on the
        # geoms' current positions) passes is tested
        spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_MIDPHASE
    for i in range(tiles * tiles):
        row, column = divmod(i, tiles)
        centre = ((np.array([row, column]) - (tiles - 1) / 2) * size).tolist()
        under_start = all(abs(c) - size / 2 < pad for c, pad in zip(centre, START_PAD, strict=True))
        spec.worldbody.add_geom(
            name=f"start_pad_{i}" if under_start else f"{TERRAIN_PREFIX}{i}",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[size / 2, size / 2, depth / 2],
            pos=[*centre, -depth / 2],
            contype=0,
            conaffinity=1,
            rgba=[0.3, 0.35, 0.4, 1.0] if (row + column) % 2 else [0.25, 0.3, 0.35, 1.0],
        )


@dataclasses.dataclass
class QuadrupedConfig(TaskConfig):
    """Options of `quadruped-walk`."""

    control_dt: float = 0.02
    """Seconds between actions: 50 Hz over 5 ms (200 Hz) physics."""
    episode_seconds: float = 20.0
    """Episode length in seconds."""
    action_scale: float = 0.5
    """PD target offset from the standing pose at |action| = 1, rad."""
    command_x: tuple[float, float] = (-0.5, 1.0)
    """Range of commanded forward speed, m/s (body frame)."""
    command_y: tuple[float, float] = (-0.3, 0.3)
    """Range of commanded sideways speed, m/s."""
    command_yaw: tuple[float, float] = (-1.0, 1.0)
    """Range of commanded turn rate, rad/s."""
    zero_command_probability: float = 0.1
    """Probability that an episode commands standing still."""
    tracking_sigma: float = 0.25
    """Width of the exponential tracking rewards, (m/s)²."""
    air_time_target: float = 0.2
    """Swing duration (s) above which a foot's touchdown is rewarded."""
    min_height: float = 0.15
    """Terminate when the trunk drops below this height, m."""
    max_tilt: float = 1.0
    """Terminate when the trunk tilts more than this from upright, rad."""
    init_joint_noise: float = 0.1
    """Initial joints: the standing pose plus uniform noise of this size, rad."""
    reward_weights: dict[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """Weight of each reward term; terms missing here weigh 0. Known: see DEFAULT_WEIGHTS."""
    joint_damping: float | None = None
    """Viscous damping of every leg joint, N·m·s/rad (None: go2.xml's 0.1), e.g. what `policyforge sysid fit` found."""
    joint_armature: float | None = None
    """Rotor inertia at every leg joint, kg·m² (None: go2.xml's 0.01, calves 0.02)."""
    joint_frictionloss: float | None = None
    """Dry friction of every leg joint, N·m (None: go2.xml's 0)."""
    terrain_tiles: int = 0
    """Rough ground: an n × n grid of square tiles centred on the start, flush with the floor until
    `sim.randomization.terrain_roughness` raises each per env; 0: the flat floor alone."""
    terrain_tile_size: float = 0.5
    """Side of a terrain tile, m (a Go2's stride is about 0.3 m); the tiles under the start stay flat."""

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = set(self.reward_weights) - set(DEFAULT_WEIGHTS)
        check(
            not unknown,
            "reward_weights",
            f"unknown terms {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}",
        )
        why = "m/s or rad/s; the Go2 tops out near 3.5 m/s"
        for name in ("command_x", "command_y", "command_yaw"):
            check_bounds(getattr(self, name), name, "[-5, 5]", why)
        check_in(self.action_scale, "action_scale", "(0, π]", unit=" rad")
        check_in(self.zero_command_probability, "zero_command_probability", "[0, 1]")
        check_in(self.tracking_sigma, "tracking_sigma", "(0, inf)", "the tracking rewards divide by it")
        check_in(self.air_time_target, "air_time_target", "[0, 10]", "a 10 s swing is no longer a step", " s")
        for term, weight in self.reward_weights.items():
            check_in(weight, f"reward_weights.{term}", "[-1000, 1000]", "the default weights are 2e-4 to 5")
        check_in(self.min_height, "min_height", f"[0, {STAND_HEIGHT})", "the trunk starts at that height", " m")
        check_in(self.max_tilt, "max_tilt", "(0, π]", unit=" rad")
        check_in(self.init_joint_noise, "init_joint_noise", "[0, π]", unit=" rad")
        check_in(self.joint_damping, "joint_damping", "[0, 10]", unit=" N·m·s/rad")
        check_in(self.joint_armature, "joint_armature", "[0, 1]", unit=" kg·m²")
        check_in(self.joint_frictionloss, "joint_frictionloss", "[0, 10]", unit=" N·m")
        check_in(self.terrain_tiles, "terrain_tiles", "[0, 40]", "each tile is a geom the feet collide with")
        check_in(self.terrain_tile_size, "terrain_tile_size", "[0.05, 5]", unit=" m")


class QuadrupedWalk(Task):
    """Velocity-command tracking on flat ground with privileged critic observations."""

    name = "quadruped-walk"
    config_class = QuadrupedConfig
    xml_file = "go2.xml"
    root_body = "trunk"
    config: QuadrupedConfig

    @classmethod
    def load_model(cls, config: QuadrupedConfig) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(asset_path(cls.xml_file)))
        add_terrain_tiles(spec, config.terrain_tiles, config.terrain_tile_size)
        model = spec.compile()
        set_leg_joints(model, config.joint_damping, config.joint_armature, config.joint_frictionloss)
        return model

    def __init__(self, model, config: QuadrupedConfig):
        super().__init__(model, config)
        ranges = model.jnt_range[[model.joint(j).id for j in JOINT_NAMES]]
        self.joint_low, self.joint_high = ranges[:, 0], ranges[:, 1]
        self.pos_sensors = [f"{leg}_{p}_pos" for leg in LEGS for p in ("hip", "thigh", "calf")]
        self.vel_sensors = [f"{leg}_{p}_vel" for leg in LEGS for p in ("hip", "thigh", "calf")]
        self.torque_sensors = [f"{leg}_{p}_torque" for leg in LEGS for p in ("hip", "thigh", "calf")]
        self.touch_sensors = [f"{leg}_touch" for leg in LEGS]

    @property
    def action_dim(self) -> int:
        return 12

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        cfg = self.config
        joints = xp.asarray(STAND_QPOS) + sampler.uniform(-1.0, 1.0, (n, 12)) * cfg.init_joint_noise
        joints = xp.clip(joints, self.joint_low, self.joint_high)
        root = xp.broadcast_to(xp.asarray([0.0, 0.0, STAND_HEIGHT, 1.0, 0.0, 0.0, 0.0]), (n, 7))
        low = xp.asarray([cfg.command_x[0], cfg.command_y[0], cfg.command_yaw[0]])
        high = xp.asarray([cfg.command_x[1], cfg.command_y[1], cfg.command_yaw[1]])
        command = sampler.uniform(low, high, (n, 3))
        standing = sampler.uniform(0.0, 1.0, (n, 1)) < cfg.zero_command_probability
        command = xp.where(standing, 0.0, command)
        vars_ = {
            "command": command,
            "last_action": xp.zeros((n, 12)),
            "previous_action": xp.zeros((n, 12)),
            "air_time": xp.zeros((n, 4)),
            "landing_air_time": xp.zeros((n, 4)),
        }
        return ResetState(xp.concatenate([root, joints], axis=1), xp.zeros((n, 18)), joints, None, vars_)

    def motor_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """The Go2's motors (Unitree's go2_description limits): hip and thigh 23.7 N·m, 30.1 rad/s; calf
        45.43 N·m, 15.7 rad/s (a 1.5× gear on the same motor)."""
        return np.tile([23.7, 23.7, 45.43], 4), np.tile([30.1, 30.1, 15.7], 4)

    def control(self, action: Array, state: TaskState, xp: Xp) -> Array:
        return joint_targets(action, self.joint_low, self.joint_high, self.config.action_scale, xp)

    # -- state readout -----------------------------------------------------------------------------------

    def _gravity(self, sensordata: Array, xp: Xp) -> Array:
        """Gravity direction in the trunk frame, [N, 3] (upright: (0, 0, -1))."""
        return projected_gravity(self.sensor(sensordata, "orientation"), xp)

    def _contacts(self, sensordata: Array, xp: Xp) -> Array:
        return self.sensor.group(sensordata, self.touch_sensors, xp) > 0

    def update_vars(self, state: TaskState, action: Array, xp: Xp) -> dict[str, Array]:
        contact = self._contacts(state.phys["sensordata"], xp)
        air_time = state.vars["air_time"] + self.config.control_dt
        return {
            **state.vars,
            "last_action": action,
            "previous_action": state.vars["last_action"],
            "landing_air_time": xp.where(contact & (state.vars["air_time"] > 0), air_time, 0.0),
            "air_time": xp.where(contact, 0.0, air_time),
        }

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        sensordata = state.phys["sensordata"]
        policy = policy_observation(
            self.sensor(sensordata, "gyro"),
            self.sensor(sensordata, "orientation"),
            state.vars["command"],
            self.sensor.group(sensordata, self.pos_sensors, xp),
            self.sensor.group(sensordata, self.vel_sensors, xp),
            state.vars["last_action"],
            xp,
        )
        privileged = [
            self.sensor(sensordata, "local_linvel"),
            self.sensor(sensordata, "position")[:, 2:],
            self._contacts(sensordata, xp).astype(policy.dtype),
            state.vars["dr_friction"][:, None],
            self.sensor.group(sensordata, self.torque_sensors, xp) / 20.0,
        ]
        return {"policy": policy, "critic": xp.concatenate([policy, *privileged], axis=1)}

    def observation_names(self) -> list[str]:
        """`policy_observation`'s 45 features; joints in motor order (FR, FL, RR, RL × hip, thigh, calf)."""
        joints = [name.removesuffix("_joint") for name in JOINT_NAMES]
        return [
            *(f"gyro.{axis}*0.25" for axis in "xyz"),
            *(f"projected_gravity.{axis}" for axis in "xyz"),
            "command.vx",
            "command.vy",
            "command.yaw_rate",
            *(f"{joint}.pos-stand" for joint in joints),
            *(f"{joint}.vel*0.05" for joint in joints),
            *(f"last_action.{joint}" for joint in joints),
        ]

    def observation_terms(self) -> dict[str, slice]:
        """`policy_observation`'s groups: gyro, projected_gravity, command, joint_pos, joint_vel, last_action."""
        sizes = {"gyro": 3, "projected_gravity": 3, "command": 3, "joint_pos": 12, "joint_vel": 12, "last_action": 12}
        ends = np.cumsum(list(sizes.values()))
        return {name: slice(int(end - size), int(end)) for (name, size), end in zip(sizes.items(), ends, strict=True)}

    def action_meaning(self) -> str:
        return (
            f"PD position targets of the 12 joints in motor order (FR, FL, RR, RL × hip, thigh, calf): "
            f"clip(stand_pose + {self.config.action_scale:g} rad · a, joint range), stand_pose = "
            f"{STAND_QPOS.tolist()} rad (`joint_targets`)"
        )

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        cfg, sensordata = self.config, state.phys["sensordata"]
        command = state.vars["command"]
        velocity = self.sensor(sensordata, "local_linvel")
        gyro = self.sensor(sensordata, "gyro")
        joints = self.sensor.group(sensordata, self.pos_sensors, xp)
        landing = state.vars["landing_air_time"]
        moving = (xp.linalg.norm(command[:, :2], axis=1) > 0.1).astype(velocity.dtype)
        terms = {
            "tracking_lin_vel": xp.exp(-xp.sum((command[:, :2] - velocity[:, :2]) ** 2, axis=1) / cfg.tracking_sigma),
            "tracking_ang_vel": xp.exp(-((command[:, 2] - gyro[:, 2]) ** 2) / cfg.tracking_sigma),
            "lin_vel_z": velocity[:, 2] ** 2,
            "ang_vel_xy": xp.sum(gyro[:, :2] ** 2, axis=1),
            "orientation": xp.sum(self._gravity(sensordata, xp)[:, :2] ** 2, axis=1),
            "torques": xp.sum(self.sensor.group(sensordata, self.torque_sensors, xp) ** 2, axis=1),
            "action_rate": xp.sum((action - state.vars["previous_action"]) ** 2, axis=1),
            "feet_air_time": moving * xp.sum((landing - cfg.air_time_target) * (landing > 0), axis=1),
            "joint_pose": xp.sum((joints - xp.asarray(STAND_QPOS)) ** 2, axis=1),
            # unweighted diagnostics: how far the body's velocity is from the command
            "lin_vel_error": xp.linalg.norm(command[:, :2] - velocity[:, :2], axis=1),
            "ang_vel_error": xp.abs(command[:, 2] - gyro[:, 2]),
        }
        total = sum(weight * terms[name] for name, weight in cfg.reward_weights.items())  # diagnostics weigh 0
        return xp.maximum(total * cfg.control_dt, 0.0), terms

    def terminated(self, state: TaskState, xp: Xp) -> Array:
        sensordata = state.phys["sensordata"]
        height = self.sensor(sensordata, "position")[:, 2]
        upright = -self._gravity(sensordata, xp)[:, 2]
        return (height < self.config.min_height) | (upright < np.cos(self.config.max_tilt))
