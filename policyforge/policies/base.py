"""The policy contract every policy class implements, so that one PPO (and every other algorithm) serves all.

    sample(obs) -> Sample                 action [B, H, A], the stochastic chain that produced it, log-prob [B]
    step_log_probs(obs, chain)            rescore a stored chain under the current parameters, per trainable
        -> (elements, entropy)            stochastic step and action element: [B, n, H, A], and entropy [B]
    log_prob(obs, chain) -> (lp, ent)     the same summed over steps and elements: [B], [B]
    act(obs) -> action [B, H, A]          the deterministic path: the same code as `sample` with noise off
    bc_loss(obs, actions [B, H, A])       the model's own supervised loss

and the rollout half, which is all an algorithm, evaluation, export or deployment may know of a policy:

    obs_keys                              the observation keys `act` reads (state, image, base action, ...)
    chunk_len, act_steps                  H actions per decision, of which the first act_steps are executed
    n_obs_steps                           T_o, observations of history per input (0: no history axis)
    input_state(num_envs)                 the per-env state kept between decisions (histories, caches)
    train_only_last_steps(k)              RL trains the last k stochastic steps of the chain (DPPO's K')
    load_pretrained(weights)              start from another run's weights (`init_policy`)

A policy class registers its config with `register_policy` (the run config's `policy: {class: NAME, ...}`
section); the config builds the policy for an env (`PolicyConfig.build`).

H is the action-chunk length (1 for single actions); actions are in [-1, 1]. The chain is a tensor or a dict of
tensors, batch first. Per-step, per-element log-densities let PPO score only the executed part of a chunk and
give each denoising step its own ratio (DPPO). Observations are the VecEnv's
dict; a policy reads `obs[policy.obs_key]` and normalises it inside itself, so exported graphs carry the
normaliser.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import torch
from torch import nn

from policyforge.config import Tagged
from policyforge.policies.history import InputState, ObservationHistory

Obs = dict[str, torch.Tensor]
IMAGE_KEY = "image"
"""Observation key of camera images [N, V, Hi, Wi, 3] uint8 (V cameras)."""
IMAGE_FEATURES_KEY = "image_features"
"""Key of what a frozen image encoder made of `image` (`Policy.frozen_image_features`), in its place."""
Chain = torch.Tensor | dict[str, torch.Tensor]
"""A policy's stochastic chain: a tensor or a dict of tensors, batch first."""


@dataclasses.dataclass
class Sample:
    """What `Policy.sample` returns."""

    action: torch.Tensor
    """[B, H, A] in [-1, 1]."""
    chain: Chain
    """The stochastic latents that produced the action (policy-specific shape, batch first)."""
    log_prob: torch.Tensor
    """[B] log-probability of the chain under the policy that sampled it."""


