"""Steering a frozen generative policy through the noise its sampler starts from (DSRL: Wagenmaker et al. 2025,
"Steering Your Diffusion Policy with Latent Space RL"), as an environment any RL algorithm can act in.

`NoiseSteeredEnv` turns a VecEnv and a frozen diffusion, flow or VLA `base` into a VecEnv whose action is the
base's starting noise: an action [N, H·A] in [-1, 1] is the noise [N, H, A] times `noise_bound`; one step of the
wrapper plans the base's chunk from that noise (`Policy.act_from_noise`, the rest of the chain noiseless) on the
base's own observation history and executes its first `act_steps` actions. The steering policy never changes the
base's parameters and needs nothing from it but the contract (a black box: DSRL-NA steers π0 the same way).

A wrapper step is one decision, as in PPO's chunked rollouts (`algos.ppo`), with the rewards, episode ends and
statistics of `sims.decisions.run_decision`.

`sim.steer` (`SteerConfig`) turns it on for a run: `make_env` wraps every env the run makes (training,
evaluation, video) with `with_steering`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from policyforge.config import ConfigError
from policyforge.policies.base import Chain, Obs, Policy, Sample
from policyforge.sims.config import SimConfig
from policyforge.sims.decisions import ActionChunkEnv, run_decision
from policyforge.sims.vec_env import StepResult, VecEnv
from policyforge.sims.wrapper import VecEnvWrapper


class NoiseSteeredEnv(VecEnvWrapper):
    """`env` acted in through the starting noise of the frozen generative policy `base` (module docstring)."""

    def __init__(self, env: VecEnv, base: Policy, noise_bound: float | None = None):
        super().__init__(env)
        if base.noise_shape is None:
            raise ConfigError(
                "sim.steer.base", f"the base policy is a {type(base).__name__}, which has no starting noise to steer: "
                "steer a diffusion, flow or VLA run"
            )  # fmt: skip
        if base.action_dim != env.action_dim:
            raise ConfigError(
                "sim.steer.base", f"the base policy acts in {base.action_dim} dimensions, the environment in "
                f"{env.action_dim}: steer a policy trained on this task"
            )  # fmt: skip
        self.base = base.eval().requires_grad_(False)
        self.noise_bound = float(noise_bound or base.noise_bound)
        self.action_dim = int(np.prod(base.noise_shape))
        self.act_steps = self.env_steps_per_step = base.act_steps
        self.control_dt = env.control_dt * base.act_steps
        self.episode_steps = -(-env.episode_steps // base.act_steps)
        self.history = base.input_state(env.num_envs)
        self._obs: Obs | None = None

    def started(self, obs: Obs, env_ids: torch.Tensor | None) -> Obs:
        self.history.restart(self.started_mask(env_ids).cpu())
        self._obs = obs
        return obs

    def noise(self, action: torch.Tensor | np.ndarray) -> torch.Tensor:
        """The base's starting noise [N, H, A] of steering actions [N, H·A] in [-1, 1]."""
        action = torch.as_tensor(action, dtype=torch.float32, device=self.device)
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(
                f"steering actions of shape {list(action.shape)}: this environment takes [N, H·A] = "
                f"[{self.num_envs}, {self.action_dim}] (the base's noise {list(self.base.noise_shape)}, flattened)"
            )
        return noise_of(action, self.base, self.noise_bound)

    def prior_actions(self) -> torch.Tensor:
        """Actions [N, H·A] whose noise is a draw of the base's N(0, I) prior (clipped at the bound): the base
        acting as it does alone."""
        noise = torch.randn(self.num_envs, self.action_dim, device=self.device)
        return (noise / self.noise_bound).clamp(-1.0, 1.0)

    @torch.no_grad()
    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        if self._obs is None:
            raise RuntimeError("NoiseSteeredEnv: reset() before step()")
        chunk = self.base.act_from_noise(self.history.push(self._obs), self.noise(action))

        def after_step(i: int, obs: Obs, ended: torch.Tensor) -> None:
            self.history.restart(ended)
            if i < self.act_steps - 1:  # the next step still belongs to this decision
                self.history.push(obs)

        result = run_decision(self.env, chunk, self.act_steps, after_step)
        self._obs = result[0]
        return result

    def get_state(self) -> dict[str, Any] | None:
        """The wrapped env's snapshot with the base's observation history and the last observation (a resumed run
        continues exactly)."""
        state = self.env.get_state()
        if state is None:
            return None
        obs = None if self._obs is None else {k: v.clone() for k, v in self._obs.items()}
        return {"env": state, "steering": {"history": self.history.state_dict(), "obs": obs}}

    def set_state(self, state: dict[str, Any]) -> None:
        self.env.set_state(state["env"])
        self.history.load_state_dict(state["steering"]["history"])
        obs = state["steering"]["obs"]
        self._obs = None if obs is None else {k: v.clone() for k, v in obs.items()}


