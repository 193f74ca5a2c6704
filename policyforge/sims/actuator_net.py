"""An actuator network (`sim.actuator.model: network`): the torque a robot's motor gives, learned from what its
drive logged — commands, joint states and measured torques — instead of an ideal PD law (Hwangbo et al. 2019's
actuator net for ANYmal).

Per joint and physics step the network sees the PD law's terms at the last few physics steps,
`kp (q* − q) / τ_max`, `−kd q̇ / τ_max` and `q̇ / VELOCITY_SCALE` at each of `lags` (physics steps back), and
gives `τ / τ_max`. One network serves every joint (τ_max per joint). What a motor does that the PD law does not —
latency, a weak or strong drive, saturation — is in the data it was fitted to (`policyforge sysid actuator-net`).

The forward pass is written once with the array namespace `xp`, so that the native backend runs it with numpy
and MJX with jax.numpy. A network is stored as an .npz of arrays (read with allow_pickle=False).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from policyforge.config import ConfigError
from policyforge.io import atomic_path
from policyforge.sims.task import Array, Xp

VELOCITY_SCALE = 10.0
"""Joint speeds are fed divided by this, rad/s."""
FEATURES = 3
"""Features per joint and lag: the PD law's stiffness term, its damping term, the joint's speed."""


@dataclasses.dataclass
class ActuatorNet:
    """A fitted actuator network: an MLP with tanh hidden layers from [lags × FEATURES] to one torque."""

    weights: list[np.ndarray]
    """Layer matrices, [in, out] each (in = len(lags) × FEATURES for the first, out = 1 for the last)."""
    biases: list[np.ndarray]
    """Layer offsets, [out] each."""
    lags: np.ndarray
    """[L] physics steps back each feature block is taken at, ascending from 0."""
    step_seconds: float
    """The physics step the lags count, s: a simulator must step at exactly this rate to use the network."""
    torque_scale: np.ndarray
    """[J] τ_max of each joint the network was fitted on, N·m (features and output are in its units)."""

    @property
    def history(self) -> int:
        """Physics steps of features a simulator keeps per joint: the largest lag + 1."""
        return int(self.lags[-1]) + 1

    def features(self, target: Array, qpos: Array, qvel: Array, kp: Array, kd: Array, xp: Xp) -> Array:
        """`pd_features` in this network's torque units."""
        return pd_features(target, qpos, qvel, kp, kd, self.torque_scale, xp)

    def torque(self, history: Array, xp: Xp) -> Array:
        """Torques [N, J], N·m, from per-step features [N, J, H, FEATURES], newest first (H = `history`)."""
        x = history[:, :, np.asarray(self.lags)].reshape(*history.shape[:2], -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = x @ xp.asarray(weight, dtype=x.dtype) + xp.asarray(bias, dtype=x.dtype)
            if i < last:
                x = xp.tanh(x)
        return x[..., 0] * xp.asarray(self.torque_scale, dtype=x.dtype)

    def save(self, path: Path) -> None:
        arrays = {f"weight_{i}": w for i, w in enumerate(self.weights)}
        arrays |= {f"bias_{i}": b for i, b in enumerate(self.biases)}
        arrays |= {"lags": self.lags, "step_seconds": np.float64(self.step_seconds), "torque_scale": self.torque_scale}
        with atomic_path(Path(path)) as tmp, open(tmp, "wb") as file:
            np.savez(file, **arrays)

    @classmethod
    def load(cls, path: str | Path, field: str = "sim.actuator.network") -> ActuatorNet:
        """Read a network written by `save`; a missing or foreign file is refused naming `field`."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(field, f"{path} does not exist; fit one with `policyforge sysid actuator-net`")
        with np.load(path, allow_pickle=False) as data:  # never unpickle what a user hands over
            missing = sorted({"lags", "step_seconds", "torque_scale", "weight_0", "bias_0"} - set(data.files))
            if missing:
                raise ConfigError(field, f"{path} is not an actuator network: it lacks {missing}")
            layers = sum(name.startswith("weight_") for name in data.files)
            return cls(
                weights=[data[f"weight_{i}"] for i in range(layers)],
                biases=[data[f"bias_{i}"] for i in range(layers)],
                lags=data["lags"].astype(np.int64),
                step_seconds=float(data["step_seconds"]),
                torque_scale=data["torque_scale"].astype(np.float64),
            )


def pd_features(
    target: Array, qpos: Array, qvel: Array, kp: Array, kd: Array, torque_scale: np.ndarray, xp: Xp
) -> Array:
    """The features [..., J, FEATURES] of one instant from position targets, joint positions and speeds, stiffness
    and damping, each [..., J], for joints of τ_max `torque_scale` [J]."""
    scale = xp.asarray(torque_scale)
    return xp.stack([kp * (target - qpos) / scale, -kd * qvel / scale, qvel / VELOCITY_SCALE], axis=-1)
