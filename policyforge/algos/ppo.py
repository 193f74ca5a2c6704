"""Proximal policy optimisation (Schulman et al. 2017), written against the policy contract only.

The policy's `sample` gives the chain and its log-probability at rollout time and `log_prob` rescores the
stored chain during the update; nothing here knows which policy class it trains. GAE advantages, clipped
value loss, target-KL early stopping, observation normalisation inside the networks, return scaling, an
asymmetric critic on the privileged observation, and bootstrapping of time-outs from the true final
observation.

What distinguishes the fine-tuning methods is the policy's chain plus a few options here: `ratio: per_step` with
`denoising_discount`, `clip_ratio_first` and `log_prob_clamp` is DPPO; a whole-chain ratio with `entropy_coef`
is ReinFlow (and Flow-SDE, whose `advantage: grpo` is Flow-GRPO / πRL); `bc_coef` keeps any of them near the
policy it started from; a teacher (`algo: distill`, mode rpd) adds the student's `bc_loss` to a frozen teacher's
actions, labelled at rollout time (RPD). The ratio always covers only the executed actions of each chunk.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from policyforge.algos.base import Algorithm, StepCallback, select
from policyforge.algos.gae import gae, group_relative_advantages
from policyforge.algos.ppo_config import PPOConfig, check_run, normalizer_default, train_only_last_steps
from policyforge.algos.registry import AlgorithmEntry, register_algorithm
from policyforge.algos.teacher import TeacherLabels
from policyforge.config import check
from policyforge.policies.base import Chain, Obs, Policy
from policyforge.policies.critics import ValueFunction
from policyforge.policies.normalizer import ReturnScaler
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig

MAX_LOG_RATIO = 20.0
"""Bound on a probability ratio's log before its exponential (e^20 ≈ 5e8: far outside any clip range, finite)."""