class ActingOnly(Policy):
    """A policy that only acts (deployment, export): what a run trained is another policy inside it."""

    refusal = "this policy only acts (deployment, export)"

    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        raise TypeError(self.refusal)

    def step_log_probs(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        raise TypeError(self.refusal)

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        raise TypeError(self.refusal)


class SteeredPolicy(ActingOnly):
    """A DSRL run's deployable policy: the steering policy (trained in a `NoiseSteeredEnv`) choosing the frozen
    base's starting noise, and the base planning from it, as one module (one exported graph). Its inputs are the
    base's (with its history axis); the steering reads the newest step of its observation key. For deployment and
    export only: training happens on the steering policy in the steered env."""

    refusal = "a SteeredPolicy only acts (deployment, export): train its steering policy in a NoiseSteeredEnv"

    def __init__(self, base: Policy, steering: Policy, noise_bound: float):
        super().__init__()
        noise_dim = int(np.prod(base.noise_shape))
        if steering.action_dim != noise_dim:
            raise ValueError(
                f"the steering policy acts in {steering.action_dim} dimensions, the base's noise has {noise_dim} "
                f"({list(base.noise_shape)}, flattened): train the steering policy in this base's NoiseSteeredEnv"
            )
        if steering.obs_key not in base.obs_keys:
            raise ValueError(
                f"the steering policy reads obs[{steering.obs_key!r}], which the base ({list(base.obs_keys)}) does not"
            )
        self.base, self.steering, self.noise_bound = base, steering, float(noise_bound)
        self.obs_key, self.action_dim = base.obs_key, base.action_dim
        self.chunk_len, self.act_steps, self.n_obs_steps = base.chunk_len, base.act_steps, base.n_obs_steps
        self.export_tolerance = max(base.export_tolerance, steering.export_tolerance)

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return self.base.obs_keys

    def act(self, obs: Obs) -> torch.Tensor:
        """Actions [B, H, A] for the base's inputs (obs[key] [B, T_o, ...] with a history axis)."""
        key = self.steering.obs_key
        newest = obs[key][:, -1] if self.base.n_obs_steps else obs[key]
        choice = self.steering.act({key: newest})[:, 0]  # [B, H·A] in [-1, 1]
        return self.base.act_from_noise(obs, noise_of(choice, self.base, self.noise_bound))

    def example_obs(self, batch: int) -> Obs:
        return self.base.example_obs(batch)

    def export_spec(self) -> dict[str, Any]:
        return {**self.base.export_spec(), "steered": {"noise_bound": self.noise_bound}}


class ChunkActingPolicy(ActingOnly):
    """A Q-chunking run's deployable policy: `policy`'s action [B, 1, H·A] (trained in an `ActionChunkEnv`) as
    the chunk [B, H, A] it executes, all H actions before it decides again. For deployment and export only."""

    refusal = "a ChunkActingPolicy only acts (deployment, export): train its policy in an ActionChunkEnv"

    def __init__(self, policy: Policy, chunk: int, action_dim: int):
        super().__init__()
        self.policy, self.obs_key, self.action_dim = policy, policy.obs_key, action_dim
        self.chunk_len = self.act_steps = chunk
        self.n_obs_steps, self.export_tolerance = policy.n_obs_steps, policy.export_tolerance

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return self.policy.obs_keys

    def act(self, obs: Obs) -> torch.Tensor:
        return self.policy.act(obs)[:, 0].view(-1, self.chunk_len, self.action_dim)

    def example_obs(self, batch: int) -> Obs:
        return self.policy.example_obs(batch)


def deployable(policy: Policy, env: VecEnv) -> tuple[Policy, VecEnv]:
    """The policy a deployer runs, and the env whose control step it acts at: for a run in a steered env, the
    base and `policy` (its steering) as one `SteeredPolicy`; for a run over action chunks (`sim.action_chunk`),
    `policy` acting in chunks; both in the simulator's own env. Otherwise both unchanged."""
    while isinstance(env, VecEnvWrapper) and not isinstance(env, NoiseSteeredEnv | ActionChunkEnv):
        env = env.env
    if isinstance(env, NoiseSteeredEnv):
        return SteeredPolicy(env.base, policy, env.noise_bound), env.env
    if isinstance(env, ActionChunkEnv):
        return ChunkActingPolicy(policy, env.chunk, env.env_action_dim), env.env
    return policy, env


def noise_of(action: torch.Tensor, base: Policy, bound: float) -> torch.Tensor:
    """The base's starting noise [B, H, A] of steering actions [B, H·A]: clamped to [-1, 1], times `bound`."""
    return action.clamp(-1.0, 1.0).reshape(-1, *base.noise_shape) * bound


def with_steering(env: VecEnv, sim: SimConfig) -> NoiseSteeredEnv:
    """`env` (made from `sim`) acted in through the noise of `sim.steer.base`'s policy; ConfigError naming
    sim.steer.base for a run of another task or one whose policy reads observations this env does not have."""
    from policyforge.algos.loaded import load

    steer = sim.steer
    if not (Path(steer.base) / "config.yaml").is_file():
        raise ConfigError(
            "sim.steer.base", f"{steer.base} is not a training run (no config.yaml there): train the base first, "
            f"e.g. `policyforge train configs/{sim.task}-flow-bc.yaml`, or give the directory of one"
        )  # fmt: skip
    base = load(steer.base, steer.checkpoint)
    if base.config.sim.task != sim.task:
        trained = base.config.sim.task
        raise ConfigError("sim.steer.base", f"{steer.base} was trained on {trained}, this run is {sim.task}")
    for key in base.policy.obs_keys:
        shape = env.obs_shapes.get(key)
        if shape is not None and tuple(shape) != tuple(base.obs_shapes[key]):
            raise ConfigError(
                "sim.steer.base", f"{steer.base}'s policy reads obs[{key!r}] of shape {list(base.obs_shapes[key])}, "
                f"this env's is {list(shape)}: give the run the base run's sim settings (task_options, image)"
            )  # fmt: skip
        if shape is None:
            raise ConfigError(
                "sim.steer.base", f"{steer.base}'s policy reads obs[{key!r}], which this env does not observe: give "
                "the run the base run's sim settings (image, instructions)"
            )  # fmt: skip
    return NoiseSteeredEnv(env, base.policy, steer.noise_bound or None)
