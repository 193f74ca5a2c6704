"""`arm-instructed`: language-conditioned multi-task manipulation on the Panda-kinematics arm (`tasks/arm_base.py`).

Three cubes that differ only in colour (CUBE_COLOURS), three flat target pads (PAD_COLOURS) and three dark table
zones (left, right of the cubes as the robot sees them, and front: the far side of the table). At every reset each
env draws an instruction (`tasks/instructions.py`): a family, a cube, a target and a paraphrase, as int32 ids in
its variables. Families and their success tests:

    lift   the cube's bottom face at least `lift_height` above the table
    push   the cube's centre inside the zone, the cube on the table
    place  the cube's centre over the pad (within its half-width), on the table, not held by both fingers
    touch  the TCP within `touch_distance` of a point `TOUCH_HEIGHT` above the cube's centre (fingers around it)

Layout: the cubes stand on a 3×3 grid of cells like rooks (each in its own row and column, jittered), so a push
along a row or a column never meets another cube; the pads lie on free cells. The policy observation is
proprioception only, the instruction reaches a policy as text (`VecEnv.instructions()`) and the scene as images;
the critic observation holds the privileged state: object poses, touch, the instruction's one-hot ids and goal.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from policyforge.config import ConfigError, check_in
from policyforge.sims.task import Array, ResetState, Sampler, TaskState, Xp, asset_path
from policyforge.sims.tasks import instructions as language
from policyforge.sims.tasks.arm_base import ArmConfig, ArmTask
from policyforge.sims.tasks.arm_tasks import CUBE_HALF, closeness
from policyforge.sims.xmath import yaw_quat

CELL_X, CELL_Y = (0.40, 0.50, 0.60), (-0.12, 0.0, 0.12)
"""Grid rows (x, m) and columns (y, m) of the cells cubes and pads stand on."""
CELL_CENTRES = np.array([[x, y] for x in CELL_X for y in CELL_Y])
"""[9, 2] cell centres, row-major: cell = 3 · row + column."""
JITTER = 0.015
"""Random offset of every cube and pad from its cell centre along x and y, m (cubes stay ≥ 9 cm apart: an open
gripper around one does not reach another)."""
ZONE_CENTRES = np.array([[0.50, 0.29], [0.50, -0.29], [0.74, 0.0]])
"""[3, 2] centres of the left, right and front zones (order of `instructions.ZONES`), m."""
ZONE_HALF = np.array([[0.15, 0.06], [0.15, 0.06], [0.06, 0.18]])
"""[3, 2] half-sizes of the zones along x and y, m: strips beside and beyond the grid."""
ZONE_INSET = 0.03
"""A push goal lies this far inside its zone's edge, m."""
PAD_HALF = 0.035
"""Half the pads' edge, m."""
PAD_Z = 0.001
"""Height of the pads' centres, m: flat squares that do not collide."""
TOUCH_HEIGHT = 0.01
"""The touch target is this far above the cube's centre, m: the TCP there puts the open fingers around the cube."""
ON_TABLE = 0.01
"""A cube whose bottom face is less than this above the table rests on it, m."""
CUBE_RGBA = ((0.85, 0.15, 0.15, 1), (0.15, 0.7, 0.2, 1), (0.15, 0.3, 0.9, 1))
PAD_RGBA = ((0.95, 0.85, 0.1, 1), (0.55, 0.2, 0.75, 1), (0.97, 0.97, 0.97, 1))
ZONE_RGBA = (0.12, 0.12, 0.12, 1)
TASK_CAMERA = ((0.88, 0.0, 0.5), (0.5, 0.0, 0.0))
"""Position of the `task` camera and the point it looks at, m: it faces the robot over the far zone and frames the
grid of cubes and pads (cubes ~6 px wide at 64 × 64), the inner edges of the side zones and the gripper's home."""


