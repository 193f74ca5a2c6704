"""PPO's hyper-parameters, including the options that make it DPPO, ReinFlow, Flow-SDE/GRPO or residual RL."""

from __future__ import annotations

import dataclasses
from typing import Literal

from policyforge.config import check
from policyforge.policies.networks import Activation


@dataclasses.dataclass
class PPOConfig:
    """PPO hyper-parameters."""

    rollout_steps: int = 32
    """Decisions per environment per iteration (T); an iteration is N × T environment steps."""
    epochs: int = 5
    """Passes over each rollout."""
    minibatches: int = 4
    """Minibatches per pass."""
    actor_lr: float = 3e-4
    """Adam learning rate of the policy."""
    critic_lr: float = 3e-4
    """Adam learning rate of the value function."""
    anneal_lr: bool = False
    """Decay both learning rates linearly to zero over the run."""
    gamma: float = 0.99
    """Discount per decision."""
    gae_lambda: float = 0.95
    """GAE λ."""
    clip_ratio: float = 0.2
    """Policy ratio clip ε."""
    clip_value: float | None = 0.2
    """Clip value updates to ±this around the rollout values (in scaled-return units); null: no clipping."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip of each network."""
    target_kl: float | None = 0.05
    """Stop the update's epochs once the approximate KL to the rollout policy exceeds this; null: never."""
    normalize_advantages: bool = True
    """Standardise advantages per minibatch."""
    scale_rewards: bool = True
    """Divide rewards by the running std of the discounted return."""
    critic_hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256])
    """Hidden sizes of the value network."""
    critic_activation: Activation = "elu"
    """Activation of the value network."""
    critic_warmup_iterations: int = 0
    """Iterations at the start that train only the value function (fine-tuning a pre-trained policy with a
    critic that starts from scratch)."""
    update_policy_normalizer: bool | None = None
    """Fold rollout observations into the policy's observation normaliser. null: yes, unless the run fine-tunes a
    pre-trained policy (init_policy), whose inputs must keep the scale it was trained with (updating them took a
    BC flow policy on arm-lift-cube from 82% to 0% success within 13 iterations; frozen, PPO raised it to 94%)."""
    critic_obs_key: str = "critic"
    """Observation the value function reads (`critic`: privileged state; `policy`: symmetric)."""
    trainable_steps: int | None = None
    """Fine-tune only the last this many sampling steps of a diffusion or flow policy (DPPO's K'); the earlier
    ones run on a frozen copy of the policy it started from. null: every step."""
    ratio: Literal["chain", "per_step"] = "chain"
    """`chain`: one ratio per decision from the whole chain's log-probability (Gaussian, ReinFlow, Flow-SDE,
    residual); `per_step`: one ratio per trainable denoising step, from that step's mean per-element
    log-density (DPPO)."""
    denoising_discount: float = 1.0
    """γ_denoise (DPPO: 0.99, per_step): the advantage at the trainable step j steps before the last is weighted
    by γ_denoise^j, so the steps that shape the final action carry the most weight."""
    clip_ratio_first: float | None = None
    """DPPO's clip schedule (per_step): ε at the noisiest trainable step, rising exponentially (rate 3) to
    `clip_ratio` at the last. null: `clip_ratio` at every step."""
    log_prob_clamp: tuple[float, float] | None = None
    """Clamp every per-element log-density to [min, max] before forming ratios (DPPO: [-5, 2]): a few extreme
    elements cannot dominate a ratio. null: no clamp."""
    bc_coef: float = 0.0
    """Weight of a behaviour-cloning term to the frozen initial policy: the policy's own `bc_loss` on that
    policy's deterministic actions (DPPO's BC regulariser; ReinFlow's W2 term in spirit). 0: off."""
    advantage: Literal["gae", "grpo"] = "gae"
    """`gae`, or `grpo`: group-relative episode returns (Flow-GRPO / πRL), no critic in the advantage; see
    `algos.gae.group_relative_advantages`."""
    group_size: int = 8
    """Envs per GRPO group (advantage: grpo); must divide num_envs."""

    def __post_init__(self) -> None:
        for name in ("rollout_steps", "epochs", "minibatches"):
            check(getattr(self, name) >= 1, name, f"must be ≥ 1, got {getattr(self, name)}")
        check(0 < self.gamma <= 1, "gamma", f"must be in (0, 1], got {self.gamma}")
        check(0 <= self.gae_lambda <= 1, "gae_lambda", f"must be in [0, 1], got {self.gae_lambda}")
        check(self.clip_ratio > 0, "clip_ratio", f"must be > 0, got {self.clip_ratio}")
        check(
            self.critic_warmup_iterations >= 0,
            "critic_warmup_iterations",
            f"must be ≥ 0, got {self.critic_warmup_iterations}",
        )
        check(self.actor_lr > 0 and self.critic_lr > 0, "actor_lr", "learning rates must be > 0")
        discount = self.denoising_discount
        check(0 < discount <= 1, "denoising_discount", f"must be in (0, 1], got {discount}")
        check(
            self.clip_ratio_first is None or 0 < self.clip_ratio_first <= self.clip_ratio,
            "clip_ratio_first",
            f"must be in (0, clip_ratio={self.clip_ratio}] or null, got {self.clip_ratio_first}",
        )
        if self.log_prob_clamp is not None:
            low, high = self.log_prob_clamp
            check(low < high, "log_prob_clamp", f"must be [min, max] with min < max, got {list(self.log_prob_clamp)}")
        check(
            self.trainable_steps is None or self.trainable_steps >= 1,
            "trainable_steps",
            f"must be ≥ 1 or null, got {self.trainable_steps}",
        )
        check(self.bc_coef >= 0, "bc_coef", f"must be ≥ 0, got {self.bc_coef}")
        check(self.group_size >= 2, "group_size", f"must be ≥ 2 (episodes to compare), got {self.group_size}")
