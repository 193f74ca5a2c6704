"""Soft actor-critic (Haarnoja et al. 2018): tanh-Gaussian actor, twin critics (or a REDQ / RLPD ensemble, layer norm)
with target networks, automatic entropy temperature, and a large-batch / high update-to-data option for many
parallel environments.

The actor is any policy whose `sample` is reparameterised: a tanh-Gaussian (in a steered env, `sim.steer`, it acts
in a frozen base's noise: DSRL), or a per-step residual on a frozen base (`policy: {class: residual, per_step:
true}`: off-policy residual RL, ResFiT / Policy Decorator). The actor reads its own inputs (`Policy.input_state`:
a residual's base action of the step), kept per env here as in PPO's rollouts and stored in the replay buffer; the
critics read the critic observation and the executed action. The input of a finished episode's final observation
is a fresh one (a residual's base plans a new chunk from it alone)."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import TYPE_CHECKING, Any, Literal

import torch

from policyforge.algos.base import Algorithm, StepCallback
from policyforge.algos.bc import load_demonstrations, obs_column
from policyforge.algos.demo_replay import check_demonstrations, demo_replay
from policyforge.algos.nstep import NStepReturns
from policyforge.algos.registry import AlgoConfig, AlgorithmEntry, register_algorithm
from policyforge.algos.replay import ReplayBuffer
from policyforge.config import ConfigError, check, check_in, check_sizes
from policyforge.data.dataset import DatasetError, Demonstrations
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
    initial_actions: Literal["uniform", "prior", "policy"] = "uniform"
    """What acts before learning starts: uniform random actions; (steering a base, `sim.steer`) noise drawn from
    the base's own prior, so the buffer starts with the base policy acting as it does alone (DSRL's start); or the
    policy's own samples (a residual that starts as its base: the base acting, with the residual's noise)."""
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
    n_step: int = 1
    """Rewards summed into each transition before it bootstraps (n-step returns: γ-discounted, cut at episode
    ends); 1: one-step TD. With a sparse reward that comes long after the decisive actions, 3–10."""
    actor_penalty: float = 0.0
    """Weight of the actor's squashed output squared, tanh(chain)², in its loss, scaled by the critics' mean |Q|
    (scale-free, as TD3+BC weighs its BC term): it pulls a residual's correction or a steering policy's noise
    toward zero, the base's own behaviour, against what the critics say. 0: plain SAC."""
    demonstrations: str = ""
    """A recorded dataset (`policyforge collect`) replayed beside the online transitions (RLPD), its success flags
    as rewards (`demo_replay`); empty: none."""
    demo_fraction: float = 0.5
    """Share of every batch drawn from the demonstrations (RLPD's symmetric sampling: 0.5)."""

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
        check_in(self.demo_fraction, "demo_fraction", "(0, 1)", "the rest of every batch is online transitions")
        check_in(self.n_step, "n_step", "[1, 100]", "the return of more steps than an episode has is the episode's")
        check_in(self.actor_penalty, "actor_penalty", "[0, 100]", "1 weighs a full-size output like the mean |Q|")
        key = self.critic_obs_key
        check(key in ("critic", "policy"), "critic_obs_key", f"must be 'critic' (privileged) or 'policy', got {key!r}")