@dataclasses.dataclass
class InstructedConfig(ArmConfig):
    """Options of `arm-instructed`."""

    episode_seconds: float = 8.0
    """Episode length in seconds: placing (grasp, carry, lower, release) takes the scripted expert up to ~5 s."""
    instructions: language.InstructionSet = "train"
    """Instruction set reset samples from: `train`, `heldout_paraphrase` (seen combinations, unseen wording),
    `heldout_combination` (unseen family/cube/target combinations, seen wording) or `all`."""
    families: list[language.Family] = dataclasses.field(default_factory=lambda: list(language.FAMILIES))
    """Task families sampled, each with the same probability: any of `lift`, `push`, `place`, `touch`."""
    lift_height: float = 0.1
    """`lift` success: the cube's bottom face at least this far above the table, m."""
    touch_distance: float = 0.03
    """`touch` success: the TCP within this distance of the touch point above the cube's centre, m."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.families or len(set(self.families)) != len(self.families):
            raise ConfigError(
                "families", f"must list distinct families of {list(language.FAMILIES)}, got {self.families}"
            )
        check_in(self.lift_height, "lift_height", "(0, 0.3]", unit=" m")
        check_in(self.touch_distance, "touch_distance", "(0, 0.1]", unit=" m")


class ArmInstructed(ArmTask):
    """Follow a language instruction: lift, push, place or touch one of three coloured cubes."""

    name = "arm-instructed"
    config_class = InstructedConfig
    config: InstructedConfig
    has_cube = False  # three cubes of its own instead of the scene's one

    @classmethod
    def load_model(cls, config: InstructedConfig) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_file(str(asset_path(cls.xml_file)))
        for name in ("cube_pos", "cube_quat"):
            spec.delete(spec.sensor(name))
        spec.delete(spec.body("cube"))
        spec.delete(spec.body("goal"))
        world, box = spec.worldbody, mujoco.mjtGeom.mjGEOM_BOX
        for (x, y), half, zone in zip(ZONE_CENTRES, ZONE_HALF, language.ZONES, strict=True):
            world.add_geom(
                name=f"zone_{zone}", type=box, pos=[x, y, 0.0005], size=[*half, 0.0005], rgba=ZONE_RGBA,
                contype=0, conaffinity=0,
            )  # fmt: skip
        cube_qpos = []
        for colour, rgba, (x, y) in zip(language.CUBE_COLOURS, CUBE_RGBA, CELL_CENTRES[[0, 4, 8]], strict=True):
            body = world.add_body(name=f"cube_{colour}", pos=[x, y, CUBE_HALF])
            body.add_freejoint(name=f"cube_{colour}")
            # cubes collide with the floor, the fingers and each other (contype 2 & conaffinity 3)
            body.add_geom(
                name=f"cube_{colour}", type=box, size=[CUBE_HALF] * 3, mass=0.1, rgba=rgba, contype=2, conaffinity=3,
                friction=[0.5, 0.005, 0.0001],
            )  # fmt: skip
            for kind, sensor in (
                ("pos", mujoco.mjtSensor.mjSENS_FRAMEPOS),
                ("quat", mujoco.mjtSensor.mjSENS_FRAMEQUAT),
            ):
                spec.add_sensor(
                    name=f"cube_{colour}_{kind}",
                    type=sensor,
                    objtype=mujoco.mjtObj.mjOBJ_BODY,
                    objname=f"cube_{colour}",
                )
            cube_qpos += [x, y, CUBE_HALF, 1.0, 0.0, 0.0, 0.0]
        pad_pos = []
        for colour, rgba, (x, y) in zip(language.PAD_COLOURS, PAD_RGBA, CELL_CENTRES[[1, 5, 6]], strict=True):
            pad = world.add_body(name=f"pad_{colour}", mocap=True, pos=[x, y, PAD_Z])
            pad.add_geom(
                name=f"pad_{colour}", type=box, size=[PAD_HALF, PAD_HALF, PAD_Z], rgba=rgba, contype=0, conaffinity=0
            )
            pad_pos += [x, y, PAD_Z]
        camera = spec.camera("task")
        camera.pos, camera.alt.xyaxes = _look_at(*TASK_CAMERA)  # the XML orients it by xyaxes, which wins over quat
        key = spec.key("home")
        key.qpos, key.mpos, key.mquat = list(key.qpos)[:9] + cube_qpos, pad_pos, [1.0, 0.0, 0.0, 0.0] * 3
        return spec.compile()

    def __init__(self, model: mujoco.MjModel, config: InstructedConfig):
        super().__init__(model, config)
        self.instruction_rows = language.instruction_table(config.instructions, config.families)
        """[M, 4] (family, object, target, paraphrase) rows reset samples from."""
        if len(self.instruction_rows) == 0:
            raise ConfigError(
                "instructions",
                f"the set {config.instructions!r} has no instruction of families {config.families}; "
                "choose another set or add families",
            )
        self.instruction_cdf = language.family_balanced_cdf(self.instruction_rows)
        self.cubes_qpos = model.joint(f"cube_{language.CUBE_COLOURS[0]}").qposadr[0]
        self.cube_sensors = [f"cube_{c}_pos" for c in language.CUBE_COLOURS]
        self.cube_quat_sensors = [f"cube_{c}_quat" for c in language.CUBE_COLOURS]

    # -- reset -------------------------------------------------------------------------------------------

    def reset(self, sampler: Sampler, n: int, xp: Xp) -> ResetState:
        qpos, ctrl = self.reset_arm(sampler, n, xp)
        rows = xp.argsort(sampler.uniform(0.0, 1.0, (n, 3)), axis=1)  # a random permutation: cube k's row
        cols = xp.argsort(sampler.uniform(0.0, 1.0, (n, 3)), axis=1)  # and column, so no two share either
        cells = rows * 3 + cols
        centres = xp.asarray(CELL_CENTRES)
        cube_xy = centres[cells] + sampler.uniform(-JITTER, JITTER, (n, 3, 2))
        yaw = sampler.uniform(-np.pi / 4, np.pi / 4, (n, 3))
        occupied = xp.any(cells[:, :, None] == xp.arange(9), axis=1)  # [n, 9]
        pad_cells = xp.argsort(sampler.uniform(0.0, 1.0, (n, 9)) + 2.0 * occupied, axis=1)[:, :3]  # free cells
        pads_xy = centres[pad_cells] + sampler.uniform(-JITTER, JITTER, (n, 3, 2))
        pads = xp.concatenate([pads_xy, xp.full((n, 3, 1), PAD_Z)], axis=2)
        height = xp.full((n, 1), CUBE_HALF)
        cubes = [xp.concatenate([cube_xy[:, k], height, yaw_quat(yaw[:, k], xp)], axis=1) for k in range(3)]
        qpos = xp.concatenate([qpos[:, : self.cubes_qpos], *cubes, qpos[:, self.cubes_qpos + 21 :]], axis=1)
        ids = language.sample_instructions(sampler, n, self.instruction_rows, self.instruction_cdf, xp)
        cube = _select(_one_hot(ids["object"], 3, xp), xp.stack([c[:, :3] for c in cubes], axis=1))
        goal = self.goal(ids, cube, pads, xp)
        vars_ = {**self.reset_vars(n, goal, xp), **ids, "pads": pads}
        return ResetState(qpos, xp.zeros((n, self.model.nv)), ctrl, pads, vars_)

    def goal(self, ids: dict[str, Array], cube: Array, pads: Array, xp: Xp) -> Array:
        """Where the instruction takes the cube (the TCP, for touch), from the cube's start [N, 3]: [N, 3]."""
        lift = cube + xp.asarray([0.0, 0.0, self.config.lift_height])
        zone_centre, zone_half = self._zone(ids, xp)
        inside = xp.clip(cube[:, :2], zone_centre - zone_half + ZONE_INSET, zone_centre + zone_half - ZONE_INSET)
        push = xp.concatenate([inside, cube[:, 2:]], axis=1)
        place = xp.concatenate([_select(_one_hot(ids["target"], 3, xp), pads)[:, :2], cube[:, 2:]], axis=1)
        touch = cube + xp.asarray([0.0, 0.0, TOUCH_HEIGHT])
        return _select(_one_hot(ids["family"], 4, xp), xp.stack([lift, push, place, touch], axis=1))

    # -- state -------------------------------------------------------------------------------------------

    def cubes(self, state: TaskState, xp: Xp) -> Array:
        """Positions of the three cubes, [N, 3, 3] (CUBE_COLOURS order)."""
        return xp.stack([self.sensor(state.phys["sensordata"], name) for name in self.cube_sensors], axis=1)

    def cube_pos(self, state: TaskState, xp: Xp = np) -> Array:
        """Position of the instructed cube, [N, 3]."""
        return _select(_one_hot(state.vars["object"], 3, xp), self.cubes(state, xp))

    def cube_quat(self, state: TaskState, xp: Xp = np) -> Array:
        """Orientation of the instructed cube, [N, 4] (w, x, y, z)."""
        quats = xp.stack([self.sensor(state.phys["sensordata"], n) for n in self.cube_quat_sensors], axis=1)
        return _select(_one_hot(state.vars["object"], 3, xp), quats)

    def _zone(self, ids: dict[str, Array], xp: Xp) -> tuple[Array, Array]:
        """Centre and half-size [N, 2] of the zone each env's target id names (meaningful for push)."""
        target = _one_hot(ids["target"], 3, xp)
        return _select_shared(target, xp.asarray(ZONE_CENTRES)), _select_shared(target, xp.asarray(ZONE_HALF))

    def _progress(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        """Per-family distances [N] to success, the cube's height [N] and whether it is grasped (bool [N])."""
        cube, tcp = self.cube_pos(state, xp), self.tcp_pos(state)
        zone_centre, zone_half = self._zone(state.vars, xp)
        outside = xp.maximum(xp.abs(cube[:, :2] - zone_centre) - zone_half, 0.0)
        left, right = self.touching(state)
        return {
            "height": cube[:, 2] - CUBE_HALF,
            "zone_distance": xp.linalg.norm(outside, axis=1),
            "pad_offset": xp.max(xp.abs(cube[:, :2] - state.vars["goal"][:, :2]), axis=1),
            "pad_distance": xp.linalg.norm(cube - state.vars["goal"], axis=1),
            "touch_distance": xp.linalg.norm(cube + xp.asarray([0.0, 0.0, TOUCH_HEIGHT]) - tcp, axis=1),
            "grasped": left & right & (xp.linalg.norm(cube - tcp, axis=1) < 0.03),
        }

    def success(self, state: TaskState, xp: Xp) -> Array:
        progress = self._progress(state, xp)
        on_table = progress["height"] < ON_TABLE
        by_family = xp.stack(
            [
                progress["height"] >= self.config.lift_height,
                (progress["zone_distance"] == 0.0) & on_table,
                (progress["pad_offset"] < PAD_HALF) & on_table & ~progress["grasped"],
                progress["touch_distance"] < self.config.touch_distance,
            ],
            axis=1,
        )
        return xp.any(by_family & (state.vars["family"][:, None] == xp.arange(4)), axis=1)

    # -- observations and reward -------------------------------------------------------------------------

    def observe(self, state: TaskState, xp: Xp) -> dict[str, Array]:
        """`policy` [N, 22]: proprioception only (the instruction and the scene reach a policy as text and images).
        `critic` [N, 76]: proprioception 22, cube positions 9 and quaternions 12 (CUBE_COLOURS order), pad
        positions 9 (PAD_COLOURS order), finger touch 2, one-hot family 4, object 3 and target 3, then the
        instructed cube's position 3, the goal 3, goal − cube 3 and cube − TCP 3."""
        proprioception = self.proprioception(state, xp)
        sensordata, n = state.phys["sensordata"], proprioception.shape[0]
        cube, goal, tcp = self.cube_pos(state, xp), state.vars["goal"], self.tcp_pos(state)
        touch = xp.stack(self.touching(state), axis=1).astype(proprioception.dtype)
        ids = [_one_hot(state.vars[name], k, xp) for name, k in (("family", 4), ("object", 3), ("target", 3))]
        critic = [
            proprioception,
            self.sensor.group(sensordata, self.cube_sensors + self.cube_quat_sensors, xp),
            state.vars["pads"].reshape(n, 9),
            touch,
            *ids,
            cube,
            goal,
            goal - cube,
            cube - tcp,
        ]
        return {"policy": proprioception, "critic": xp.concatenate(critic, axis=1)}

    def observation_names(self) -> list[str]:
        return self.proprioception_names()

    def reward(self, state: TaskState, action: Array, xp: Xp) -> tuple[Array, dict[str, Array]]:
        """Dense: the instructed family's shaped progress in [0, 1] (1 on success); sparse: the success flag.
        Terms: `reach` (TCP to the instructed cube), `grasp` (both fingers on it), `distance` (the family's distance
        to success, m: height still to lift, cube to zone, cube to pad, TCP to the touch point)."""
        progress = self._progress(state, xp)
        cube, tcp = self.cube_pos(state, xp), self.tcp_pos(state)
        grasped = progress["grasped"].astype(action.dtype)
        reach = closeness(xp.linalg.norm(cube - tcp, axis=1), xp)
        lift = grasped * xp.clip(progress["height"] / self.config.lift_height, 0.0, 1.0)
        # push: the TCP behind the cube as seen from the zone, then the cube into the zone
        direction = state.vars["goal"][:, :2] - cube[:, :2]
        direction = direction / xp.maximum(xp.linalg.norm(direction, axis=1, keepdims=True), 1e-6)
        behind = xp.concatenate([cube[:, :2] - direction * (CUBE_HALF + 0.02), cube[:, 2:]], axis=1)
        push_reach = closeness(xp.linalg.norm(behind - tcp, axis=1), xp)
        family = _one_hot(state.vars["family"], 4, xp)
        dense_by_family = [
            (reach + grasped + 2.0 * lift) / 4.0,
            (push_reach + 2.0 * closeness(progress["zone_distance"], xp)) / 3.0,
            (reach + grasped + 2.0 * closeness(progress["pad_distance"], xp)) / 4.0,
            closeness(progress["touch_distance"], xp),
        ]
        distances = [
            xp.maximum(self.config.lift_height - progress["height"], 0.0),
            progress["zone_distance"],
            progress["pad_distance"],
            progress["touch_distance"],
        ]
        terms = {
            "reach": reach,
            "grasp": grasped,
            "distance": _select(family, xp.stack(distances, axis=1)),
        }
        dense = _select(family, xp.stack(dense_by_family, axis=1))
        return self.finish_reward(dense, self.success(state, xp), state, action, terms, xp)

    def instructions(self, vars_: dict[str, Array]) -> list[str]:
        return language.render_batch(vars_)


def _one_hot(ids: Array, k: int, xp: Xp) -> Array:
    """float [N, k] one-hot rows of integer ids [N]."""
    return (ids[:, None] == xp.arange(k)).astype(xp.float32)


def _select(one_hot: Array, values: Array) -> Array:
    """Entry k of each env's `values` ([N, k] or [N, k, D]) where `one_hot` [N, k] is 1: exact (a sum of zeros)."""
    weights = one_hot if values.ndim == 2 else one_hot[:, :, None]
    return (weights * values).sum(axis=1)


def _select_shared(one_hot: Array, table: Array) -> Array:
    """Row k of a table [k, D] shared by every env, where `one_hot` [N, k] is 1: [N, D]."""
    return (one_hot[:, :, None] * table[None]).sum(axis=1)


def _look_at(position: tuple[float, ...], target: tuple[float, ...]) -> tuple[list[float], list[float]]:
    """A camera's position and its xyaxes (image right and up, world frame) looking from `position` at `target`,
    its image's up towards +z."""
    forward = np.subtract(target, position) / np.linalg.norm(np.subtract(target, position))
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return list(position), [*right, *up]
