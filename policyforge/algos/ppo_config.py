"""PPO's hyper-parameters, including the options that make it DPPO, ReinFlow, Flow-SDE/GRPO or residual RL, and
the checks and defaults a run applies to them at load (its registry entry's `check`, `fill_defaults` and
`prepare_policy`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from policyforge.algos.registry import AlgoConfig
from policyforge.config import ConfigError, check, check_bounds, check_in, check_sizes
from policyforge.policies.networks import MAX_WIDTH, Activation

if TYPE_CHECKING:
    from policyforge.algos.runner import RunConfig
    from policyforge.policies.base import Policy

MAX_ROLLOUT_STEPS = 10_000
"""Most decisions per env per iteration: 10× the longest episode of any task here (quadruped-walk: 1000 steps);
more is a typo that would fill memory before the first update."""
MAX_LOSS_WEIGHT = 1000.0
"""Largest weight of a loss term (value, entropy, BC) beside the policy loss's 1 (PPO uses 0.5 and 0.01): heavier
terms drown the policy gradient, and near float32's limit their gradients overflow to NaN weights."""
MAX_EPOCHS = 1000
"""Most passes over one rollout (PPO uses 3-20; far more only overfits one batch and stalls the run)."""


@dataclasses.dataclass
class PPOConfig(AlgoConfig):
    """PPO hyper-parameters (`algo: {class: ppo, ...}`; registered in algos/ppo.py)."""

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
        check_in(self.rollout_steps, "rollout_steps", f"[1, {MAX_ROLLOUT_STEPS}]")
        check_in(self.epochs, "epochs", f"[1, {MAX_EPOCHS}]")
        check_in(self.minibatches, "minibatches", "[1, inf)")
        check_in(self.actor_lr, "actor_lr", "(0, 1)")
        check_in(self.critic_lr, "critic_lr", "(0, 1)")
        check_in(self.gamma, "gamma", "(0, 1]")
        check_in(self.gae_lambda, "gae_lambda", "[0, 1]")
        check_in(self.clip_ratio, "clip_ratio", "(0, inf)")
        check_in(self.clip_value, "clip_value", "(0, inf)", "null turns value clipping off")
        check_in(self.value_coef, "value_coef", f"[0, {MAX_LOSS_WEIGHT:g}]")
        check_in(self.entropy_coef, "entropy_coef", f"[0, {MAX_LOSS_WEIGHT:g}]")
        check_in(self.max_grad_norm, "max_grad_norm", "(0, inf)", "a clip ≤ 0 zeroes or reverses every gradient")
        check_in(self.target_kl, "target_kl", "(0, inf)", "null: never stop early")
        check_sizes(self.critic_hidden, "critic_hidden", MAX_WIDTH)
        key = self.critic_obs_key
        check(key in ("critic", "policy"), "critic_obs_key", f"must be 'critic' (privileged) or 'policy', got {key!r}")
        check_in(self.critic_warmup_iterations, "critic_warmup_iterations", "[0, inf)")
        check_in(self.denoising_discount, "denoising_discount", "(0, 1]")
        check_in(self.clip_ratio_first, "clip_ratio_first", f"(0, clip_ratio={self.clip_ratio}]", "or null")
        check_bounds(self.log_prob_clamp, "log_prob_clamp", "[-inf, inf]", strict=True)
        check_in(self.trainable_steps, "trainable_steps", "[1, inf)", "or null: every step")
        check_in(self.bc_coef, "bc_coef", f"[0, {MAX_LOSS_WEIGHT:g}]")
        check_in(self.group_size, "group_size", "[2, inf)", "episodes to compare")


def train_only_last_steps(config: RunConfig, policy: Policy) -> None:
    """`algo.trainable_steps`: the earlier steps of the policy's chain run a frozen copy (DPPO's K')."""
    if config.algo.trainable_steps is not None:
        try:
            policy.train_only_last_steps(config.algo.trainable_steps)
        except ValueError as err:
            raise ConfigError("algo.trainable_steps", str(err)) from None


def check_run(config: RunConfig) -> None:
    """Settings of the policy section that PPO's rescoring, minibatches or trainable steps rule out."""
    ppo: PPOConfig = config.algo
    decisions = config.sim.num_envs * ppo.rollout_steps
    check_in(ppo.minibatches, "algo.minibatches", f"[1, sim.num_envs × algo.rollout_steps={decisions}]")
    try:
        config.policy.check_for_rl()
    except ConfigError as err:
        raise ConfigError(f"policy.{err.path}", err.reason) from None
    if ppo.trainable_steps is not None:
        steps, field = config.policy.chain_steps(), config.policy.steps_field
        if not field:
            why = f"a {config.policy.tag} policy's chain has a single stochastic step; null: every step"
            check_in(ppo.trainable_steps, "algo.trainable_steps", "[1, 1]", why)
        else:
            check_in(ppo.trainable_steps, "algo.trainable_steps", f"[1, policy.{field}={steps}]", "or null: every step")


def normalizer_default(config: RunConfig) -> None:
    """`algo.update_policy_normalizer: null`: a new part's statistics start empty and follow the rollouts; a loaded
    policy's (init_policy, not just a residual's base) stay as trained."""
    if config.algo.update_policy_normalizer is None:
        config.algo.update_policy_normalizer = not config.init_policy or bool(config.policy.pretrained_part)
