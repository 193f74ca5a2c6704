"""LeRobot's SmolVLA behind the sampler contract (`policy: {class: smolvla}`), with its flow sampler run step by step
by the flow policy's chain code, so that PPO fine-tunes it as πRL (Chen et al. 2025) fine-tunes π0: a ReinFlow
noise network (flow-noise) or the ODE→SDE conversion (flow-SDE) makes each Euler step a Gaussian transition with an
exact log-probability, and `sample` returns the chain [B, K + 1, H, A].

Registered only where `lerobot` imports: it lives in its own environment, `make setup-lerobot` (.venv-lerobot,
scripts/requirements-lerobot.txt: lerobot 0.4.4 pins transformers < 5, huggingface-hub < 0.36, diffusers < 0.36 and
torch < 2.11, which conflict with the main environment's diffusers 0.42; torch 2.10.0 and torchvision 0.25.0 there,
because lerobot imports torchvision and the registry's torchvision does not load next to the CPU torch 2.13.0).

    obs["policy"] [B, D], obs["image"] [B, V, Hi, Wi, 3] uint8, obs["instruction"] [B, 24] MiniLM token ids
        → SmolVLAPrefix: SmolVLM over [image tokens, language tokens, state token] once per decision → KV cache
        → K Euler steps of SmolVLAExpert (lerobot's `denoise_step` on that cache)              [B, H, A]

What is lerobot's and what is ours: the networks, the prefix/suffix attention masks, the key/value cache and one
denoising step are lerobot's code, called as they are (`smolvla_networks`); the loop over the K steps, the noise,
the log-probabilities, freezing early steps and rescoring are `FlowPolicy`'s, shared with the flow policy and the
VLA. `act` integrates from x_0 = 0, which is lerobot's `predict_action_chunk(noise=zeros)` (tested). Export
(ONNX / TorchScript) is refused by name: the instruction's re-tokenization (below) is Python.

The instruction: the env and the datasets carry it as all-MiniLM-L6-v2 WordPiece ids (`sims.instruction_obs`), like
for every other policy; SmolVLA has its own tokenizer (SmolVLM's). The wrapper decodes each distinct id row back to
text (lossless for the task instructions: lower-case words; MiniLM's vocabulary is uncased, so a real checkpoint
sees lower-case text), appends lerobot's "\\n" (its SmolVLANewLineProcessor) and tokenizes it with SmolVLM's
tokenizer, padded to `tokenizer_max_length` on the right as lerobot's TokenizerProcessorStep does; both results are
cached per distinct instruction. So nothing upstream changes, and rollout buffers keep 24 ids per step.

Action dims: SmolVLA pads actions to `max_action_dim` (32 in released checkpoints). The chain holds the A real
dims only and the padded ones stay 0 at every step (in sampling, rescoring and `bc_loss`'s noise): then the chain
is exactly an A-dim Gaussian chain. lerobot's own sampler instead integrates the padded dims from noise; with
max_action_dim = A (the tests) the two are the same.

Normalisation: lerobot normalises state and actions in its processor pipeline, outside the model. Here actions are
already in [-1, 1] and the state goes through the policy's own running normaliser (`normalize_state`), like every
policyforge policy. A released checkpoint was trained with its dataset's statistics: fine-tune it on our tasks
(BC, then PPO) rather than expecting zero-shot actions.

Real weights: one config line, `pretrained: lerobot/smolvla_base` (a hub id) or a local directory of a saved
SmolVLA (config.json + model.safetensors; tested with one saved by lerobot's `save_pretrained`). The policy keeps the
checkpoint's networks and sets chunk_size = chunk.horizon and num_steps = steps; our cameras feed its image features
in order. A hub id was not tried here (no hub access): a first load needs the network for the checkpoint and for its
vlm_model_name's config and processor (then the Hugging Face cache, or HF_HUB_OFFLINE=1). Without `pretrained`,
SmolVLA is built from `vlm_model_name` (a SmolVLM config + processor; `load_vlm_weights` loads its weights too); the
tests build a 0.2M-parameter one offline (tests/policies/test_smolvla.py: write_tiny_smolvlm).

π0 / π0.5 (lerobot's PI0Policy, PI05Policy): not wrapped, and nothing here tests them. What blocks a test (lerobot
0.4.4, checked in .venv-lerobot): (1) `PI0Pytorch.__init__` ends by importing `transformers.models.siglip.check` and
raises "An incorrect transformer version is used" without it: that module exists only in lerobot's patched
transformers branch (a git install; no release on the package registry, and GitHub is unreachable from here), and
lerobot 0.4.4's metadata has no pi extra; (2) `PI0Config` accepts only paligemma_variant / action_expert_variant ∈
{gemma_300m, gemma_2b} (widths 1024 / 2048, 18 layers) and hard-codes PaliGemma's 257,152-token vocabulary and a
2048-wide projection, so even the smallest π0 has ~1B random parameters (the default ~3B: ~12 GB of float32
weights, 3× that with Adam), beyond a 2-core CPU test. Its sampler has SmolVLA's structure: a prefix KV cache, then
`denoise_step(state, prefix_pad_masks, past_key_values, x_t, timestep)` with x_s = s·ε + (1 − s)·a, v = ε − a and
10 Euler steps from s = 1 (only the state moves from the prefix into the suffix). So a π0 wrapper is this module
with another prefix/expert pair (`smolvla_networks`), and the chain, log-probabilities, frozen steps and rescoring
it would run are FlowPolicy's, the code the SmolVLA tests exercise.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import torch

from policyforge.config import ConfigError, check, check_in
from policyforge.policies.base import EnvSpec, Obs
from policyforge.policies.chunked import IMAGE_KEY
from policyforge.policies.flow import FlowChainConfig, FlowPolicy
from policyforge.policies.history import InputState
from policyforge.policies.smolvla_networks import LANGUAGE_MASK, LANGUAGE_TOKENS, STATE, SmolVLAExpert, SmolVLAPrefix
from policyforge.policies.vla import _VLAInputs
from policyforge.policies.vla_config import require_images_and_instruction
from policyforge.sims.instruction_obs import CLS_ID, INSTRUCTION_KEY, INSTRUCTION_TOKENS, SEP_ID

LEROBOT_INSTALLED = importlib.util.find_spec("lerobot") is not None
"""Whether `class: smolvla` is registered (the optional environment, `make setup-lerobot`)."""
SMOLVLM = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
"""SmolVLA's VLM (lerobot's default vlm_model_name)."""


@dataclasses.dataclass
class SmolVLAPolicyConfig(FlowChainConfig):
    """LeRobot's SmolVLA under the flow policy's chains (module docstring). `chunk.horizon` is SmolVLA's chunk_size,
    `steps` its num_steps; `variant` must be rectified (SmolVLA is trained as a rectified flow)."""

    pretrained: str = ""
    """A SmolVLA checkpoint: a hub id (lerobot/smolvla_base) or a local directory; "" builds one from
    `vlm_model_name` with the settings below."""
    vlm_model_name: str = SMOLVLM
    """A SmolVLM hub id or local directory (its config and processor; weights only with `load_vlm_weights`)."""
    load_vlm_weights: bool = False
    """Load the VLM's pretrained weights (from `vlm_model_name`); False: random weights."""
    num_vlm_layers: int = 16
    """VLM layers kept (SmolVLA keeps the first 16 of SmolVLM2-500M's 32)."""
    expert_width_multiplier: float = 0.75
    """Action expert width / VLM width."""
    max_state_dim: int = 32
    """State size SmolVLA pads to (≥ the env's state size)."""
    max_action_dim: int = 32
    """Action size SmolVLA pads to (≥ the env's action size; the padded dims stay 0 in the chain)."""
    image_size: int = 512
    """Images are resized with padding to image_size × image_size (SmolVLA: 512)."""
    tokenizer_max_length: int = 48
    """Instruction tokens, padded or truncated (SmolVLA: 48)."""
    train_expert_only: bool = True
    """Freeze the VLM (SmolVLA's default, and πRL's setting): RL and BC train the action expert, the state and
    action projections and the noise network."""
    normalize_state: bool = True
    """Normalise the state with running statistics (lerobot does it in its processor)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.variant == "rectified", "variant", f"SmolVLA is a rectified flow: set rectified, got {self.variant}")
        check(self.chunk.n_obs_steps == 1, "chunk.n_obs_steps", "SmolVLA reads the current observation only: set 1")
        check_in(self.num_vlm_layers, "num_vlm_layers", "[1, 32]")
        check_in(self.max_state_dim, "max_state_dim", "[1, 1024]")
        check_in(self.max_action_dim, "max_action_dim", "[1, 1024]")
        check_in(self.image_size, "image_size", "[8, 2048]")
        check_in(self.tokenizer_max_length, "tokenizer_max_length", "[4, 512]")

    def build(self, env: EnvSpec) -> SmolVLAFlowPolicy:
        require_images_and_instruction(env, "smolvla")
        if not LEROBOT_INSTALLED:
            raise ConfigError("policy.class", "smolvla needs lerobot: make setup-lerobot, then use .venv-lerobot")
        return SmolVLAFlowPolicy(env.state_dim, env.action_dim, self, tuple(env.obs_shapes[IMAGE_KEY]))

    def lerobot_policy(
        self, state_dim: int, action_dim: int, image_shape: tuple[int, ...]
    ) -> tuple[torch.nn.Module, list[str]]:
        """lerobot's SmolVLAPolicy for an env (loaded from `pretrained`, or built from these settings) and the
        image feature keys our camera views feed, in order."""
        from lerobot.configs.types import FeatureType, PolicyFeature
        from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
        from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

        views, height, width = image_shape[0], image_shape[1], image_shape[2]
        if self.pretrained:
            policy = SmolVLAPolicy.from_pretrained(self.pretrained)
            config = policy.config
            cameras = list(config.image_features)
            check(len(cameras) >= views, "pretrained", f"the checkpoint has {len(cameras)} cameras, the env {views}")
            for name, size in (("state", state_dim), ("action", action_dim)):
                most = getattr(config, f"max_{name}_dim")
                check(size <= most, "pretrained", f"the checkpoint takes {name}s of ≤ {most} dims, the env has {size}")
        else:
            check(state_dim <= self.max_state_dim, "max_state_dim", f"must be ≥ the env's state size {state_dim}")
            check(action_dim <= self.max_action_dim, "max_action_dim", f"must be ≥ the env's action size {action_dim}")
            cameras = [f"observation.images.view{v}" for v in range(views)]
            config = SmolVLAConfig(
                vlm_model_name=self.vlm_model_name,
                load_vlm_weights=self.load_vlm_weights,
                num_vlm_layers=self.num_vlm_layers,
                expert_width_multiplier=self.expert_width_multiplier,
                max_state_dim=self.max_state_dim,
                max_action_dim=self.max_action_dim,
                resize_imgs_with_padding=(self.image_size, self.image_size),
                tokenizer_max_length=self.tokenizer_max_length,
                train_expert_only=self.train_expert_only,
                device="cpu",
                input_features={
                    STATE: PolicyFeature(FeatureType.STATE, (state_dim,)),
                    **{key: PolicyFeature(FeatureType.VISUAL, (3, height, width)) for key in cameras},
                },
                output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))},
            )
            policy = SmolVLAPolicy(config)
        # the chunk and the steps are ours (neither is baked into the weights: action tokens are positional)
        config.chunk_size, config.n_action_steps = self.chunk.horizon, self.chunk.act_steps
        config.num_steps = self.steps
        return policy.float(), cameras[:views]


class SmolVLAFlowPolicy(FlowPolicy):
    """SmolVLA's networks under the flow policy's chain machinery (module docstring)."""

    def __init__(self, state_dim: int, action_dim: int, config: SmolVLAPolicyConfig, image_shape: tuple[int, ...]):
        smolvla, cameras = config.lerobot_policy(state_dim, action_dim, image_shape)
        networks = (
            SmolVLAPrefix(smolvla, state_dim, cameras, config.normalize_state),
            SmolVLAExpert(smolvla, action_dim),
        )
        super().__init__(state_dim, action_dim, config, image_shape=image_shape, networks=networks)
        self.text = _Retokenizer(smolvla.model.vlm_with_expert.processor.tokenizer, config.tokenizer_max_length)

    @property
    def obs_keys(self) -> tuple[str, ...]:
        return (self.obs_key, IMAGE_KEY, INSTRUCTION_KEY)

    def input_state(self, num_envs: int) -> InputState:
        return _VLAInputs(self, num_envs)

    def lerobot_batch(self, obs: Obs) -> dict[str, torch.Tensor]:
        """What lerobot's SmolVLAPolicy reads, from our observations (state unnormalised; `encode` normalises)."""
        state, image = obs[self.obs_key], obs.get(IMAGE_KEY)
        state = state[:, -1] if state.dim() == 3 else state
        check(state.shape[1:] == (self.state_dim,), f"obs.{self.obs_key}", f"expected [B, {self.state_dim}]")
        if image is None or image.dtype != torch.uint8 or image.shape[-len(self.image_shape) :] != self.image_shape:
            got = "none" if image is None else f"{image.dtype} {list(image.shape)}"
            raise ValueError(f"obs.image: expected uint8 [B, {', '.join(map(str, self.image_shape))}], got {got}")
        image = image[:, -1] if image.dim() == len(self.image_shape) + 2 else image
        if INSTRUCTION_KEY not in obs:
            raise ValueError(f"obs.{INSTRUCTION_KEY}: a smolvla policy reads the instruction's token ids; none given")
        tokens, mask = self.text(obs[INSTRUCTION_KEY])
        return {STATE: state, IMAGE_KEY: image, LANGUAGE_TOKENS: tokens, LANGUAGE_MASK: mask}

    def encode(self, obs: Obs, frozen: bool = False) -> torch.Tensor:
        """The packed prefix [B, P, C + 1] (with the frozen copy's networks if `frozen`)."""
        batch = self.lerobot_batch(obs)
        encoder = self.base["encoder"] if frozen and self.base is not None else self.encoder
        return encoder(batch[STATE], batch[IMAGE_KEY], batch[LANGUAGE_TOKENS], batch[LANGUAGE_MASK])

    def step_features(
        self, conditions: list[torch.Tensor], times: list[float], deltas: list[float]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each sampling step's (t [B], prefix): the flow policy stacks a condition per step for one batched pass of
        its conditioning network; SmolVLA has none (t enters the expert with x), and its prefix is large."""
        return [
            self.network(k).condition(torch.full_like(c[:, 0, 0], t), None, c)
            for k, (c, t) in enumerate(zip(conditions, times, strict=True))
        ]

    def noise_condition(self, cond: torch.Tensor) -> torch.Tensor:
        return self.encoder.summary(cond)

    def update_normalizer(self, obs: Obs) -> None:
        self.encoder.normalizer.update(self.lerobot_batch(obs)[STATE])

    def bc_loss(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """SmolVLA's own flow-matching loss (`SmolVLAPolicy.forward`, its Beta(1.5, 1) times) of chunks [B, H, A];
        the padded action dims get zero noise, as in the chain."""
        batch = self.lerobot_batch(obs)
        smolvla, encoder = self.encoder.smolvla, self.encoder
        inputs = {STATE: encoder.normalizer(batch[STATE]), "action": actions}
        inputs |= {LANGUAGE_TOKENS: batch[LANGUAGE_TOKENS], LANGUAGE_MASK: batch[LANGUAGE_MASK]}
        for view, key in enumerate(encoder.camera_keys):
            inputs[key] = batch[IMAGE_KEY][:, view].permute(0, 3, 1, 2).float() / 255.0
        noise = actions.new_zeros(*actions.shape[:2], smolvla.config.max_action_dim)
        noise[..., : self.action_dim] = torch.randn_like(actions)
        loss, _ = smolvla.forward(inputs, noise=noise)
        return loss

    def example_obs(self, batch: int) -> Obs:
        instruction = torch.zeros(batch, INSTRUCTION_TOKENS, dtype=torch.int32)
        instruction[:, 0], instruction[:, 1] = CLS_ID, SEP_ID  # the empty instruction's ids: the shape, valid
        return {**super().example_obs(batch), INSTRUCTION_KEY: instruction}


class _Retokenizer:
    """MiniLM token ids [B, 24] → SmolVLM token ids and mask [B, L] (module docstring), cached per distinct row."""

    def __init__(self, tokenizer, max_length: int):
        from policyforge.sims.instruction_obs import tokenizer as minilm_tokenizer

        self.minilm = minilm_tokenizer().tokenizer
        self.tokenizer, self.max_length = tokenizer, max_length
        self.cache: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}

    def text(self, ids: torch.Tensor) -> str:
        """The instruction text of one row of MiniLM ids."""
        return self.minilm.decode(ids.tolist(), skip_special_tokens=True)

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling():
            # a traced graph would hold the example's instruction as a constant and ignore the real one
            raise ValueError(
                "export: a smolvla policy re-tokenizes the instruction in Python (MiniLM ids → text → SmolVLM ids), "
                "which a graph cannot hold; run it in PyTorch (policyforge.load) instead of exporting it"
            )
        rows = []
        for row in ids.to(torch.int64).cpu():
            key = row.numpy().tobytes()
            if key not in self.cache:
                encoded = self.tokenizer(
                    self.text(row) + "\n",
                    padding="max_length",
                    max_length=self.max_length,
                    padding_side="right",
                    truncation=True,
                    return_tensors="pt",
                )
                self.cache[key] = (encoded["input_ids"][0], encoded["attention_mask"][0].bool())
            rows.append(self.cache[key])
        tokens, mask = zip(*rows, strict=True)
        return torch.stack(tokens).to(ids.device), torch.stack(mask).to(ids.device)


if LEROBOT_INSTALLED:
    from policyforge.policies.base import register_policy

    register_policy("smolvla")(SmolVLAPolicyConfig)
