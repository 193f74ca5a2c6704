"""Typed configuration of a simulation: task, backend, batch size, randomisation, image observations."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from policyforge.config import check


@dataclasses.dataclass
class RandomizationConfig:
    """Per-environment physical parameters, sampled uniformly from these ranges (None: not randomised)."""

    friction: tuple[float, float] | None = None
    """Scale of every geom's sliding friction, [low, high]."""
    mass_scale: tuple[float, float] | None = None
    """Scale of every body's mass and rotational inertia, [low, high]."""
    com_offset: float | None = None
    """Largest shift (m) of the task's root body's centre of mass along each axis."""
    kp_scale: tuple[float, float] | None = None
    """Scale of the PD position actuators' stiffness kp, [low, high]."""
    kd_scale: tuple[float, float] | None = None
    """Scale of the PD position actuators' damping kd, [low, high]."""
    resample_on_reset: bool = True
    """Draw new parameters for an environment whenever it resets (else once, at `reset(seed)`)."""

    def __post_init__(self) -> None:
        for name in ("friction", "mass_scale", "kp_scale", "kd_scale"):
            value = getattr(self, name)
            if value is not None:
                low, high = value
                check(0 < low <= high, name, f"must be [low, high] with 0 < low ≤ high, got {list(value)}")
        if self.com_offset is not None:
            check(self.com_offset >= 0, "com_offset", f"must be ≥ 0 m, got {self.com_offset}")

    @property
    def enabled(self) -> bool:
        return any(getattr(self, f.name) is not None for f in dataclasses.fields(self) if f.name != "resample_on_reset")


@dataclasses.dataclass
class ImageConfig:
    """Camera images added to observations as `obs["image"]`, [N, V, H, W, 3] uint8."""

    cameras: list[str] = dataclasses.field(default_factory=list)
    """Cameras rendered each step, in order (V = len(cameras)); empty: no image observations."""
    width: int = 64
    """Image width, pixels."""
    height: int = 64
    """Image height, pixels."""

    def __post_init__(self) -> None:
        check(
            self.width > 0 and self.height > 0,
            "width",
            f"image size must be positive, got {self.width}x{self.height}",
        )


@dataclasses.dataclass
class SimConfig:
    """Which task to simulate, where, and how many copies."""

    task: str = "pendulum-swingup"
    """A policyforge task (`policyforge envs` lists them) or `gym:<id>` for any installed gymnasium env."""
    backend: Literal["mujoco", "mjx"] = "mujoco"
    """Simulator for policyforge tasks: `mujoco` (native C MuJoCo, threaded) or `mjx` (JAX: jit + vmap on
    the default JAX device, GPU if one is installed). `gym:` tasks ignore it."""
    num_envs: int = 64
    """N, environments stepped together."""
    num_threads: int = 0
    """Simulation threads of the `mujoco` backend (0: one per CPU core)."""
    device: str = "cpu"
    """Torch device of observations and rewards."""
    task_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Options of the task's own config class (e.g. control_mode, reward_type); checked when the env is made."""
    randomization: RandomizationConfig = dataclasses.field(default_factory=RandomizationConfig)
    """Domain randomisation of physical parameters."""
    image: ImageConfig = dataclasses.field(default_factory=ImageConfig)
    """Image observations."""

    def __post_init__(self) -> None:
        check(self.num_envs >= 1, "num_envs", f"must be ≥ 1, got {self.num_envs}")
        check(self.num_threads >= 0, "num_threads", f"must be ≥ 0 (0: all cores), got {self.num_threads}")
