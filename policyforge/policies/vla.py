"""The vision-language-action policy (`policy: {class: vla}`): camera images + an instruction + proprioception →
a transformer prefix → a flow-matching action expert that attends to it (π0 / π0.5, Black et al. 2024-25), under
the sampler contract with the flow policy's exact chains.

How the instruction reaches the policy (the design): as an observation tensor, like everything else a policy reads,
so PPO, BC, evaluation, export and deployment work unchanged. `obs["instruction"]` holds the instruction's WordPiece
token ids int32 [B, 24] (`sims.instruction_obs`: `make_env` adds them to every env whose task draws instructions;
a dataset's `task` text and a deployment's instruction go through the same tokenizer). Ids, not features: they cost
96 bytes per env step in a rollout buffer (MiniLM's features would cost 36 KB) and they are what an exported graph
can take without a text runtime. Inside, the frozen all-MiniLM-L6-v2 (`policies.language`) turns ids into token
features [B, 24, 384] with a cache per distinct instruction, so the text encoder runs once per instruction, not per
step: rollouts, PPO epochs and BC epochs all hit the cache, and the cache is exact.

    obs["policy"] [B, T_o, D] float, obs["image"] [B, T_o, V, Hi, Wi, 3] uint8, obs["instruction"] [B, 24] int
        → prefix = VLABackbone(...)  once per decision                  [B, P, W + 1]   (`vla_networks`)
        → K Euler steps of ActionExpert(x, t, prefix)                   [B, H, A]

Chains: this is a `FlowPolicy` with other networks — the ReinFlow noise network (reading the pooled prefix) and the
Flow-SDE chain, `stochastic_steps: one`, frozen early steps, shortcut / MeanFlow training are the flow policy's own
code, so PPO's per-step ratios, GRPO advantages and residual RL apply unchanged.

Freezing: `freeze_backbone` freezes vision, language projection and prefix transformer, so RL trains only the action
expert and the noise network (πRL's setting for large VLAs); MiniLM is always frozen, EfficientNet-lite0 unless
`vision.train_pretrained`. What frozen parts compute is computed once (`precompute_frozen`, exact): the
instruction's features per distinct instruction (everywhere); with a frozen backbone the prefix of every decision of a
PPO batch once per update instead of once per epoch (29 KB a decision at the defaults); with a frozen image encoder
the image features of every frame of a BC dataset once (`frozen_image_features`), instead of at every sample of it.

Export: the text encoder goes INSIDE the graph: (state, image, instruction token ids) → action chunk. One
self-contained file whose inputs are all tensors, checked against `act` like every other policy; a deployment only
tokenizes its instruction (a dictionary lookup, `sims.instruction_obs.InstructionTokenizer`), and no second graph or
text runtime has to be kept in step with the policy. The cost is MiniLM's weights in the file (98 MB) and its forward
in every decision: onnxruntime runs a whole decision (MiniLM, prefix, 10 expert steps) in 14.6 ms at batch 1
(`policyforge bench vla-latency`), once per chunk of `act_steps` control steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from torch import nn

from policyforge.config import ConfigError, check, check_in, check_sizes
from policyforge.policies.base import IMAGE_FEATURES_KEY, EnvSpec, Obs, register_policy
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.flow import FlowChainConfig, FlowPolicy
from policyforge.policies.history import InputState, ObservationHistory
from policyforge.policies.language import InstructionEncoder
from policyforge.policies.networks import MAX_WIDTH
from policyforge.policies.normalizer import RunningNormalizer
from policyforge.policies.vla_networks import ActionExpert, MLPExpert, VisionConfig, VLABackbone, pooled
from policyforge.sims.instruction_obs import CLS_ID, INSTRUCTION_KEY, INSTRUCTION_TOKENS, SEP_ID

MAX_LAYERS = 24
"""Most transformer layers of the prefix or the expert (π0's expert has 18)."""
PRIVILEGED_KEY = "critic"
"""The privileged state the auxiliary loss regresses (the task's critic observation)."""
PREFIX_KEY, FROZEN_PREFIX_KEY = "prefix", "frozen_prefix"
"""Keys of `precompute_frozen`'s prefixes [B, P, W + 1] (the policy's, and its frozen steps' copy's)."""
IMAGE_BATCH = 256
"""Frames per pass when features or prefixes are precomputed (bounds the activations' memory)."""


@register_policy("vla")
@dataclasses.dataclass
class VLAConfig(FlowChainConfig):
    """A vision-language-action policy: transformer prefix + flow-matching action expert."""

    vision: VisionConfig = dataclasses.field(default_factory=VisionConfig)
    """Image tokens."""
    width: int = 128
    """W, the width of every prefix and expert token."""
    heads: int = 4
    """Attention heads (divides width)."""
    prefix_layers: int = 2
    """Transformer layers over [image tokens, language tokens, proprio token]."""
    expert: Literal["attention", "mlp"] = "attention"
    """The action expert: `attention` (π0's: action tokens attending to the prefix tokens) or `mlp` (the flow
    policy's MLP over the chunk, reading a linear readout of the normalised state and, with `estimate_token`, of the
    privileged head's estimate of the scene, else also the pooled prefix; `vla_networks.MLPExpert` says why)."""
    expert_layers: int = 2
    """Layers of the attention expert (each attends to the prefix and to the action tokens)."""
    expert_hidden: list[int] = dataclasses.field(default_factory=lambda: [256, 256, 256])
    """Hidden sizes of the MLP expert (expert: mlp)."""
    time_dim: int = 32
    """Size of the sinusoidal embeddings of t and delta."""
    normalize_state: bool = True
    """Normalise the proprioception with running statistics (fitted on the demonstrations for BC)."""
    language_film: bool = True
    """Modulate the image tokens by the instruction (FiLM, as RT-1 and BC-Z condition their image encoders) before
    the prefix transformer, so the named object stands out in the tokens themselves. Without it the prefix has to
    bind a colour word to a place by attention alone, which BC did not find: on two coloured squares whose named
    one's place is the action, the error stayed at the midpoint guess's (0.26) for 1,500 steps, and fell to 0.05
    with FiLM (tests/policies/test_vla.py::test_the_vla_grounds_the_named_object); on arm-instructed BC without
    FiLM reached 0% at 3,000 steps and shuffling the images between samples left its loss unchanged."""
    privileged_aux_weight: float = 0.0
    """BC only: weight of an auxiliary loss, the privileged simulator state (the dataset's
    `observation.environment_state`, the task's critic observation: object poses, the named cube's place) regressed
    from the pooled prefix, so what the images show of the named object is learnt from every frame rather than
    only from the frames whose action reveals it (0: off; the policy never reads that state when acting)."""
    estimate_token: bool = False
    """The action expert also reads the privileged head's estimate of the privileged state (object poses, the named
    cube's place: obs["critic"] as the auxiliary loss teaches it), a summary of the scene in the terms a
    state-based policy learns the task from: the attention expert as one more prefix token, the MLP expert in its
    readout (in place of the pooled prefix). Why: on arm-instructed, flow BC from that state reached
    50% in 3,000 steps of 64 while the VLA, whose auxiliary loss learnt the state from its images, stayed at 0%
    (BENCHMARKS.md, "VLA behaviour cloning"). BC trains the estimate with privileged_aux_weight > 0; RL keeps it
    as BC left it when the backbone is frozen."""
    freeze_backbone: bool = False
    """Freeze vision, language projection and prefix transformer (and the state estimate: `estimate_token`, and the
    MLP expert's readout; RL then trains the expert and noise network)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_in(self.width, "width", f"[8, {MAX_WIDTH}]")
        check_in(self.heads, "heads", f"[1, width={self.width}]")
        check(self.width % self.heads == 0, "heads", f"must divide width={self.width}, got {self.heads}")
        check_in(self.prefix_layers, "prefix_layers", f"[1, {MAX_LAYERS}]")
        check_in(self.expert_layers, "expert_layers", f"[1, {MAX_LAYERS}]")
        check_in(self.time_dim, "time_dim", f"[2, {MAX_WIDTH}]")
        check_in(self.privileged_aux_weight, "privileged_aux_weight", "[0, 100]", "0: off")
        check_sizes(self.expert_hidden, "expert_hidden", MAX_WIDTH)
        check(bool(self.expert_hidden), "expert_hidden", "the MLP expert needs at least one hidden layer")
        check(self.time_dim % 2 == 0, "time_dim", f"must be even, got {self.time_dim}")

    def build(self, env: EnvSpec) -> VLAPolicy:
        for key, what in ((IMAGE_KEY, "camera images: set sim.image.cameras"), (INSTRUCTION_KEY, "instructions")):
            if key not in env.obs_shapes:
                raise ConfigError(
                    "policy.class",
                    f"a vla policy reads obs[{key!r}] ({what}); this env has {sorted(env.obs_shapes)} "
                    "(instructions come from tasks that draw them, e.g. arm-instructed, as token ids when the "
                    "`vla` extra is installed: scripts/setup.sh)",
                )
        estimated = self.privileged_aux_weight or self.estimate_token
        privileged = env.obs_shapes.get(PRIVILEGED_KEY, (0,))[0] if estimated else 0
        for field, on in (
            ("privileged_aux_weight", self.privileged_aux_weight),
            ("estimate_token", self.estimate_token),
        ):
            if on and not privileged:
                raise ConfigError(
                    f"policy.{field}",
                    f"it estimates the privileged state obs[{PRIVILEGED_KEY!r}] and this env has none; turn it off",
                )
        return VLAPolicy(env.state_dim, env.action_dim, self, tuple(env.obs_shapes[IMAGE_KEY]), privileged)


class VLAPolicy(FlowPolicy):
    """π0-style VLA under the flow policy's chain machinery (module docstring)."""

    rl_only_modules = (*FlowPolicy.rl_only_modules, "privileged_head.", "privileged_normalizer.")  # BC's, not RL's

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: VLAConfig,
        image_shape: tuple[int, ...],
        privileged_dim: int = 0,
    ):
        """`privileged_dim`: size of obs["critic"] the privileged head estimates (privileged_aux_weight,
        estimate_token)."""
        text = InstructionEncoder(INSTRUCTION_TOKENS)
        vision, stride = config.vision.build()
        backbone = VLABackbone(
            state_dim,
            config.chunk.n_obs_steps,
            image_shape,
            text.out_dim,
            config.width,
            config.heads,
            config.prefix_layers,
            vision,
            stride,
            config.normalize_state,
            config.language_film,
        )
        horizon, width = config.chunk.horizon, config.width
        expert: nn.Module = (
            MLPExpert(horizon, action_dim, width, config.time_dim, config.expert_hidden, not config.estimate_token)
            if config.expert == "mlp"
            else ActionExpert(horizon, action_dim, width, config.heads, config.expert_layers, config.time_dim)
        )
        super().__init__(state_dim, action_dim, config, image_shape=image_shape, networks=(backbone, expert))
        self.text = text
        self.privileged_head: nn.Module | None = None
        self.estimate_proj: nn.Module | None = None
        """Privileged estimate [B, D_c] → the prefix's estimate token [B, W] (`estimate_token`, attention expert)."""
        self.readout_proj: nn.Module | None = None
        """[normalised state [B, T_o·D], estimate [B, D_c] (`estimate_token`)] → the MLP expert's readout token."""
        if config.privileged_aux_weight or config.estimate_token:
            self.privileged_normalizer = RunningNormalizer(privileged_dim)
            self.privileged_head = nn.Sequential(
                nn.Linear(config.width, config.width), nn.GELU(), nn.Linear(config.width, privileged_dim)
            )
        if config.expert == "mlp":
            read = config.chunk.n_obs_steps * state_dim + (privileged_dim if config.estimate_token else 0)
            self.readout_proj = nn.Linear(read, config.width)
        elif config.estimate_token:
            self.estimate_proj = nn.Linear(privileged_dim, config.width)
        if config.freeze_backbone:
            for module in (self.encoder, self.privileged_head, self.estimate_proj, self.readout_proj):
                if module is not None:
                    module.requires_grad_(False)
        self.export_tolerance = 1e-4  # MiniLM and the attention layers: onnxruntime's float sums round differently

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return (self.obs_key, IMAGE_KEY, INSTRUCTION_KEY)

    def input_state(self, num_envs: int) -> InputState:
        return _VLAInputs(self, num_envs)

    def encode(self, obs: Obs, frozen: bool = False) -> torch.Tensor:
        """The prefix [B, P, W + 1] (with the frozen copy's backbone if `frozen`); `precompute_frozen`'s when
        `obs` carries it."""
        if PREFIX_KEY in obs:
            return obs[FROZEN_PREFIX_KEY if frozen and self.base is not None else PREFIX_KEY]
        state = obs[self.obs_key]
        state = state[:, None] if state.dim() == 2 else state
        check(
            state.shape[1:] == (self.n_obs_steps, self.state_dim),
            f"obs.{self.obs_key}",
            f"expected [B, {self.n_obs_steps}, {self.state_dim}] (n_obs_steps, state), got {list(state.shape)}",
        )
        features = obs.get(IMAGE_FEATURES_KEY)
        image = obs.get(IMAGE_KEY)
        if image is None and features is None:
            raise ValueError("obs.image: a vla policy reads camera images (sim.image.cameras); none were given")
        if image is not None:
            image = image[:, None] if image.dim() == len(self.image_shape) + 1 else image
        if image is not None and (
            image.shape[1:] != (self.n_obs_steps, *self.image_shape) or image.dtype != torch.uint8
        ):
            raise ValueError(
                f"obs.image: expected uint8 [B, {self.n_obs_steps}, {', '.join(map(str, self.image_shape))}] "
                f"(history, views, height, width, rgb: the size the policy was built for), got {image.dtype} "
                f"{list(image.shape)}: render the cameras at that size (sim.image.width / height)"
            )
        if INSTRUCTION_KEY not in obs:
            raise ValueError(
                f"obs.{INSTRUCTION_KEY}: a vla policy reads the instruction's token ids and none were given: use a "
                "task that draws instructions (make_env adds them) or tokenize the text (sims.instruction_obs)"
            )
        text, mask = self.text(obs[INSTRUCTION_KEY])
        encoder = self.base["encoder"] if frozen and self.base is not None else self.encoder
        prefix = encoder(state, None if features is not None else image, text, mask, features)
        if self.estimate_proj is not None:  # valid: the attention expert attends to it
            token = self.estimate_proj(self._estimate(prefix, appended=False))
            return torch.cat([prefix, torch.cat([token, torch.ones_like(token[:, :1])], dim=1)[:, None]], dim=1)
        if self.readout_proj is not None:  # validity 0: only the MLP expert reads it
            read = [self.encoder.normalizer(state).flatten(1)]
            if self.config.estimate_token:
                read.append(self._estimate(prefix, appended=False))
            token = self.readout_proj(torch.cat(read, dim=1))
            return torch.cat([prefix, torch.cat([token, torch.zeros_like(token[:, :1])], dim=1)[:, None]], dim=1)
        return prefix

    def _estimate(self, prefix: torch.Tensor, appended: bool = True) -> torch.Tensor:
        """The privileged head's estimate [B, D_c] (normalised) from the pooled prefix [B, P, W + 1], the token
        `encode` appends (estimate or readout, the last, when `appended`) left out."""
        assert self.privileged_head is not None
        core = prefix[:, :-1] if appended and self._appended_token() is not None else prefix
        return self.privileged_head(pooled(core))

    def _appended_token(self) -> nn.Module | None:
        """The projection of the token `encode` appends to the backbone's prefix, if any."""
        return self.estimate_proj if self.estimate_proj is not None else self.readout_proj

    @property
    def bc_privileged_key(self) -> str | None:
        return PRIVILEGED_KEY if self.config.privileged_aux_weight else None

    def update_normalizer(self, obs: Obs) -> None:
        super().update_normalizer(obs)
        if self.privileged_head is not None and PRIVILEGED_KEY in obs:  # BC's; RL loads BC's statistics
            self.privileged_normalizer.update(obs[PRIVILEGED_KEY])

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """The flow-matching loss, plus (privileged_aux_weight) the auxiliary regression of obs["critic"]
        [B, D_c], normalised, from the pooled prefix."""
        prefix = self.encode(obs)
        loss = self.flow_loss(prefix, actions)
        if not self.config.privileged_aux_weight:
            return loss
        return loss + self._privileged_error(prefix, obs)

    def privileged_loss(self, obs: Obs) -> torch.Tensor:
        if not self.config.privileged_aux_weight:
            return super().privileged_loss(obs)
        return self._privileged_error(self.encode(obs), obs)

    def _privileged_error(self, prefix: torch.Tensor, obs: Obs) -> torch.Tensor:
        """privileged_aux_weight × the squared error of obs["critic"] [B, D_c], normalised, regressed from the
        pooled prefix [B, P, W + 1]."""
        assert self.privileged_head is not None
        if PRIVILEGED_KEY not in obs:
            raise ValueError(
                f"obs.{PRIVILEGED_KEY}: policy.privileged_aux_weight regresses the privileged state and the batch has "
                "none (BC reads it from the dataset's observation.environment_state)"
            )
        target = self.privileged_normalizer(obs[PRIVILEGED_KEY])
        return self.config.privileged_aux_weight * (self._estimate(prefix) - target).pow(2).mean()

    def _prefix_modules(self) -> list[nn.Module]:
        """What `encode` runs (the instruction encoder aside, always frozen)."""
        appended = self._appended_token()
        if appended is None:
            return [self.encoder]
        estimated = self.privileged_head is not None and self.config.estimate_token
        return [self.encoder, *([self.privileged_head] if estimated else []), appended]

    def _vision_frozen(self) -> bool:
        return not any(p.requires_grad for p in self.encoder.vision.parameters())

    def frozen_image_features(self, images: torch.Tensor) -> torch.Tensor | None:
        """EfficientNet-lite0's feature maps [..., V, C, h, w] when it is frozen (not `vision.train_pretrained`,
        not the scratch stem), computed in batches of IMAGE_BATCH frames."""
        if not self._vision_frozen():
            return None
        frames = images.flatten(0, -4)
        with torch.no_grad():
            features = [
                self.encoder.image_features(frames[i : i + IMAGE_BATCH]) for i in range(0, len(frames), IMAGE_BATCH)
            ]
        stacked = torch.cat(features) if features else frames.new_zeros(0)
        return stacked.view(*images.shape[:-3], *stacked.shape[1:])

    def precompute_frozen(self, obs: Obs) -> Obs:
        """With `freeze_backbone` the prefix (and the frozen steps' copy's: its normaliser may lag), else with a
        frozen image encoder the image features, in place of the images. At the defaults a prefix is 29 KB per
        decision: 3.7 MB for a PPO batch of 128 decisions, computed once instead of once per epoch."""
        if IMAGE_KEY not in obs or not self._vision_frozen():
            return obs
        if any(p.requires_grad for module in self._prefix_modules() for p in module.parameters()):
            rest = {key: value for key, value in obs.items() if key != IMAGE_KEY}
            return {**rest, IMAGE_FEATURES_KEY: self.frozen_image_features(obs[IMAGE_KEY])}
        size = len(obs[self.obs_key])
        batches = [{key: value[i : i + IMAGE_BATCH] for key, value in obs.items()} for i in range(0, size, IMAGE_BATCH)]
        with torch.no_grad():
            cached = {self.obs_key: obs[self.obs_key], PREFIX_KEY: torch.cat([self.encode(b) for b in batches])}
            if self.base is not None:
                cached[FROZEN_PREFIX_KEY] = torch.cat([self.encode(b, frozen=True) for b in batches])
        return cached

    def noise_condition(self, cond: torch.Tensor) -> torch.Tensor:
        return pooled(cond)

    def example_obs(self, batch: int) -> Obs:
        obs = super().example_obs(batch)
        instruction = torch.zeros(batch, INSTRUCTION_TOKENS, dtype=torch.int32)
        instruction[:, 0], instruction[:, 1] = CLS_ID, SEP_ID  # the empty instruction's ids: the shape, valid
        return {**obs, INSTRUCTION_KEY: instruction}

    def export_spec(self) -> dict[str, Any]:
        return {
            **super().export_spec(),
            "instruction": {
                "tokens": INSTRUCTION_TOKENS,
                "tokenizer": "all-MiniLM-L6-v2 WordPiece, [CLS] … [SEP] then [PAD]=0 (sims.instruction_obs)",
            },
        }


class _VLAInputs:
    """A VLA's input state: the history of state and images (T_o), and the current episode's instruction ids."""

    def __init__(self, policy: VLAPolicy, num_envs: int):
        self.history = ObservationHistory((policy.obs_key, IMAGE_KEY), policy.n_obs_steps, num_envs)

    def restart(self, done: torch.Tensor) -> None:
        self.history.restart(done)

    def push(self, obs: Obs) -> Obs:
        if INSTRUCTION_KEY not in obs:
            raise ValueError(
                f"obs.{INSTRUCTION_KEY}: the env gives no instruction (keys {sorted(obs)}): a vla policy needs a task "
                "that draws instructions (make_env adds their token ids)"
            )
        return {**self.history.push(obs), INSTRUCTION_KEY: obs[INSTRUCTION_KEY]}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.history.load_state_dict(state)
