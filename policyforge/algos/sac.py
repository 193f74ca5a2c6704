"""Soft actor-critic (Haarnoja et al. 2018): tanh-Gaussian actor, twin critics (or a REDQ / RLPD ensemble, layer norm)
with target networks, automatic entropy temperature, and a large-batch / high update-to-data option for many
parallel environments."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import TYPE_CHECKING, Any, Literal

import torch

from policyforge.algos.base import Algorithm, StepCallback, select
from policyforge.algos.registry import AlgoConfig, AlgorithmEntry, register_algorithm
from policyforge.algos.replay import ReplayBuffer
from policyforge.config import ConfigError, check, check_in, check_sizes
from policyforge.policies.base import Obs, Policy
from policyforge.policies.critics import QEnsemble
from policyforge.policies.networks import MAX_WIDTH, Activation
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig

MAX_BUFFER_SIZE = 2**30
"""Most replay transitions: the buffer is allocated up front and every transition holds two observations, so 2^30
of them are tens of GB; more is a typo."""
MAX_UPDATES_PER_STEP = 100
"""Most gradient steps per transition (REDQ-style high update-to-data ratios use ≤ 20; more stalls the run)."""
MAX_STEPS_PER_ITERATION = 10_000
"""Most vector-env steps between logging points (and checkpoints); more hides a run's progress for hours."""
MAX_ENSEMBLE = 20
"""Most Q networks (REDQ uses 10; each one is a full network trained every update)."""
MAX_ALPHA = 100.0
"""Largest initial temperature: entropy (a few nats) against Q-values of order 1-1000; beyond this the actor
learns nothing but entropy."""
MAX_ENTROPY_SCALE = 10.0
"""Largest target-entropy scale: −10 nats per action dimension is already a deterministic policy (σ ≈ e^-10);
larger targets only drive the temperature to 0. A negative scale (a positive target) nears the most entropy a
tanh-squashed Gaussian can have (log 2 nats per dimension: uniform actions), where the temperature grows without
bound."""


@dataclasses.dataclass
class SACConfig(AlgoConfig):
    """SAC hyper-parameters (`algo: {class: sac, ...}`)."""

    buffer_size: int = 1_000_000
    """Replay capacity, transitions."""
    batch_size: int = 256
    """Transitions per gradient step (raise it with many envs: large-batch SAC)."""
    updates_per_step: float = 1.0
    """Gradient steps per environment transition (update-to-data ratio)."""
    steps_per_iteration: int = 1
    """Vector-env steps between logging points."""
    learning_starts: int = 5000
    """Transitions of `initial_actions` before learning starts (in a steered env, `sim.steer`, a transition is a
    decision of act_steps simulator steps; so is the replay buffer's unit)."""
    initial_actions: Literal["uniform", "prior"] = "uniform"
    """What acts before learning starts: uniform random actions, or (steering a base, `sim.steer`) noise drawn from
    the base's own prior, so the buffer starts with the base policy acting as it does alone (DSRL's start)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics."""
    alpha_lr: float = 3e-4
    """Adam learning rate of the entropy temperature."""
    gamma: float = 0.99
    """Discount."""
    tau: float = 0.005
    """Polyak factor of the target critics."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    target_entropy_scale: float = 1.0
    """Target entropy = −scale × action dimensions."""
    policy_delay: int = 1
    """Actor and temperature updates every this many critic updates."""
    critic_warmup_updates: int = 0
    """Critic updates before the actor and the temperature start training: a steering or fine-tuned actor starts
    where its base is good, and a critic fitted to nothing yet would walk it away (DSRL, RLPD warm-ups)."""
    critic_hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    """Hidden sizes of each Q network."""
    critic_activation: Activation = "relu"
    """Activation of the Q networks."""
    critic_obs_key: str = "critic"
    """Observation the critics read."""
    critic_ensemble: int = 2
    """Q networks (2: clipped double-Q; REDQ and RLPD use 10 at high `updates_per_step`)."""
    critic_target_subset: int = 2
    """The target takes the minimum over this many heads drawn at random each update (REDQ); with all of them
    (the default, 2 of 2) the actor maximises their minimum too, otherwise their mean."""
    critic_layer_norm: bool = False
    """Layer norm in the Q networks' hidden layers (RLPD: what keeps high update-to-data ratios stable)."""

    def __post_init__(self) -> None:
        check_in(self.buffer_size, "buffer_size", f"[1, {MAX_BUFFER_SIZE}]", "it is allocated up front")
        check_in(self.batch_size, "batch_size", f"[1, buffer_size={self.buffer_size}]")
        check_in(self.updates_per_step, "updates_per_step", f"(0, {MAX_UPDATES_PER_STEP}]")
        check_in(self.steps_per_iteration, "steps_per_iteration", f"[1, {MAX_STEPS_PER_ITERATION}]")
        check_in(self.learning_starts, "learning_starts", "[0, inf)")
        for name in ("actor_lr", "critic_lr", "alpha_lr"):
            check_in(getattr(self, name), name, "(0, 1)", "Adam moves every weight by about lr per step")
        check_in(self.gamma, "gamma", "(0, 1]")
        check_in(self.tau, "tau", "(0, 1]")
        check_in(self.init_alpha, "init_alpha", f"(0, {MAX_ALPHA}]")
        check_in(self.target_entropy_scale, "target_entropy_scale", f"[0, {MAX_ENTROPY_SCALE}]")
        check_in(self.policy_delay, "policy_delay", "[1, inf)")
        check_in(self.critic_warmup_updates, "critic_warmup_updates", "[0, inf)")
        check_sizes(self.critic_hidden, "critic_hidden", MAX_WIDTH)
        check_in(self.critic_ensemble, "critic_ensemble", f"[2, {MAX_ENSEMBLE}]")
        check_in(self.critic_target_subset, "critic_target_subset", f"[1, critic_ensemble={self.critic_ensemble}]")
        key = self.critic_obs_key
        check(key in ("critic", "policy"), "critic_obs_key", f"must be 'critic' (privileged) or 'policy', got {key!r}")