class PPO(Algorithm):
    """On-policy PPO for any `Policy`."""

    def __init__(
        self,
        policy: Policy,
        critic_obs_dim: int,
        num_envs: int,
        config: PPOConfig,
        total_iterations: int,
        teacher: TeacherLabels | None = None,
        teacher_weight: Callable[[int], float] = lambda iteration: 0.0,
        teacher_loss: Callable[[Obs, torch.Tensor], torch.Tensor] | None = None,
    ):
        self.policy, self.config = policy, config
        self.teacher, self.teacher_weight = teacher, teacher_weight
        self.teacher_loss = teacher_loss or policy.bc_loss
        """RPD: a frozen teacher labelling every decision, the weight of the student's loss to its labels at an
        iteration, and that loss (obs, labels [B, H, A] → scalar; default the student's `bc_loss`)."""
        self.act_steps = policy.act_steps
        """Env steps per decision: the executed part of each action chunk."""
        self.history = policy.input_state(num_envs)
        self.critic = ValueFunction(
            critic_obs_dim, config.critic_hidden, config.critic_activation, config.critic_obs_key
        )
        self.optimizer = torch.optim.Adam(
            [
                {"params": list(policy.parameters()), "lr": config.actor_lr},
                {"params": list(self.critic.parameters()), "lr": config.critic_lr},
            ],
            eps=1e-5,
            fused=True,  # one kernel per step instead of one per tensor: ~15% faster updates on the CPU
        )
        self.reward_scaler = ReturnScaler(num_envs, config.gamma, enabled=config.scale_rewards)
        self.total_iterations, self.iteration = total_iterations, 0
        self.critic_keys = {config.critic_obs_key}
        check(
            config.advantage != "grpo" or num_envs % config.group_size == 0,
            "algo.group_size",
            f"must divide sim.num_envs={num_envs} for GRPO groups, got {config.group_size}",
        )
        self.anchor: Policy | None = None
        """Frozen copy of the policy as it was at the first update (bc_coef > 0)."""
        self._sim_seconds = self._teacher_seconds = 0.0
        """Time spent in env.step, and in the teacher's decisions, during the current rollout."""

    def steps_per_iteration(self, env: VecEnv) -> int:
        return env.num_envs * self.config.rollout_steps * self.act_steps * env.env_steps_per_step

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        start = time.perf_counter()
        self._sim_seconds = self._teacher_seconds = 0.0
        # eval mode throughout: training-time augmentation (an image encoder's random shift) would draw other inputs
        # at each rescoring, and the ratios would move before the policy does
        self.policy.eval()
        batch, obs = self._collect(env, obs, on_step)
        collected = time.perf_counter()
        self._set_learning_rate()
        metrics = self._update(batch)
        self.iteration += 1
        if self.teacher is not None:
            metrics["perf/teacher_s"] = self._teacher_seconds
        metrics.update(  # where an iteration's time goes: simulation, acting (policy, critic, bookkeeping), update
            {
                "perf/sim_s": self._sim_seconds,
                "perf/act_s": collected - start - self._sim_seconds - self._teacher_seconds,
                "perf/update_s": time.perf_counter() - collected,
            }
        )
        return obs, metrics

    # -- rollout -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def _collect(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[dict[str, Any], Obs]:
        """T decisions per env. Each executes the first `act_steps` actions of its chunk; its reward is their
        discounted sum up to the first episode end (γ^i for the i-th step; time-outs bootstrapped from the true
        final observation), and GAE then discounts decisions by γ^act_steps."""
        cfg, policy, critic = self.config, self.policy, self.critic
        stored: dict[str, list] = {"obs": [], "critic_obs": [], "chain": [], "value": [], "reward": [], "done": []}
        teacher, labels = self.teacher, []
        for _ in range(cfg.rollout_steps):
            policy_obs = self.history.push(obs)
            if teacher is not None:
                asked = time.perf_counter()
                labels.append(teacher.decide(obs))
                self._teacher_seconds += time.perf_counter() - asked
            sample = policy.sample(policy_obs)
            critic_obs = select(obs, self.critic_keys)
            value = critic(critic_obs)
            total, done, discount = torch.zeros_like(value), torch.zeros_like(value, dtype=torch.bool), 1.0
            for i in range(self.act_steps):
                stepped = time.perf_counter()
                next_obs, reward, terminated, truncated, info = env.step(sample.action[:, i])
                self._sim_seconds += time.perf_counter() - stepped
                on_step(info)
                ended = terminated | truncated
                reward = self.reward_scaler(reward, ended)
                if truncated.any():  # bootstrap time-outs from the true last observation
                    final = {k: v[truncated] for k, v in select(info["final_obs"], self.critic_keys).items()}
                    reward = reward.clone()
                    reward[truncated] += cfg.gamma * critic(final)
                total += discount * reward * ~done  # steps after an episode end belong to no decision
                done |= ended
                discount *= cfg.gamma
                self.history.restart(ended)
                obs = next_obs
                inside = i < self.act_steps - 1  # the next step still belongs to this decision
                if inside:
                    self.history.push(obs)
                if teacher is not None:
                    teacher.stepped(ended, obs if inside else None)
            items = (select(policy_obs, set(policy.obs_keys)), critic_obs, sample.chain, value, total, done)
            for key, item in zip(stored, items, strict=True):
                stored[key].append(item)
        batch = {key: torch.stack(items) for key, items in stored.items() if key not in ("obs", "critic_obs", "chain")}
        for key in ("obs", "critic_obs", "chain"):
            if isinstance(stored[key][0], torch.Tensor):
                batch[key] = torch.stack(stored[key])
            else:
                batch[key] = {k: torch.stack([o[k] for o in stored[key]]) for k in stored[key][0]}
        batch["next_value"] = critic(select(obs, self.critic_keys))
        if labels:
            batch["teacher_action"] = torch.stack(labels)
        return batch, obs

    # -- update ------------------------------------------------------------------------------------------

    def _set_learning_rate(self) -> None:
        if not self.config.anneal_lr:
            return
        fraction = max(0.0, 1.0 - self.iteration / max(1, self.total_iterations))
        for group, base in zip(self.optimizer.param_groups, (self.config.actor_lr, self.config.critic_lr), strict=True):
            group["lr"] = base * fraction

    def _update(self, batch: dict[str, Any]) -> dict[str, float]:
        cfg, policy, critic = self.config, self.policy, self.critic
        gamma = cfg.gamma**self.act_steps  # per decision
        advantages, returns = gae(
            batch["reward"], batch["value"], batch["done"], batch["next_value"], gamma, cfg.gae_lambda
        )
        keep = None
        if cfg.advantage == "grpo":
            advantages, valid = group_relative_advantages(batch["reward"], batch["done"], cfg.group_size)
            keep = valid.reshape(-1)
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731  [T, N, ...] -> [T·N, ...]
        obs = {k: flat(v) for k, v in batch["obs"].items()}
        critic_obs = {k: flat(v) for k, v in batch["critic_obs"].items()}
        chain, old_value = _map(flat, batch["chain"]), flat(batch["value"])
        advantages, returns = flat(advantages), flat(returns)
        teacher_action = flat(batch["teacher_action"]) if "teacher_action" in batch else None
        # fold this rollout into the normalisers first, then rescore it, so the first ratio is exactly 1
        if cfg.update_policy_normalizer is not False:  # null outside a runner: yes
            policy.update_normalizer(obs)
        critic.normalizer.update(critic_obs[cfg.critic_obs_key])
        if cfg.bc_coef > 0 and self.anchor is None:
            self.anchor = copy.deepcopy(policy).eval().requires_grad_(False)
        if keep is not None:  # GRPO: only decisions whose episode finished in this rollout
            obs, critic_obs, chain = _rows(obs, keep), _rows(critic_obs, keep), _take(chain, keep)
            old_value, advantages, returns = old_value[keep], advantages[keep], returns[keep]
            teacher_action = None if teacher_action is None else teacher_action[keep]
        # computed once, not once per epoch: what the frozen parts (a VLA's frozen backbone) make of the observations
        anchor_obs = self.anchor.precompute_frozen(obs) if self.anchor is not None else None
        obs = policy.precompute_frozen(obs)
        size = len(advantages)
        with torch.no_grad():
            old_log_prob = torch.cat([self._score(_rows(obs, i), _take(chain, i))[0] for i in _chunks(size, 8192)])
        minibatch = max(1, size // cfg.minibatches)
        names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "bc_loss", "distill")
        totals = dict.fromkeys(names, 0.0)
        updates, epochs_run = 0, 0
        for _ in range(cfg.epochs if size else 0):
            epochs_run += 1
            order = torch.randperm(size)
            kl_epoch = []
            for start in range(0, size - minibatch + 1, minibatch):
                index = order[start : start + minibatch]
                stats = self._minibatch(
                    _rows(obs, index),
                    _rows(critic_obs, index),
                    _take(chain, index),
                    old_log_prob[index],
                    advantages[index],
                    returns[index],
                    old_value[index],
                    None if anchor_obs is None else _rows(anchor_obs, index),
                    None if teacher_action is None else teacher_action[index],
                )
                for key in totals:
                    totals[key] += stats[key]
                kl_epoch.append(stats["approx_kl"])
                updates += 1
            if cfg.target_kl is not None and sum(kl_epoch) / len(kl_epoch) > cfg.target_kl:
                break
        metrics = {f"loss/{k}": v / max(1, updates) for k, v in totals.items()}
        residual = (returns - old_value).var() / returns.var().clamp_min(1e-8)
        metrics.update(
            {
                "loss/epochs": float(epochs_run),
                "loss/explained_variance": float(1 - residual),
                "loss/actor_lr": self.optimizer.param_groups[0]["lr"],
                "loss/decisions": float(size),
            }
        )
        if teacher_action is None:
            del metrics["loss/distill"]
        else:
            metrics["loss/distill_weight"] = self.teacher_weight(self.iteration)
        return metrics

    def _score(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities [B, m] of the executed actions of each chunk, whole chain (m = 1) or per trainable
        step (m = n, each the mean over its elements, as DPPO), and the entropy [B]."""
        cfg = self.config
        elements, entropy = self.policy.step_log_probs(obs, chain)
        elements = elements[:, :, : self.act_steps]  # actions that were never executed earned no reward
        if cfg.log_prob_clamp is not None:
            elements = elements.clamp(*cfg.log_prob_clamp)
        if cfg.ratio == "per_step":
            return elements.mean((2, 3)), entropy
        return elements.sum((1, 2, 3))[:, None], entropy

    def _minibatch(
        self,
        obs: Obs,
        critic_obs: Obs,
        chain: Chain,
        old_log_prob,
        advantages,
        returns,
        old_value,
        anchor_obs,
        teacher_action,
    ) -> dict[str, float]:
        cfg = self.config
        log_prob, entropy = self._score(obs, chain)
        # bounded before exp: a std that collapsed within the update makes log-ratios of hundreds of nats, whose exp
        # overflows float32 and turns the gradient into NaN; outside the bound the ratio is clipped anyway
        log_ratio = (log_prob - old_log_prob).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        ratio = log_ratio.exp()  # [B, m]
        if cfg.normalize_advantages and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        weight, clip = denoising_schedules(ratio.shape[1], cfg.denoising_discount, cfg.clip_ratio, cfg.clip_ratio_first)
        advantages = advantages[:, None] * weight
        policy_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        value = self.critic(critic_obs)
        value_loss = (value - returns) ** 2
        if cfg.clip_value is not None:
            clipped = old_value + (value - old_value).clamp(-cfg.clip_value, cfg.clip_value)
            value_loss = torch.max(value_loss, (clipped - returns) ** 2)
        value_loss = 0.5 * value_loss.mean()
        loss = cfg.value_coef * value_loss
        bc_loss = torch.zeros(())
        if self.iteration >= cfg.critic_warmup_iterations:  # no policy gradient at all while the critic warms up
            loss = loss + policy_loss - cfg.entropy_coef * entropy.mean()
            if self.anchor is not None:
                with torch.no_grad():
                    anchor_action = self.anchor.act(anchor_obs)
                bc_loss = self.policy.bc_loss(obs, anchor_action)
                loss = loss + cfg.bc_coef * bc_loss
        distill = torch.zeros(())
        if teacher_action is not None:  # supervised, so from the first iteration on, critic warm-up or not
            distill = self.teacher_loss(obs, teacher_action)
            loss = loss + self.teacher_weight(self.iteration) * distill
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
        nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # k3 estimator (Schulman, "Approximating KL")
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return {
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy.mean().detach()),
            "approx_kl": float(approx_kl),
            "clip_fraction": float(clip_fraction),
            "bc_loss": float(bc_loss.detach()),
            "distill": float(distill.detach()),
        }

    # -- checkpoints -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "iteration": self.iteration,
            "history": self.history.state_dict(),
            "anchor": None if self.anchor is None else self.anchor.state_dict(),
            "teacher": None if self.teacher is None else self.teacher.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self.iteration = state["iteration"]
        self.history.load_state_dict(state["history"])
        if self.teacher is not None:
            self.teacher.load_state_dict(state["teacher"])
        if state.get("anchor") is not None:
            self.anchor = copy.deepcopy(self.policy).eval().requires_grad_(False)
            self.anchor.load_state_dict(state["anchor"])


def denoising_schedules(
    steps: int, discount: float, clip_last: float, clip_first: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantage weights and clip ε [steps] of the per-step ratios of a decision, noisiest step first (DPPO):
    weights discount^(steps from the last); ε rising exponentially (rate 3) from `clip_first` to `clip_last`,
    or `clip_last` throughout when `clip_first` is None. One ratio (steps = 1) gets weight 1 and `clip_last`."""
    from_last = torch.arange(steps - 1, -1, -1, dtype=torch.float32)
    weight = discount**from_last
    clip = torch.full((steps,), clip_last)
    if clip_first is not None and steps > 1:
        rate, fraction = 3.0, 1 - from_last / (steps - 1)  # 0 at the noisiest step, 1 at the last
        rise = (torch.exp(rate * fraction) - 1) / (math.exp(rate) - 1)
        clip = clip_first + (clip_last - clip_first) * rise
    return weight, clip


def _rows(obs: Obs, index: Any) -> Obs:
    return {k: v[index] for k, v in obs.items()}


def _map(fn: Any, chain: Chain) -> Chain:
    """Apply fn to a chain tensor or to every tensor of a dict chain."""
    return {k: fn(v) for k, v in chain.items()} if isinstance(chain, dict) else fn(chain)


def _take(chain: Chain, index: Any) -> Chain:
    """Rows `index` of a chain tensor or of every tensor of a dict chain."""
    return _map(lambda x: x[index], chain)


def _chunks(size: int, chunk: int) -> list[slice]:
    return [slice(i, min(i + chunk, size)) for i in range(0, size, chunk)]


def construct_ppo(config: RunConfig, env: VecEnv, policy: Policy) -> PPO:
    """PPO for `policy` in `env`, its learning-rate schedule spanning runner.total_env_steps."""
    ppo: PPOConfig = config.algo
    steps_per_iteration = env.num_envs * ppo.rollout_steps * policy.act_steps
    iterations = math.ceil(config.runner.total_env_steps / steps_per_iteration)
    critic_dim = env.obs_shapes[ppo.critic_obs_key][0]
    return PPO(policy, critic_dim, env.num_envs, ppo, iterations)


register_algorithm(
    "ppo", PPOConfig, AlgorithmEntry(construct_ppo, train_only_last_steps, check_run, normalizer_default)
)