class Policy(nn.Module, abc.ABC):
    """Base class of every policy."""

    obs_key: str = "policy"
    """Observation key the policy reads."""
    action_dim: int
    """A."""
    chunk_len: int = 1
    """H, actions per decision."""
    act_steps: int = 1
    """Actions of each chunk executed before the policy decides again (≤ chunk_len)."""
    n_obs_steps: int = 0
    """T_o, observations in each input's history axis ([B, T_o, ...]); 0: no history axis ([B, ...])."""
    export_tolerance: float = 1e-5
    """Largest |exported − act| accepted when an export is checked."""

    @abc.abstractmethod
    def sample(self, obs: Obs, noise_scale: float = 1.0) -> Sample:
        """Draw actions; `noise_scale=0` is the deterministic path used by `act`."""

    @abc.abstractmethod
    def step_log_probs(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-densities [B, n, H, A] of the n trainable stochastic steps of stored chains, per action element,
        under the current parameters, and the entropy (or an estimate) [B]. Terms that do not depend on the
        parameters (a flow's N(0, I) start) are left out, here and in `Sample.log_prob`."""

    def log_prob(self, obs: Obs, chain: Chain) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability [B] and entropy [B] of stored chains under the current parameters."""
        elements, entropy = self.step_log_probs(obs, chain)
        return elements.sum((1, 2, 3)), entropy

    def act(self, obs: Obs) -> torch.Tensor:
        """Deterministic actions [B, H, A]: `sample` with the noise switched off."""
        return self.sample(obs, noise_scale=0.0).action

    noise_shape: tuple[int, int] | None = None
    """(H, A) of the noise a generative policy's sampler starts from (`act_from_noise`); None: not generative."""
    noise_bound: float = 3.0
    """Largest |noise| element a steering policy should choose: 3 std of the N(0, I) prior the sampler was trained
    from (DSRL bounds its noise-space actions likewise); beyond it the base sees starts it never learnt from."""

    def act_from_noise(self, obs: Obs, noise: torch.Tensor) -> torch.Tensor:
        """Deterministic actions [B, H, A] of the sampler started from `noise` [B, H, A] instead of a draw of its
        prior, the rest of the chain noiseless: what a steering policy acting in the noise space runs (DSRL). `act`
        is this from zero noise. Generative policies (diffusion, flow, VLA) only."""
        raise TypeError(
            f"{type(self).__name__} is not a generative policy: it has no starting noise to steer "
            "(steer a diffusion, flow or VLA policy)"
        )

    @abc.abstractmethod
    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """Supervised loss (scalar) of demonstrated actions [B, H, A]."""

    bc_privileged_key: str | None = None
    """The obs key of privileged state `bc_loss` also learns from (BC then gives each window the dataset's
    `observation.environment_state` under it); None: none."""

    def privileged_loss(self, obs: Obs) -> torch.Tensor:
        """The auxiliary loss (scalar) of `bc_loss` alone, on observations without actions (BC's simulated scenes,
        `algo.scene_frames`): the privileged state obs[bc_privileged_key] regressed from the rest."""
        raise ValueError(
            f"{type(self).__name__} learns from no privileged state (bc_privileged_key is None): give a VLA "
            "policy.privileged_aux_weight > 0, or set algo.scene_frames=0"
        )

    def update_normalizer(self, obs: Obs) -> None:
        """Fold a batch of observations into the policy's observation normaliser (if it has one)."""

    def frozen_image_features(self, images: torch.Tensor) -> torch.Tensor | None:
        """What the policy's image encoder makes of images [..., V, Hi, Wi, 3] uint8, when that encoder is frozen
        (so computing it once is exact): BC then trains on `obs[IMAGE_FEATURES_KEY]` instead of images. None (the
        default): no frozen image encoder."""
        return None

    def precompute_frozen(self, obs: Obs) -> Obs:
        """`obs` with the outputs of the policy's frozen parts in place of their inputs, computed once: PPO calls
        it before its epochs, so rescoring skips work whose result never changes. Exact: `step_log_probs` and
        `bc_loss` of the result equal those of `obs`. The default: `obs` unchanged."""
        return obs

    @abc.abstractmethod
    def example_obs(self, batch: int) -> Obs:
        """Zero observations of the shapes and dtypes `act` reads (export traces with them)."""

    @property
    def obs_keys(self) -> tuple[str, ...]:
        """The observation keys `act` reads, in the order of the exported graph's inputs."""
        return (self.obs_key,)

    def input_state(self, num_envs: int) -> InputState:
        """The per-env state that turns each env step's observations into this policy's inputs (by default the
        history of `obs_keys`, T_o = n_obs_steps; none without a history axis)."""
        return ObservationHistory(self.obs_keys, self.n_obs_steps, num_envs)

    def train_only_last_steps(self, count: int) -> None:
        """Let RL train only the last `count` stochastic steps of the chain; the earlier ones run a frozen copy of
        the current weights. Raises ValueError when the policy cannot (a single stochastic step)."""
        raise ValueError(f"a {type(self).__name__} has a single stochastic step: remove the setting (null)")

    def load_pretrained(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Start from a pre-trained policy's weights (a state dict). Raises ValueError naming the keys when they
        describe another architecture."""
        load_matching(self, weights)

    def export_spec(self) -> dict[str, Any]:
        """Input/output description stored beside exported graphs."""
        return {
            "obs_key": self.obs_key,
            "action_dim": self.action_dim,
            "chunk_len": self.chunk_len,
            "act_steps": self.act_steps,
            "n_obs_steps": self.n_obs_steps,
        }


def load_matching(module: nn.Module, weights: Mapping[str, torch.Tensor], optional: tuple[str, ...] = ()) -> None:
    """Load `weights` into `module`, all keys matching except those starting with `optional` (modules only
    fine-tuning adds, which a pre-trained policy may lack or carry); ValueError naming the keys otherwise."""
    own = module.state_dict()
    weights = {k: v for k, v in weights.items() if k in own or not k.startswith(optional)}
    try:
        missing, unexpected = module.load_state_dict(weights, strict=False)
    except RuntimeError as err:  # shapes differ
        raise ValueError(str(err).split("\n\t")[-1].strip()) from None
    mismatched = [k for k in missing if not k.startswith(optional)] + unexpected
    if mismatched:
        raise ValueError(f"keys {mismatched[:4]} do not match")


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What a policy is built for: the env's observations and actions."""

    obs_shapes: Mapping[str, tuple[int, ...]]
    """Shape of each observation key without the env axis, e.g. {"policy": (D,), "image": (V, H, W, 3)}."""
    action_dim: int
    """A."""

    @property
    def state_dim(self) -> int:
        """D, the policy observation's size."""
        return self.obs_shapes["policy"][0]


class PolicyConfig(Tagged, abc.ABC):
    """The run config's `policy` section: a registered policy class's config (`policy: {class: flow, ...}`)."""

    registry: ClassVar[dict[str, type[Tagged]]] = {}
    plugin_group: ClassVar[str] = "policyforge.policies"
    pretrained_part: ClassVar[str] = ""
    """A frozen part whose weights `init_policy` must give ("base" for a residual), beside a new trainable part;
    "" when init_policy, if given, holds the whole policy."""
    reads_images: ClassVar[bool] = True
    """Whether the class reads camera images when the env renders them (the Gaussian policy reads states only)."""
    steps_field: ClassVar[str] = ""
    """The field counting the chain's stochastic steps (PPO's trainable_steps counts these); "" for one step."""

    @abc.abstractmethod
    def build(self, env: EnvSpec) -> Policy:
        """The policy this config describes, for an env."""

    def chain_steps(self) -> int:
        """Stochastic steps of a sampled chain."""
        return getattr(self, self.steps_field) if self.steps_field else 1

    def check_for_rl(self) -> None:
        """Raise ConfigError for settings that RL fine-tuning (rescoring stored chains) cannot work with."""


C = TypeVar("C", bound=type[PolicyConfig])


def register_policy(name: str) -> Callable[[C], C]:
    """Class decorator registering a policy config class under `name` (the `class:` of a `policy` section)."""

    def register(config_class: C) -> C:
        if name in PolicyConfig.registry and PolicyConfig.registry[name] is not config_class:
            raise ValueError(f"policy class {name!r} is registered twice")
        config_class.tag = name
        PolicyConfig.registry[name] = config_class
        return config_class

    return register