class SAC(Algorithm):
    """Off-policy SAC for a Gaussian policy with tanh squashing."""

    def __init__(self, policy: Policy, obs_shapes: dict[str, tuple[int, ...]], config: SACConfig):
        self.policy, self.config = policy, config
        critic_dim = obs_shapes[config.critic_obs_key][0]
        self.critic = QEnsemble(
            critic_dim, policy.action_dim, config.critic_hidden, config.critic_activation, config.critic_obs_key,
            count=config.critic_ensemble, layer_norm=config.critic_layer_norm,
        )  # fmt: skip
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(config.init_alpha), requires_grad=True)
        self.target_entropy = -config.target_entropy_scale * policy.action_dim
        self.actor_optimizer = torch.optim.Adam(policy.parameters(), lr=config.actor_lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_lr, fused=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr)
        self.obs_keys = {policy.obs_key, config.critic_obs_key}
        stored = {k: s for k, s in obs_shapes.items() if k in self.obs_keys}
        self.replay = ReplayBuffer(config.buffer_size, stored, policy.action_dim)
        self.transitions, self.updates, self._update_credit = 0, 0, 0.0

    def steps_per_iteration(self, env: VecEnv) -> int:
        return env.num_envs * self.config.steps_per_iteration * env.env_steps_per_step

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        cfg, metrics = self.config, {}
        for _ in range(cfg.steps_per_iteration):
            with torch.no_grad():
                if self.transitions < cfg.learning_starts and cfg.initial_actions == "prior":
                    action = env.prior_actions()
                elif self.transitions < cfg.learning_starts:
                    action = torch.rand(env.num_envs, env.action_dim) * 2 - 1
                else:
                    action = self.policy.sample(obs).action[:, 0]
            next_obs, reward, terminated, _, info = env.step(action)
            on_step(info)
            self.replay.add(
                select(obs, self.obs_keys), action, reward, select(info["final_obs"], self.obs_keys), terminated
            )
            self.transitions += env.num_envs
            obs = next_obs
            if self.transitions >= cfg.learning_starts:
                self._update_credit += cfg.updates_per_step * env.num_envs
                while self._update_credit >= 1:
                    metrics = self._update()
                    self._update_credit -= 1
        return obs, metrics

    def _update(self) -> dict[str, float]:
        cfg = self.config
        batch = self.replay.sample(cfg.batch_size)
        obs, next_obs, action = batch["obs"], batch["next_obs"], batch["action"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_sample = self.policy.sample(next_obs)
            target_q = self._subset_min(self.critic_target(next_obs, next_sample.action[:, 0]))
            soft_value = target_q - alpha * next_sample.log_prob
            target = batch["reward"] + cfg.gamma * (~batch["terminated"]) * soft_value
        q = self.critic(obs, action)  # [M, B]
        critic_loss = 0.5 * ((q - target) ** 2).mean(1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        metrics = {
            "loss/critic": float(critic_loss.detach()),
            "loss/q": float(q[0].mean().detach()),
            "loss/alpha": float(alpha),
        }
        self.updates += 1
        if self.updates > cfg.critic_warmup_updates and self.updates % cfg.policy_delay == 0:
            metrics.update(self._update_actor(obs, alpha))
        with torch.no_grad():
            for target_param, param in zip(self.critic_target.parameters(), self.critic.parameters(), strict=True):
                target_param.lerp_(param, cfg.tau)
        return metrics

    def _update_actor(self, obs: Obs, alpha: torch.Tensor) -> dict[str, float]:
        self.critic.requires_grad_(False)
        sample = self.policy.sample(obs)
        q = self._actor_q(self.critic(obs, sample.action[:, 0]))
        actor_loss = (alpha * sample.log_prob - q).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.critic.requires_grad_(True)
        alpha_loss = -(self.log_alpha * (sample.log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optimizer.step()
        return {"loss/actor": float(actor_loss.detach()), "loss/entropy": float(-sample.log_prob.mean().detach())}

    def _subset_min(self, heads: torch.Tensor) -> torch.Tensor:
        """The minimum [B] over `critic_target_subset` of the heads [M, B], drawn at random (all: no draw)."""
        count = self.config.critic_target_subset
        if count == len(heads):
            return heads.min(0).values
        return heads[torch.randperm(len(heads))[:count]].min(0).values

    def _actor_q(self, heads: torch.Tensor) -> torch.Tensor:
        """What the actor maximises [B] of the heads [M, B]: their minimum when every head forms the target
        (clipped double-Q), their mean otherwise (REDQ)."""
        return heads.min(0).values if self.config.critic_target_subset == len(heads) else heads.mean(0)

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizers": [o.state_dict() for o in (self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer)],
            "replay": self.replay.state_dict(),
            "counters": (self.transitions, self.updates, self._update_credit),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for optimizer, saved in zip(
            (self.actor_optimizer, self.critic_optimizer, self.alpha_optimizer), state["optimizers"], strict=True
        ):
            optimizer.load_state_dict(saved)
        self.replay.load_state_dict(state["replay"])
        self.transitions, self.updates, self._update_credit = state["counters"]


def construct_sac(config: RunConfig, env: VecEnv, policy: Policy) -> SAC:
    """SAC for `policy` in `env`."""
    return SAC(policy, env.obs_shapes, config.algo)


def check_run(config: RunConfig) -> None:
    """SAC backpropagates through reparameterised, tanh-squashed Gaussian samples."""
    kind = config.policy.tag
    why = f"SAC trains Gaussian policies; train a {kind} policy with algo: bc or algo: ppo"
    check(kind == "gaussian", "policy.class", why)
    check(config.policy.squash, "policy.squash", "SAC needs tanh-squashed actions: set policy.squash: true")
    if config.algo.initial_actions == "prior" and not config.sim.steer.enabled:
        raise ConfigError(
            "algo.initial_actions", "prior draws a steered base's noise: set sim.steer.base, or use uniform"
        )


register_algorithm("sac", SACConfig, AlgorithmEntry(construct_sac, check=check_run))