class SAC(Algorithm):
    """Off-policy SAC for a Gaussian policy with tanh squashing."""

    def __init__(
        self, policy: Policy, obs_shapes: dict[str, tuple[int, ...]], config: SACConfig, num_envs: int,
        demos: Demonstrations | None = None,
    ):  # fmt: skip
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
        self.inputs = policy.input_state(num_envs)
        """Each env's actor inputs between steps (a per-step residual's base chunks)."""
        self._policy_obs: Obs | None = None
        self._seen: Obs | None = None
        """The actor's inputs at the latest observation, and that observation (the runner's, to tell a new start)."""
        stored = {config.critic_obs_key: obs_shapes[config.critic_obs_key]}
        stored.update({k: tuple(v.shape[1:]) for k, v in policy.example_obs(1).items()})
        self.replay = ReplayBuffer(config.buffer_size, stored, policy.action_dim, discounted=config.n_step > 1)
        self.nstep = NStepReturns(config.n_step, config.gamma, num_envs) if config.n_step > 1 else None
        self._demo_source, self._stored = demos, stored
        self.demos: ReplayBuffer | None = None
        """The demonstrations' transitions, made at the first iteration (the runner loads the policy's weights,
        a residual's base among them, after constructing its algorithm)."""
        self.transitions, self.updates, self._update_credit = 0, 0, 0.0

    def steps_per_iteration(self, env: VecEnv) -> int:
        return env.num_envs * self.config.steps_per_iteration * env.env_steps_per_step

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        cfg, metrics, key = self.config, {}, self.config.critic_obs_key
        if self._demo_source is not None and self.demos is None:
            self.demos = demo_replay(self._demo_source, self.policy, key, self._stored, cfg.n_step, cfg.gamma)
        policy_obs = self._inputs_at(obs)
        for _ in range(cfg.steps_per_iteration):
            with torch.no_grad():
                action = self._acting(env, policy_obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                on_step(info)
                ended = terminated | truncated
                self.inputs.restart(ended)
                next_policy_obs = self.inputs.push(next_obs)
                final_inputs = self._final_inputs(info["final_obs"], next_policy_obs, ended)
            self._store(
                {**policy_obs, key: obs[key]}, action, reward, {**final_inputs, key: info["final_obs"][key]},
                terminated, ended,
            )  # fmt: skip
            self.transitions += env.num_envs
            obs, policy_obs = next_obs, next_policy_obs
            if self.transitions >= cfg.learning_starts:
                self._update_credit += cfg.updates_per_step * env.num_envs
                while self._update_credit >= 1:
                    metrics = self._update()
                    self._update_credit -= 1
        self._policy_obs, self._seen = policy_obs, obs
        return obs, metrics

    def _store(self, obs: Obs, action: torch.Tensor, reward: torch.Tensor, next_obs: Obs, terminated: torch.Tensor,
               ended: torch.Tensor) -> None:  # fmt: skip
        """One step's transitions [N] into the replay (as n-step transitions once complete, `n_step`)."""
        if self.nstep is None:
            self.replay.add(obs, action, reward, next_obs, terminated)
        elif (rows := self.nstep.push(obs, action, reward, next_obs, terminated, ended)) is not None:
            self.replay.add(**rows)

    def _acting(self, env: VecEnv, policy_obs: Obs) -> torch.Tensor:
        """This step's actions [N, A]: `initial_actions` before learning starts, the policy's samples after."""
        if self.transitions < self.config.learning_starts and self.config.initial_actions == "prior":
            return env.prior_actions()
        if self.transitions < self.config.learning_starts and self.config.initial_actions == "uniform":
            return torch.rand(env.num_envs, env.action_dim) * 2 - 1
        return self.policy.sample(policy_obs).action[:, 0]

    def _inputs_at(self, obs: Obs) -> Obs:
        """The actor's inputs at the runner's `obs`: those of the last iteration when it continues from there;
        fresh ones (every env restarted) after a reset."""
        seen = self._seen
        if seen is not None and seen.keys() == obs.keys() and all(torch.equal(seen[k], obs[k]) for k in obs):
            assert self._policy_obs is not None
            return self._policy_obs
        self.inputs.restart(torch.ones(len(next(iter(obs.values()))), dtype=torch.bool))
        return self.inputs.push(obs)

    def _final_inputs(self, final_obs: Obs, next_inputs: Obs, ended: torch.Tensor) -> Obs:
        """The actor's inputs at each transition's next observation: `next_inputs` where the episode goes on, fresh
        inputs of the final observation (`final_obs`) where it `ended` [N]."""
        if not ended.any():
            return next_inputs
        ids = ended.nonzero()[:, 0]
        fresh = self.policy.input_state(len(ids)).push({k: v[ids] for k, v in final_obs.items()})
        inputs = {k: v.clone() for k, v in next_inputs.items()}
        for k in inputs:
            inputs[k][ids] = fresh[k]
        return inputs

    def _update(self) -> dict[str, float]:
        cfg = self.config
        batch = self._batch()
        obs, next_obs, action = batch["obs"], batch["next_obs"], batch["action"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_sample = self.policy.sample(next_obs)
            target_q = self._subset_min(self.critic_target(next_obs, next_sample.action[:, 0]))
            soft_value = target_q - alpha * next_sample.log_prob
            discount = batch.get("discount", cfg.gamma)  # γ^k of n-step transitions
            target = batch["reward"] + discount * (~batch["terminated"]) * soft_value
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
        if self.config.actor_penalty:
            size = torch.tanh(sample.chain).square().flatten(1).sum(-1).mean()
            actor_loss = actor_loss + self.config.actor_penalty * q.abs().mean().detach() * size
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        self.critic.requires_grad_(True)
        alpha_loss = -(self.log_alpha * (sample.log_prob.detach() + self.target_entropy)).mean()
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_optimizer.step()
        return {"loss/actor": float(actor_loss.detach()), "loss/entropy": float(-sample.log_prob.mean().detach())}

    def _batch(self) -> dict[str, Any]:
        """A batch of online transitions, `demo_fraction` of it demonstrations when there are some (RLPD)."""
        size = self.config.batch_size
        if self.demos is None:
            return self.replay.sample(size)
        from_demos = round(size * self.config.demo_fraction)
        online, demo = self.replay.sample(size - from_demos), self.demos.sample(from_demos)
        return {k: _concatenated(v, demo[k]) for k, v in online.items()}

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
            "actor_inputs": {"state": self.inputs.state_dict(), "latest": self._policy_obs, "seen": self._seen},
            **({"nstep": self.nstep.state_dict()} if self.nstep is not None else {}),
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
        if self.nstep is not None:
            self.nstep.load_state_dict(state["nstep"])
        if "actor_inputs" in state:  # checkpoints before per-step residuals start every env afresh
            self.inputs.load_state_dict(state["actor_inputs"]["state"])
            self._policy_obs, self._seen = state["actor_inputs"]["latest"], state["actor_inputs"]["seen"]


def _concatenated(a: Any, b: Any) -> Any:
    """Two batches (tensors [B, ...] or dicts of them) as one."""
    return {k: torch.cat([v, b[k]]) for k, v in a.items()} if isinstance(a, dict) else torch.cat([a, b])


def construct_sac(config: RunConfig, env: VecEnv, policy: Policy) -> SAC:
    """SAC for `policy` in `env` (with `algo.demonstrations` replayed beside its own transitions)."""
    demos = None
    if config.algo.demonstrations:
        demos = load_demonstrations(config.algo, config.sim.task, env, [], "demonstrations", obs_key=policy.obs_key)
        try:
            obs_column(demos, config.algo.critic_obs_key)
        except DatasetError as err:
            raise ConfigError("algo.demonstrations", str(err)) from None
    return SAC(policy, env.obs_shapes, config.algo, env.num_envs, demos)


def check_run(config: RunConfig) -> None:
    """SAC backpropagates through reparameterised samples: tanh-squashed Gaussians or per-step residuals."""
    kind, policy = config.policy.tag, config.policy
    why = f"SAC trains Gaussian policies and per-step residuals; train a {kind} policy with algo: bc or algo: ppo"
    check(kind in ("gaussian", "residual"), "policy.class", why)
    if kind == "gaussian":
        check(policy.squash, "policy.squash", "SAC needs tanh-squashed actions: set policy.squash: true")
        check(not policy.history, "policy.history", "SAC's Gaussian reads the current observation: set 0")
    else:
        why = "SAC corrects each executed action (off-policy residual RL): set policy.per_step: true"
        check(policy.per_step, "policy.per_step", why)
        why = "SAC's residual is bounded (an unbounded one walks out of the base's reach): set policy.squash: true"
        check(policy.squash, "policy.squash", why)
    if config.algo.initial_actions == "prior" and not config.sim.steer.enabled:
        raise ConfigError(
            "algo.initial_actions", "prior draws a steered base's noise: set sim.steer.base, or use uniform"
        )
    check_demonstrations(config)
    if config.algo.initial_actions == "uniform" and kind == "residual":
        why = "uniform random actions ignore the base: use policy (the base acting, with the residual's noise)"
        raise ConfigError("algo.initial_actions", why)


register_algorithm("sac", SACConfig, AlgorithmEntry(construct_sac, check=check_run))
