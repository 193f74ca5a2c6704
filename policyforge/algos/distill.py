"""Teacher → student distillation (`algo: {class: distill, teacher: RUN, mode: ...}`), one algorithm for a VLA →
compact expert and for a privileged teacher → deployable student, written against the policy contract only.

The teacher is any trained run's policy, frozen, evaluated in this process on the same batched observations
through its own keys, at its own decision rate (`teacher.TeacherLabels`). The student is the run's `policy`
section, on its own keys. Modes:

    rpd     PPO on the task reward plus λ · the student's `bc_loss` to the teacher's actions, or the squared error
            of its deterministic action (`distill_loss`; Refined Policy Distillation);
            λ = distill_coef · distill_decay^iteration; every PPO option applies
    dagger  the student drives (the teacher's action executed with probability β = beta · beta_decay^iteration,
            per env and decision), every visited observation is labelled with the teacher's actions and kept;
            the student's `bc_loss` on the aggregate (Ross et al. 2011)
    bc      the teacher drives (β = 1): behaviour cloning from teacher rollouts, the baseline of the two

The student's chunk may not be longer than the teacher's; both act in the same action space (checked when the
teacher loads, naming both).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from policyforge.algos.base import Algorithm, StepCallback, select
from policyforge.algos.ppo import PPO
from policyforge.algos.ppo_config import PPOConfig, check_run, normalizer_default, train_only_last_steps
from policyforge.algos.registry import AlgorithmEntry, register_algorithm
from policyforge.algos.replay import CircularBuffer
from policyforge.algos.teacher import TeacherLabels, load_teacher
from policyforge.config import check, check_in
from policyforge.policies.base import Obs, Policy
from policyforge.sims.vec_env import VecEnv

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig

MAX_BUFFER_SIZE = 2**26
"""Most labelled decisions kept (DAgger's aggregate): each holds the student's observation, images included."""


@dataclasses.dataclass
class DistillConfig(PPOConfig):
    """Distillation from a trained run's policy (`algo: {class: distill, ...}`); the PPO fields serve mode rpd
    (rollout_steps, actor_lr and max_grad_norm serve every mode)."""

    reads_images = True
    teacher: str = ""
    """The teacher: a run directory (any policy class; a VLA, a privileged PPO run, a diffusion or flow run)."""
    teacher_checkpoint: str = "best"
    """Which of the teacher run's checkpoints: best, latest, N (steps) or a file."""
    mode: Literal["rpd", "dagger", "bc"] = "dagger"
    """rpd: PPO + distillation term; dagger: the student drives, the teacher labels; bc: the teacher drives."""
    distill_coef: float = 1.0
    """rpd: λ, the weight of the distillation term at the first iteration."""
    distill_decay: float = 1.0
    """rpd: λ is multiplied by this every iteration (1: constant)."""
    distill_loss: Literal["bc_loss", "action_mse"] = "bc_loss"
    """rpd: the pull toward the teacher's actions: the student's own `bc_loss` (a Gaussian's log-likelihood, which
    also narrows its std), or RPD's squared error of the student's deterministic action (`act`) to the teacher's."""
    beta: float = 1.0
    """dagger: probability that the teacher's action is executed at the first iteration (DAgger's β_0)."""
    beta_decay: float = 0.5
    """dagger: β is multiplied by this every iteration."""
    batch_size: int = 1024
    """dagger, bc: labelled decisions per gradient step."""
    updates_per_iteration: int = 50
    """dagger, bc: gradient steps after each rollout."""
    buffer_size: int = 200_000
    """dagger, bc: labelled decisions kept (the oldest go first)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.distill_coef, "distill_coef", "[0, 1000]")
        check_in(self.distill_decay, "distill_decay", "(0, 1]")
        check_in(self.beta, "beta", "[0, 1]")
        check_in(self.beta_decay, "beta_decay", "[0, 1]")
        check_in(self.batch_size, "batch_size", "[1, inf)")
        check_in(self.updates_per_iteration, "updates_per_iteration", "[1, inf)")
        check_in(self.buffer_size, "buffer_size", f"[1, {MAX_BUFFER_SIZE}]", "it holds observations, images included")


class DAgger(Algorithm):
    """DAgger (β-mixture rollouts labelled by the teacher, aggregated) and BC from teacher rollouts (β = 1)."""

    def __init__(self, policy: Policy, teacher: TeacherLabels, num_envs: int, config: DistillConfig):
        self.policy, self.teacher, self.config = policy, teacher, config
        self.history = policy.input_state(num_envs)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=config.actor_lr)
        self.buffer = CircularBuffer(config.buffer_size)
        self.iteration = 0

    def steps_per_iteration(self, env: VecEnv) -> int:
        return env.num_envs * self.config.rollout_steps * self.policy.act_steps

    def beta(self) -> float:
        """The probability that the teacher's actions are executed in this iteration's rollout."""
        cfg = self.config
        return 1.0 if cfg.mode == "bc" else cfg.beta * cfg.beta_decay**self.iteration

    def iterate(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[Obs, dict[str, float]]:
        start = time.perf_counter()
        self.policy.eval()
        rows, obs, metrics = self._collect(env, obs, on_step)
        collected = time.perf_counter()
        self.buffer.add(rows)
        if self.config.update_policy_normalizer is not False:
            self.policy.update_normalizer({k: v for k, v in rows.items() if k != "teacher_action"})
        metrics.update(self._learn())
        self.iteration += 1
        acting = collected - start - metrics["perf/sim_s"] - metrics["perf/teacher_s"]
        metrics.update({"perf/act_s": acting, "perf/update_s": time.perf_counter() - collected})
        return obs, metrics

    @torch.no_grad()
    def _collect(self, env: VecEnv, obs: Obs, on_step: StepCallback) -> tuple[dict[str, torch.Tensor], Obs, dict]:
        """Decisions of the β-mixture, each labelled with the teacher's next H_s actions: (rows of the student's
        inputs and `teacher_action` [T·N, H_s, A], the latest observation, rollout metrics)."""
        policy, teacher, act_steps, beta = self.policy, self.teacher, self.policy.act_steps, self.beta()
        inputs, labels, error, teacher_time, sim_time = [], [], 0.0, 0.0, 0.0
        for _ in range(self.config.rollout_steps):
            policy_obs = self.history.push(obs)
            asked = time.perf_counter()
            label = teacher.decide(obs)
            teacher_time += time.perf_counter() - asked
            action = policy.act(policy_obs)
            error += float((action - label).square().mean())
            drive = torch.rand(len(label)) < beta
            action = torch.where(drive[:, None, None], label, action)
            inputs.append(select(policy_obs, set(policy.obs_keys)))
            labels.append(label)
            for i in range(act_steps):
                stepped = time.perf_counter()
                obs, _, terminated, truncated, info = env.step(action[:, i])
                sim_time += time.perf_counter() - stepped
                on_step(info)
                ended = terminated | truncated
                self.history.restart(ended)
                inside = i < act_steps - 1
                if inside:
                    self.history.push(obs)
                teacher.stepped(ended, obs if inside else None)
        rows = {k: torch.cat([row[k] for row in inputs]) for k in inputs[0]}
        rows["teacher_action"] = torch.cat(labels)
        metrics = {
            "distill/beta": beta,
            "distill/action_mse": error / self.config.rollout_steps,  # the student's act vs the teacher's label
            "perf/teacher_s": teacher_time,
            "perf/sim_s": sim_time,
        }
        return rows, obs, metrics

    def _learn(self) -> dict[str, float]:
        """`updates_per_iteration` gradient steps of the student's `bc_loss` on uniform batches of the aggregate."""
        cfg, total = self.config, 0.0
        self.policy.train()
        for _ in range(cfg.updates_per_iteration):
            rows = self.buffer.sample(cfg.batch_size)
            label = rows.pop("teacher_action")
            loss = self.policy.bc_loss(rows, label)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
            self.optimizer.step()
            total += float(loss.detach())
        self.policy.eval()
        return {"loss/distill": total / cfg.updates_per_iteration, "distill/labelled": float(self.buffer.size)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "buffer": self.buffer.state_dict(),
            "history": self.history.state_dict(),
            "teacher": self.teacher.state_dict(),
            "iteration": self.iteration,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.load_state_dict(state["buffer"])
        self.history.load_state_dict(state["history"])
        self.teacher.load_state_dict(state["teacher"])
        self.iteration = state["iteration"]


def construct_distill(config: RunConfig, env: VecEnv, policy: Policy) -> Algorithm:
    """The mode's algorithm for the student `policy` in `env`, its teacher loaded from `algo.teacher`."""
    cfg: DistillConfig = config.algo
    teacher = TeacherLabels(load_teacher(cfg.teacher, cfg.teacher_checkpoint, env), policy, env)
    if cfg.mode != "rpd":
        return DAgger(policy, teacher, env.num_envs, cfg)
    steps_per_iteration = env.num_envs * cfg.rollout_steps * policy.act_steps
    iterations = math.ceil(config.runner.total_env_steps / steps_per_iteration)
    critic_dim = env.obs_shapes[cfg.critic_obs_key][0]
    weight = lambda iteration: cfg.distill_coef * cfg.distill_decay**iteration  # noqa: E731
    pull = teacher_loss(policy, cfg.distill_loss)
    return PPO(policy, critic_dim, env.num_envs, cfg, iterations, teacher, weight, pull)


def teacher_loss(policy: Policy, kind: str) -> Callable[[Obs, torch.Tensor], torch.Tensor]:
    """RPD's pull of the student toward the teacher's actions [B, H_s, A] (`DistillConfig.distill_loss`)."""
    if kind == "bc_loss":
        return policy.bc_loss

    def action_mse(obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        return (policy.act(obs)[:, : actions.shape[1]] - actions).square().mean()

    return action_mse


def check_distill(config: RunConfig) -> None:
    """A teacher is named; RPD trains the student with PPO, so PPO's checks of the policy section apply."""
    check(bool(config.algo.teacher), "algo.teacher", "give the teacher's run directory (algo.teacher=runs/NAME)")
    if config.algo.mode == "rpd":
        check_run(config)


ENTRY = AlgorithmEntry(construct_distill, train_only_last_steps, check_distill, normalizer_default)
register_algorithm("distill", DistillConfig, ENTRY)
