"""A trained run as a Python object: `policyforge.load(run_dir)` → `LoadedPolicy`, whose `act(obs)` returns the
action the run's evaluation would take for that observation (SB3's `model.predict(obs, deterministic=True)`).

    policy = policyforge.load("runs/arm-reach-ppo", checkpoint="best")
    env = policy.make_env(num_envs=4)            # the run's task, seeded as evaluation seeds it
    obs = env.reset(seed=0)
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(policy.act(obs))
        policy.reset(info["episode"]["done"])    # envs that start a new episode drop their history / chunk

`act` keeps what a chunked or history policy carries between steps (its action queue and observation history,
`ChunkedActor`, the same code evaluation runs), per env: call `reset()` at the start of a new episode (or
`reset(done)` for the envs of a batch that start one). Observations are the env's dict, numpy or torch, of a batch
[N, ...] or of one env (no batch axis: the action comes back without one too).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policyforge.algos.run_config import RunConfig
from policyforge.algos.runner import evaluation_env, load_run
from policyforge.errors import UserError
from policyforge.policies.base import Obs, Policy
from policyforge.policies.rollout import ChunkedActor
from policyforge.sims.vec_env import VecEnv


class ObservationError(UserError):
    """An observation `act` cannot read: a missing key or a shape that is neither one env's nor a batch's."""


class LoadedPolicy:
    """A run's trained policy, acting deterministically on observations of one env or of a batch."""

    def __init__(self, run_dir: Path, config: RunConfig, policy: Policy, obs_shapes: Mapping[str, tuple[int, ...]]):
        self.run_dir = Path(run_dir)
        self.config = config
        """The run's resolved config (`RunConfig`): task, policy, algorithm, runner settings."""
        self.policy = policy
        """The torch policy (`Policy`, in eval mode): `act(obs)` → chunks [B, H, A] without any history."""
        self.obs_shapes = dict(obs_shapes)
        """Per-env shape of each observation key of the run's task, e.g. {"policy": (D,), "critic": (Dc,)}."""
        self._actor: ChunkedActor | None = None

    @property
    def action_dim(self) -> int:
        """A: actions are [N, A] (or [A] for one env) in [-1, 1]."""
        return self.policy.action_dim

    def act(self, obs: Mapping[str, Any] | np.ndarray | torch.Tensor) -> np.ndarray:
        """The deterministic action for `obs`: float32 [N, A] for a batch of N envs' observations, [A] for one env's.

        `obs`: the env's observation dict (values numpy arrays or torch tensors, e.g. obs["policy"] [N, D] or
        [D]); an array alone is taken as obs["policy"]. Consecutive calls are consecutive steps of the same envs:
        a chunked policy executes its queued actions and plans again every `act_steps` calls, a history policy
        stacks the last T_o observations. A batch of another size starts afresh (as `reset()`)."""
        batch, single = self._as_batch(obs)
        num_envs = next(iter(batch.values())).shape[0]
        if self._actor is None or self._actor.num_envs != num_envs:
            self._actor = ChunkedActor(self.policy, num_envs)
        action = self._actor(batch).cpu().numpy().astype(np.float32, copy=False)
        return action[0] if single else action

    def reset(self, done: Any = None) -> None:
        """A new episode: with no argument for every env (their histories and action queues are dropped), with
        `done` (bool [N], numpy or torch) for the envs marked in it only."""
        if done is None or self._actor is None:
            self._actor = None
            return
        ended = torch.as_tensor(np.asarray(done, dtype=bool)).reshape(-1)
        if ended.shape[0] != self._actor.num_envs:
            raise ObservationError(f"reset(done) got {ended.shape[0]} flags for a batch of {self._actor.num_envs} envs")
        self._actor.episodes_ended(ended)

    def make_env(self, num_envs: int | None = None, backend: str | None = None) -> VecEnv:
        """A fresh VecEnv of the run's task with `num_envs` (default: the run's runner.eval_envs), seeded as the
        run's evaluation is, on `backend` (default: the run's)."""
        return evaluation_env(self.config, num_envs, backend)

    def _as_batch(self, obs: Mapping[str, Any] | np.ndarray | torch.Tensor) -> tuple[Obs, bool]:
        """`obs` as torch tensors with a batch axis, and whether it came without one (a single env's)."""
        if not isinstance(obs, Mapping):
            obs = {self.policy.obs_key: obs}
        missing = [key for key in self.policy.obs_keys if key not in obs and key in self.obs_shapes]
        if missing:
            raise ObservationError(f"the observation has keys {sorted(obs)}; this policy reads {missing} as well")
        tensors = {key: _tensor(value) for key, value in obs.items() if key in self.obs_shapes}
        key = next(k for k in self.policy.obs_keys if k in tensors)
        shape, expected = tuple(tensors[key].shape), self.obs_shapes[key]
        if shape == expected:
            return {k: v[None] for k, v in tensors.items()}, True
        if shape[1:] == expected:
            return tensors, False
        batched = ", ".join(map(str, ("N", *expected)))
        raise ObservationError(
            f"obs[{key!r}] has shape {shape}; this run's task gives {expected} per env, [{batched}] for a batch of N"
        )


def _tensor(value: Any) -> torch.Tensor:
    """A numpy array or tensor as a CPU tensor; floating point as float32 (what the policy was trained on)."""
    tensor = torch.as_tensor(value).cpu()
    return tensor.float() if tensor.is_floating_point() else tensor


def load(run_dir: str | Path, checkpoint: str | int = "latest") -> LoadedPolicy:
    """A run's trained policy, ready to act: `checkpoint` is "latest" (the newest intact checkpoint), "best" (the
    policy of the run's best evaluation), N (the checkpoint at N steps, as the run's logs count them) or a checkpoint
    file, as `policyforge eval --checkpoint` reads it (CheckpointError naming what the run has otherwise)."""
    config, policy, env = load_run(Path(run_dir), str(checkpoint), num_envs=1)
    obs_shapes = env.obs_shapes
    env.close()
    return LoadedPolicy(Path(run_dir), config, policy, obs_shapes)
