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

from typing import Any

import torch
from torch import nn

from policyforge.config import check
from policyforge.policies.base import IMAGE_FEATURES_KEY, Obs
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.flow import FlowPolicy
from policyforge.policies.history import InputState, ObservationHistory
from policyforge.policies.language import InstructionEncoder
from policyforge.policies.normalizer import RunningNormalizer
from policyforge.policies.vla_config import PRIVILEGED_KEY, VLAConfig
from policyforge.policies.vla_networks import ActionExpert, AttentionPool, MLPExpert, VisionConfig, VLABackbone, pooled
from policyforge.sims.instruction_obs import CLS_ID, INSTRUCTION_KEY, INSTRUCTION_TOKENS, SEP_ID

__all__ = ["PRIVILEGED_KEY", "VLAConfig", "VLAPolicy", "VisionConfig"]  # the configs re-exported

PREFIX_KEY, FROZEN_PREFIX_KEY = "prefix", "frozen_prefix"
"""Keys of `precompute_frozen`'s prefixes [B, P, W + 1] (the policy's, and its frozen steps' copy's)."""
IMAGE_BATCH = 256
"""Frames per pass when features or prefixes are precomputed (bounds the activations' memory)."""


class VLAPolicy(FlowPolicy):
    """π0-style VLA under the flow policy's chain machinery (module docstring)."""

    rl_only_modules = (*FlowPolicy.rl_only_modules, "privileged_head.", "privileged_normalizer.", "estimate_pool.")

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
            config.prefix_state,
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
        self.estimate_pool: nn.Module | None = None
        """The privileged head's read of the prefix [B, P, W + 1] → [B, W] (`estimate_pool: attention`; else the
        mean of the valid tokens)."""
        self.estimate_proj: nn.Module | None = None
        """Privileged estimate [B, D_c] → the prefix's estimate token [B, W] (`estimate_token`, attention expert)."""
        self.readout_proj: nn.Module | None = None
        """[normalised state [B, T_o·D], estimate [B, D_c] (`estimate_token`)] → the MLP expert's readout token."""
        if config.privileged_aux_weight or config.estimate_token:
            self.privileged_normalizer = RunningNormalizer(privileged_dim)
            self.privileged_head = nn.Sequential(
                nn.Linear(config.width, config.width), nn.GELU(), nn.Linear(config.width, privileged_dim)
            )
            if config.estimate_pool == "attention":
                self.estimate_pool = AttentionPool(config.width, config.heads)
        if config.expert == "mlp":
            read = config.chunk.n_obs_steps * state_dim + (privileged_dim if config.estimate_token else 0)
            self.readout_proj = nn.Linear(read, config.width)
        elif config.estimate_token:
            self.estimate_proj = nn.Linear(privileged_dim, config.width)
        if config.freeze_backbone:
            for module in (
                self.encoder,
                self.privileged_head,
                self.estimate_pool,
                self.estimate_proj,
                self.readout_proj,
            ):
                if module is not None:
                    module.requires_grad_(False)
        self.export_tolerance = 1e-4  # MiniLM and the attention layers: onnxruntime's float sums round differently

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return (self.obs_key, IMAGE_KEY, INSTRUCTION_KEY)

    def input_state(self, num_envs: int) -> InputState:
        return _VLAInputs(self, num_envs)

    def encode(self, obs: Obs, frozen: bool = False) -> torch.Tensor:
        """The prefix [B, P, W + 1] (with the frozen copy's backbone if `frozen`) and the token the expert reads
        appended; `precompute_frozen`'s when `obs` carries it."""
        if PREFIX_KEY in obs:
            return obs[FROZEN_PREFIX_KEY if frozen and self.base is not None else PREFIX_KEY]
        return self._append(*self._backbone(obs, frozen))

    def _backbone(self, obs: Obs, frozen: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's prefix [B, P, W + 1] of checked observations, and the state [B, T_o, D]."""
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
        return encoder(state, None if features is not None else image, text, mask, features), state

    def _append(self, prefix: torch.Tensor, state: torch.Tensor, scene: torch.Tensor | None = None) -> torch.Tensor:
        """The backbone's prefix [B, P, W + 1] with the token the expert reads appended, if any: the attention
        expert's estimate token (valid) or the MLP expert's readout of the state [B, T_o, D] (validity 0: only the
        MLP expert reads it). With `estimate_token`, `scene` [B, D_c] is the scene they read (default: the head's
        estimate from `prefix`)."""
        if self.estimate_proj is None and self.readout_proj is None:
            return prefix
        if self.config.estimate_token and scene is None:
            scene = self._estimate(prefix, appended=False)
        if self.estimate_proj is not None:
            assert scene is not None
            token, validity = self.estimate_proj(scene), 1.0
        else:
            assert self.readout_proj is not None
            read = [self.encoder.normalizer(state).flatten(1), *([scene] if self.config.estimate_token else [])]
            token, validity = self.readout_proj(torch.cat(read, dim=1)), 0.0
        return torch.cat([prefix, torch.cat([token, torch.full_like(token[:, :1], validity)], dim=1)[:, None]], dim=1)

    def _estimate(self, prefix: torch.Tensor, appended: bool = True) -> torch.Tensor:
        """The privileged head's estimate [B, D_c] (normalised) from the prefix [B, P, W + 1] (the mean of its valid
        tokens, or `estimate_pool`), the token `encode` appends (estimate or readout, the last, when `appended`) left
        out."""
        assert self.privileged_head is not None
        core = prefix[:, :-1] if appended and self._appended_token() is not None else prefix
        return self.privileged_head(pooled(core) if self.estimate_pool is None else self.estimate_pool(core))

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
        """The flow-matching loss (with `bc_true_estimate`, the expert reading the true obs["critic"] + noise in
        place of the estimate), plus (privileged_aux_weight) the auxiliary regression of obs["critic"] [B, D_c],
        normalised, by the privileged head; the head runs once for both."""
        if PREFIX_KEY in obs:  # RL's cached prefix (frozen backbone), the expert's token already in it
            return self.flow_loss(self.encode(obs), actions)
        prefix, state = self._backbone(obs)
        estimate = self._estimate(prefix, appended=False) if self.privileged_head is not None else None
        scene = estimate
        if self.config.bc_true_estimate is not None:
            truth, noise = self._privileged_target(obs), self.config.bc_true_estimate
            scene = truth + noise * torch.randn_like(truth) if noise else truth
        loss = self.flow_loss(self._append(prefix, state, scene), actions)
        if not self.config.privileged_aux_weight:
            return loss
        assert estimate is not None
        return loss + self._privileged_error(estimate, obs)

    def privileged_loss(self, obs: Obs) -> torch.Tensor:
        if not self.config.privileged_aux_weight:
            return super().privileged_loss(obs)
        return self._privileged_error(self._estimate(self._backbone(obs)[0], appended=False), obs)

    def _privileged_error(self, estimate: torch.Tensor, obs: Obs) -> torch.Tensor:
        """privileged_aux_weight × the squared error of the head's `estimate` [B, D_c] of obs["critic"],
        normalised."""
        return self.config.privileged_aux_weight * (estimate - self._privileged_target(obs)).pow(2).mean()

    def _privileged_target(self, obs: Obs) -> torch.Tensor:
        """obs["critic"] [B, D_c], normalised; ValueError naming the key when the batch has none."""
        if PRIVILEGED_KEY not in obs:
            raise ValueError(
                f"obs.{PRIVILEGED_KEY}: policy.privileged_aux_weight regresses the privileged state and the batch has "
                "none (BC reads it from the dataset's observation.environment_state)"
            )
        return self.privileged_normalizer(obs[PRIVILEGED_KEY])

    def _prefix_modules(self) -> list[nn.Module]:
        """What `encode` runs (the instruction encoder aside, always frozen)."""
        appended = self._appended_token()
        if appended is None:
            return [self.encoder]
        estimated = self.privileged_head is not None and self.config.estimate_token
        heads = [self.privileged_head, *([self.estimate_pool] if self.estimate_pool is not None else [])]
        return [self.encoder, *(heads if estimated else []), appended]

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
