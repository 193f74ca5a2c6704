"""LeRobot's SmolVLA split into the two networks the flow policy's chain machinery drives (`policies.smolvla`).

    SmolVLAPrefix(state [B, D], images [B, V, Hi, Wi, 3] uint8, tokens [B, L], mask [B, L])
        → prefix [B, P, C + 1]: SmolVLM's key/value cache of the P prefix tokens (images, language, state), every
          layer's keys and values flattened into C channels, with the token's validity as the last channel
    SmolVLAExpert(x [B, H, A], t [B], delta [B], prefix) → velocity [B, H, A]
        = decode(x, condition(t, delta, prefix)): one `VLAFlowMatching.denoise_step` on the cached prefix

Both wrap the same `lerobot` `SmolVLAPolicy` (its VLM and action expert are one module, `vlm_with_expert`): the
parameters are shared: `named_parameters` lists them once (so optimisers see them once), a state dict under
both `encoder.` and `denoiser.` (the same tensors). Time convention: lerobot integrates from noise at
s = 1 to the action at s = 0 with x_s = s·ε + (1 − s)·a and predicts v = ε − a; ours goes from t = 0 to 1 with
x_t = t·a + (1 − t)·ε, so s = 1 − t and our velocity is −v: an Euler step x + Δ·(−v) is lerobot's own x + dt·v.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from policyforge.policies.normalizer import RunningNormalizer

LANGUAGE_TOKENS = "observation.language.tokens"
LANGUAGE_MASK = "observation.language.attention_mask"
STATE = "observation.state"


def _pad(x: torch.Tensor, size: int) -> torch.Tensor:
    """Zero-pad the last axis to `size` (lerobot's pad_vector)."""
    return nn.functional.pad(x, (0, size - x.shape[-1]))


class SmolVLAPrefix(nn.Module):
    """Observation → SmolVLM's prefix key/value cache, packed into one tensor (module docstring). `out_dim`: the
    width of `summary`, what ReinFlow's noise network reads."""

    def __init__(self, smolvla: nn.Module, state_dim: int, camera_keys: list[str], normalize_state: bool):
        super().__init__()
        self.smolvla = smolvla
        self.camera_keys = camera_keys
        self.normalizer = RunningNormalizer(state_dim, enabled=normalize_state)
        text = smolvla.model.vlm_with_expert.config.text_config
        self.kv_width = text.num_key_value_heads * text.head_dim
        self.layers = smolvla.model.vlm_with_expert.num_vlm_layers
        self.out_dim = self.kv_width

    def forward(self, state: torch.Tensor, images: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor):
        from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks

        batch: dict[str, Any] = {STATE: self.normalizer(state), LANGUAGE_TOKENS: tokens, LANGUAGE_MASK: mask}
        for view, key in enumerate(self.camera_keys):
            batch[key] = images[:, view].permute(0, 3, 1, 2).float() / 255.0  # lerobot's [B, 3, Hi, Wi] in [0, 1]
        model = self.smolvla.model
        image_list, image_masks = self.smolvla.prepare_images(batch)
        embeddings, valid, causal = model.embed_prefix(
            image_list, image_masks, tokens, mask, state=self.smolvla.prepare_state(batch)
        )
        _, cache = model.vlm_with_expert.forward(
            attention_mask=make_att_2d_masks(valid, causal),
            position_ids=torch.cumsum(valid, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embeddings, None],
            use_cache=True,
            fill_kv_cache=True,
        )
        channels = [
            cache[layer][kind].flatten(2) for layer in range(self.layers) for kind in ("key_states", "value_states")
        ]
        return torch.cat([*channels, valid[..., None].to(channels[0].dtype)], dim=-1)

    def summary(self, prefix: torch.Tensor) -> torch.Tensor:
        """Mean of the last layer's cached values over the valid prefix tokens: [B, P, C + 1] → [B, out_dim]."""
        valid = prefix[:, :, -1:]
        values = prefix[:, :, -1 - self.kv_width : -1]
        return (values * valid).sum(1) / valid.sum(1)


class SmolVLAExpert(nn.Module):
    """SmolVLA's action expert on a packed prefix (module docstring); padded action dims are held at zero."""

    def __init__(self, smolvla: nn.Module, action_dim: int):
        super().__init__()
        self.smolvla = smolvla
        self.action_dim = action_dim
        text = smolvla.model.vlm_with_expert.config.text_config
        self.heads, self.head_dim = text.num_key_value_heads, text.head_dim
        self.layers = smolvla.model.vlm_with_expert.num_vlm_layers

    def condition(
        self, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What every step at time t [B] reads, independent of x: (t, prefix), the prefix shared, not copied (it is
        SmolVLM's whole key/value cache: ~10 MB per sample for smolvla_base, 16 layers × 241 tokens × 640 × 2)."""
        return t, prefix

    def decode(self, x: torch.Tensor, features: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Velocity [B, H, A] of x [B, H, A] given `condition` features (our convention: towards the action)."""
        t, prefix = features
        valid = prefix[:, :, -1] > 0.5
        width = self.heads * self.head_dim
        cache = {}
        for layer in range(self.layers):
            start = 2 * layer * width
            key = prefix[:, :, start : start + width].unflatten(-1, (self.heads, self.head_dim))
            value = prefix[:, :, start + width : start + 2 * width].unflatten(-1, (self.heads, self.head_dim))
            cache[layer] = {"key_states": key, "value_states": value}
        model = self.smolvla.model
        noisy = _pad(x, model.config.max_action_dim)
        v = model.denoise_step(prefix_pad_masks=valid, past_key_values=cache, x_t=noisy, timestep=1.0 - t)
        return -v[:, :, : self.action_dim]

    def forward(self, x: torch.Tensor, t: torch.Tensor, delta: torch.Tensor, prefix: torch.Tensor) -> torch.Tensor:
        return self.decode(x, self.condition(t, delta, prefix))


__all__ = ["SmolVLAExpert", "SmolVLAPrefix"]
