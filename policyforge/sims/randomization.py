"""Domain randomisation: per-environment physical parameters as a function from samples to model fields.

`Randomizer.sample` draws parameters per env (kept in the task variables as `dr_*`, so privileged critics
can see them); `Randomizer.model_fields` turns them into per-env values of MjModel fields, [n, ...], with
the array namespace `xp`, so that the native backend writes them into its batch and MJX into its model.
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np

from policyforge.config import ConfigError
from policyforge.sims.config import RandomizationConfig
from policyforge.sims.task import Array, Sampler, Xp

PARAMS = ("dr_friction", "dr_mass", "dr_kp", "dr_kd", "dr_com", "dr_strength", "dr_delay")
"""Task variables written by the randomiser; 1 (scales) or 0 (offsets, delays) when not randomised. A task with
terrain tiles has `dr_terrain` too (`Randomizer.params`)."""
TERRAIN_PREFIX = "terrain_"
"""Geoms whose names start with this are terrain tiles (`terrain_roughness` raises them)."""

DERIVED_FIELDS = ("body_invweight0", "dof_invweight0", "body_subtreemass")
"""Model constants mj_setConst derives from masses that constraint softness and sensors depend on."""
MASS_TABLE_POINTS = 33
"""Mass scales at which `derived_constants` tabulates mj_setConst (linear interpolation in between)."""


class Randomizer:
    """Samples per-env parameters from a `RandomizationConfig` and maps them onto model fields."""

    def __init__(self, config: RandomizationConfig, model: mujoco.MjModel, root_body: str | None, task: str):
        self.config = config
        self.pd_actuators = position_servos(model)
        if (config.kp_scale or config.kd_scale) and not self.pd_actuators.any():
            raise ConfigError(
                "sim.randomization.kp_scale",
                f"task {task} has no PD position actuators to randomise; remove kp_scale and kd_scale",
            )
        if config.com_offset is not None and root_body is None:
            raise ConfigError("sim.randomization.com_offset", f"task {task} names no root body; remove com_offset")
        self.root_body = model.body(root_body).id if root_body else 0
        self.push_dofs = self._push_dofs(model, task) if config.push_interval_s is not None else None
        self.terrain = np.array([i for i in range(model.ngeom) if model.geom(i).name.startswith(TERRAIN_PREFIX)])
        """Ids [T] of the terrain tiles."""
        if config.terrain_roughness is not None and len(self.terrain) == 0:
            raise ConfigError(
                "sim.randomization.terrain_roughness",
                f"task {task} has no terrain tiles to raise; give sim.task_options.terrain_tiles (quadruped-walk)",
            )
        self._model = model
        self._table: tuple[np.ndarray, dict[str, np.ndarray]] | None = None
        self.base = {
            "geom_friction": model.geom_friction.copy(),
            "body_mass": model.body_mass.copy(),
            "body_inertia": model.body_inertia.copy(),
            "body_ipos": model.body_ipos.copy(),
            "actuator_gainprm": model.actuator_gainprm.copy(),
            "actuator_biasprm": model.actuator_biasprm.copy(),
            "actuator_forcerange": model.actuator_forcerange.copy(),
            "geom_pos": model.geom_pos.copy(),
        }

    @property
    def params(self) -> tuple[str, ...]:
        """The task variables `sample` writes: PARAMS, and `dr_terrain` where the model has terrain tiles."""
        return (*PARAMS, "dr_terrain") if len(self.terrain) else PARAMS

    @property
    def changes_mass(self) -> bool:
        """Whether derived constants (mj_setConst) must be recomputed after applying the fields."""
        return self.config.mass_scale is not None or self.config.com_offset is not None

    def sample(self, sampler: Sampler, n: int, xp: Xp) -> dict[str, Array]:
        """Parameters of n envs: `dr_friction`, `dr_mass`, `dr_kp`, `dr_kd`, `dr_strength`, `dr_delay` (whole physics
        steps) [n], `dr_com` [n, 3] and, with terrain tiles, `dr_terrain` (tile heights, m) [n, T]."""
        cfg = self.config

        def scale(bounds: tuple[float, float] | None) -> Array:
            return sampler.uniform(*bounds, (n,)) if bounds is not None else xp.ones(n)

        delay = xp.zeros(n)
        if cfg.command_delay_steps is not None:  # each whole step as likely: floor of uniform [low, high + 1)
            low, high = cfg.command_delay_steps
            delay = xp.minimum(xp.floor(sampler.uniform(low, high + 1.0, (n,))), float(high))
        com = xp.zeros((n, 3))
        if cfg.com_offset is not None:
            com = sampler.uniform(-cfg.com_offset, cfg.com_offset, (n, 3))
        terrain = {}
        if cfg.terrain_roughness is not None:
            terrain["dr_terrain"] = sampler.uniform(0.0, cfg.terrain_roughness, (n, len(self.terrain)))
        elif len(self.terrain):
            terrain["dr_terrain"] = xp.zeros((n, len(self.terrain)))
        return terrain | {
            "dr_friction": scale(cfg.friction),
            "dr_mass": scale(cfg.mass_scale),
            "dr_kp": scale(cfg.kp_scale),
            "dr_kd": scale(cfg.kd_scale),
            "dr_com": com,
            "dr_strength": scale(cfg.motor_strength),
            "dr_delay": delay,
        }

    def model_fields(self, params: dict[str, Array], xp: Xp) -> dict[str, Array]:
        """Per-env values [n, ...] of the model fields the configured parameters change."""
        cfg, base, fields = self.config, self.base, {}
        if cfg.friction is not None:
            sliding = xp.asarray([1.0, 0.0, 0.0])
            factor = 1.0 + (params["dr_friction"][:, None, None] - 1.0) * sliding
            fields["geom_friction"] = xp.asarray(base["geom_friction"]) * factor
        if cfg.mass_scale is not None:
            mass = params["dr_mass"]
            fields["body_mass"] = xp.asarray(base["body_mass"]) * mass[:, None]
            fields["body_inertia"] = xp.asarray(base["body_inertia"]) * mass[:, None, None]
        if cfg.com_offset is not None:
            root = xp.asarray(np.arange(len(base["body_ipos"])) == self.root_body, dtype=float)[:, None]
            fields["body_ipos"] = xp.asarray(base["body_ipos"]) + params["dr_com"][:, None, :] * root
        if cfg.kp_scale is not None or cfg.kd_scale is not None:
            pd = xp.asarray(self.pd_actuators, dtype=float)[:, None]
            kp, kd = params["dr_kp"][:, None, None], params["dr_kd"][:, None, None]
            gain_mask = pd * xp.asarray(np.eye(10)[0])
            kp_mask, kd_mask = pd * xp.asarray(np.eye(10)[1]), pd * xp.asarray(np.eye(10)[2])
            fields["actuator_gainprm"] = xp.asarray(base["actuator_gainprm"]) * (1.0 + (kp - 1.0) * gain_mask)
            factor = (1.0 + (kp - 1.0) * kp_mask) * (1.0 + (kd - 1.0) * kd_mask)
            fields["actuator_biasprm"] = xp.asarray(base["actuator_biasprm"]) * factor
        if cfg.terrain_roughness is not None:
            tiles = np.zeros((len(self.terrain), len(base["geom_pos"])))
            tiles[np.arange(len(self.terrain)), self.terrain] = 1.0
            raise_by = params["dr_terrain"] @ xp.asarray(tiles)  # [n, ngeom]
            fields["geom_pos"] = xp.asarray(base["geom_pos"]) + raise_by[:, :, None] * xp.asarray([0.0, 0.0, 1.0])
        if cfg.motor_strength is not None:
            fields["actuator_forcerange"] = (
                xp.asarray(base["actuator_forcerange"]) * params["dr_strength"][:, None, None]
            )
        return fields

    def push(self, lengths: Array, control_dt: float, sampler: Sampler, xp: Xp) -> Array:
        """The interval event (configured: `push_dofs` is set): the change [N, 2] of the root's horizontal
        velocity this step — uniform in ±`push_velocity` in the envs whose episode reaches a multiple of
        `push_interval_s` with this step, 0 in the others. `lengths` [N]: the steps each episode took before."""
        every = max(round(self.config.push_interval_s / control_dt), 1)
        due = (lengths + 1) % every == 0
        velocity = self.config.push_velocity
        return sampler.uniform(-velocity, velocity, (len(lengths), 2)) * due[:, None]

    @staticmethod
    def _push_dofs(model: mujoco.MjModel, task: str) -> slice:
        """The root's horizontal velocity dofs (x, y of its free joint, world frame)."""
        free = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        if len(free) == 0:
            raise ConfigError("sim.randomization.push_interval_s", f"task {task} has no free-floating body to push")
        start = int(model.jnt_dofadr[free[0]])
        return slice(start, start + 2)

    def derived_constants(self, params: dict[str, Array], xp: Xp) -> dict[str, Array]:
        """Per-env values [n, ...] of the constants mj_setConst would recompute after `mass_scale`, for
        backends that cannot call it (MJX): tabulated with mj_setConst over the configured range and
        interpolated linearly (armature keeps them from scaling exactly as 1/mass)."""
        if self.config.mass_scale is None:
            return {}
        low, high = self.config.mass_scale
        scales, table = self._mass_table()
        position = (params["dr_mass"] - low) / max(high - low, 1e-12) * (len(scales) - 1)
        lower = xp.clip(xp.floor(position), 0, max(len(scales) - 2, 0)).astype(int)
        upper = xp.minimum(lower + 1, len(scales) - 1)
        weight = xp.clip(position - lower, 0.0, 1.0)
        fields = {}
        for name, values in table.items():
            values = xp.asarray(values)
            w = weight.reshape(weight.shape + (1,) * (values.ndim - 1))
            fields[name] = values[lower] * (1.0 - w) + values[upper] * w
        return fields

    def _mass_table(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self._table is None:
            low, high = self.config.mass_scale
            scales = np.linspace(low, high, MASS_TABLE_POINTS if high > low else 1)
            model = copy.copy(self._model)
            data = mujoco.MjData(model)
            rows: dict[str, list[np.ndarray]] = {name: [] for name in DERIVED_FIELDS}
            for scale in scales:
                model.body_mass[:] = self.base["body_mass"] * scale
                model.body_inertia[:] = self.base["body_inertia"] * scale
                mujoco.mj_setConst(model, data)
                for name in DERIVED_FIELDS:
                    rows[name].append(getattr(model, name).copy())
            self._table = scales, {name: np.stack(values) for name, values in rows.items()}
        return self._table


def position_servos(model: mujoco.MjModel) -> np.ndarray:
    """bool [nu]: actuators that are PD position servos (fixed gain kp, affine bias −kp·q − kd·q̇)."""
    fixed = model.actuator_gaintype == mujoco.mjtGain.mjGAIN_FIXED
    affine = model.actuator_biastype == mujoco.mjtBias.mjBIAS_AFFINE
    servo = np.isclose(model.actuator_biasprm[:, 1], -model.actuator_gainprm[:, 0])
    return fixed & affine & servo & (model.actuator_gainprm[:, 0] > 0)
