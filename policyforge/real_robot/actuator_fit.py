"""Fitting an actuator network (`sims/actuator_net.py`) to a recording of a robot's drive: the commands sent, the
joint states and the torques the drive measured (`sysid.Recording` with `joint_torque`).

Each recorded state is one sample per joint: the PD law's features at the network's lags (joint states
interpolated to those instants, the command then in force) and the torque measured at the state. The last
`holdout` of the recording's time is kept out of training and scores the network against the ideal PD law.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from policyforge.config import ConfigError
from policyforge.real_robot.sysid import Recording
from policyforge.sims.actuator_net import FEATURES, ActuatorNet, pd_features


@dataclasses.dataclass
class ActuatorFitConfig:
    """How an actuator network is fitted."""

    step_seconds: float = 0.005
    """The physics step of the simulator that will run it (its lags count these), s."""
    lags: tuple[int, ...] = (0, 1, 2, 3)
    """Physics steps back the features are taken at (Hwangbo et al.: now, 10 and 20 ms ago)."""
    hidden: tuple[int, ...] = (32, 32)
    """Widths of the tanh hidden layers."""
    epochs: int = 100
    """Passes over the training samples."""
    batch_size: int = 2048
    """Samples per gradient step."""
    learning_rate: float = 3e-3
    """Adam's step size."""
    holdout: float = 0.25
    """Fraction of the recording (its end) kept out of training to score the fit."""
    seed: int = 0
    """Seed of the initial weights and the batch order."""


@dataclasses.dataclass
class ActuatorFit:
    """A fitted network and how well it and the ideal PD law predict the held-out torques."""

    net: ActuatorNet
    net_error: float
    """RMS error of the network's torques on the held-out samples, N·m."""
    pd_error: float
    """RMS error of the ideal PD law kp (q* − q) − kd q̇ (within ±τ_max) on the same samples, N·m."""
    samples: int
    """Training samples (recorded states × joints)."""


def actuator_samples(
    recording: Recording, lags: np.ndarray, step_seconds: float, torque_scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features [S', J, L·FEATURES], measured torques [S', J] (N·m) and times [S'] of the recorded states that
    have a command in force at their oldest lag."""
    rec = recording
    if rec.joint_torque is None:
        raise ConfigError("recording", "it holds no measured torques (joint_torque): record it again with this version")
    offsets = np.asarray(lags) * step_seconds
    usable = rec.state_time - offsets[-1] >= max(rec.command_time[0], rec.state_time[0])
    times = rec.state_time[usable]
    blocks = []
    for offset in offsets:
        when = times - offset
        command = np.searchsorted(rec.command_time, when, side="right") - 1
        qpos, qvel = (_interp(when, rec.state_time, values) for values in (rec.joint_pos, rec.joint_vel))
        kp, kd, target = rec.command_kp[command], rec.command_kd[command], rec.command_position[command]
        blocks.append(pd_features(target, qpos, qvel, kp, kd, torque_scale, np))
    features = np.concatenate(blocks, axis=-1)  # [S', J, L·FEATURES], lag-major like ActuatorNet.torque
    return features, rec.joint_torque[usable], times


def _interp(when: np.ndarray, times: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(when, times, values[:, j]) for j in range(values.shape[1])], axis=1)


def fit_actuator_net(recording: Recording, torque_scale: np.ndarray, config: ActuatorFitConfig) -> ActuatorFit:
    """Fit an `ActuatorNet` (one MLP shared by every joint) to `recording`'s measured torques."""
    import torch

    lags = np.asarray(sorted(config.lags), dtype=np.int64)
    if lags[0] != 0:
        raise ConfigError("lags", f"must start at 0 (the present step), got {list(config.lags)}")
    features, torque, times = actuator_samples(recording, lags, config.step_seconds, torque_scale)
    split = times[0] + (1.0 - config.holdout) * (times[-1] - times[0])
    train, test = times < split, times >= split
    x = torch.as_tensor(features[train].reshape(-1, len(lags) * FEATURES), dtype=torch.float32)
    y = torch.as_tensor((torque[train] / torque_scale).reshape(-1), dtype=torch.float32)
    torch.manual_seed(config.seed)
    widths, layers = (x.shape[1], *config.hidden, 1), []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        layers += [torch.nn.Linear(n_in, n_out)] + ([torch.nn.Tanh()] if i < len(widths) - 2 else [])
    mlp = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(mlp.parameters(), lr=config.learning_rate)
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(config.epochs):
        for batch in torch.randperm(len(x), generator=generator).split(config.batch_size):
            loss = torch.mean((mlp(x[batch])[:, 0] - y[batch]) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    linears = [layer for layer in mlp if isinstance(layer, torch.nn.Linear)]
    net = ActuatorNet(
        weights=[layer.weight.detach().numpy().T.astype(np.float64) for layer in linears],
        biases=[layer.bias.detach().numpy().astype(np.float64) for layer in linears],
        lags=lags,
        step_seconds=config.step_seconds,
        torque_scale=np.asarray(torque_scale, dtype=np.float64),
    )
    history = _history(features[test], lags)
    net_error = float(np.sqrt(np.mean((net.torque(history, np) - torque[test]) ** 2)))
    now = features[test][..., :FEATURES] * torque_scale[:, None]
    pd = np.clip(now[..., 0] + now[..., 1], -torque_scale, torque_scale)
    pd_error = float(np.sqrt(np.mean((pd - torque[test]) ** 2)))
    return ActuatorFit(net, net_error, pd_error, int(train.sum() * torque.shape[1]))


def _history(features: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """Lagged features [S, J, L·FEATURES] as the per-step history [S, J, H, FEATURES] `ActuatorNet.torque` reads
    (steps between the lags left at 0: the network does not read them)."""
    history = np.zeros((*features.shape[:2], int(lags[-1]) + 1, FEATURES))
    history[:, :, lags] = features.reshape(*features.shape[:2], len(lags), FEATURES)
    return history
