"""Zero-shot CLIP-style rewards through transformers' dual encoders (CLIPModel, SiglipModel: anything with
`get_image_features` and `get_text_features`), with VLM-RMs' goal–baseline projection (`config.ClipRewardConfig`).

    model = load_clip("checkpoints/clip-vit-base-patch32", config, cameras=["task"], height=64, width=64)
    model.score(frames [B, 1, 1, H, W, 3] uint8, instructions) → progress, success

The checkpoint is a directory of `save_pretrained` files (config, weights, tokenizer, image processor), read with
`local_files_only`: nothing is fetched at run time. The image processor resizes the env's frames to the model's
input size; text embeddings are cached per distinct prompt (a task suite has a few hundred instructions).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardInputs, RewardModel, RewardScores
from policyforge.rewards.config import ClipRewardConfig


def _embedding(output: object) -> torch.Tensor:
    """transformers 5 returns the projected embedding as `pooler_output` of an output object, 4.x as a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output  # type: ignore[attr-defined]


class ClipReward(RewardModel):
    """VLM-RMs' reward from a dual encoder (module docstring)."""

    def __init__(
        self, model, tokenizer, processor, config: ClipRewardConfig, cameras: list[str], height: int, width: int
    ):
        super().__init__()
        self.model, self.tokenizer, self.processor, self.config = model.eval(), tokenizer, processor, config
        self.inputs = RewardInputs((cameras[0],), height, width)
        self._texts: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def text_embeddings(self, texts: list[str]) -> torch.Tensor:
        """Unit embeddings [n, E] of `texts`, cached per text."""
        new = sorted({text for text in texts if text not in self._texts})
        if new:
            tokens = self.tokenizer(new, padding=True, truncation=True, return_tensors="pt").to(self.device)
            embedded = F.normalize(_embedding(self.model.get_text_features(**tokens)).float(), dim=-1)
            self._texts.update(zip(new, embedded, strict=True))
        return torch.stack([self._texts[text] for text in texts])

    def _score(self, frames: torch.Tensor, instructions: list[str]) -> RewardScores:
        images = list(frames[:, -1, 0].cpu().numpy())
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"].to(self.device)
        state = F.normalize(_embedding(self.model.get_image_features(pixel_values=pixels)).float(), dim=-1)
        goal = self.text_embeddings([self.config.goal_template.format(instruction=text) for text in instructions])
        baseline = self.text_embeddings([self.config.baseline]).expand_as(goal)
        direction = F.normalize(goal - baseline, dim=-1)
        offset = state - goal
        along = (offset * direction).sum(-1, keepdim=True) * direction
        projected = self.config.alpha * along + (1 - self.config.alpha) * offset
        reward = 1 - 0.5 * projected.pow(2).sum(-1)
        scale = self.model.logit_scale.exp() if hasattr(self.model, "logit_scale") else 100.0
        similarities = torch.stack([(state * goal).sum(-1), (state * baseline).sum(-1)], dim=-1) * scale
        return RewardScores((reward + 1) / 2, similarities.softmax(-1)[:, 0])


def load_clip(path: str | Path, config: ClipRewardConfig, cameras: list[str], height: int, width: int) -> ClipReward:
    """A dual-encoder checkpoint directory as a `ClipReward` reading the first of `cameras` at height × width;
    ConfigError naming sim.reward_model.path where it is not one."""
    from policyforge.rewards.load import transformers_checkpoint

    example = "openai/clip-vit-base-patch32"
    model, tokenizer, processor = transformers_checkpoint(path, "AutoModel", example, cameras)
    if not (hasattr(model, "get_image_features") and hasattr(model, "get_text_features")):
        raise ConfigError(
            "sim.reward_model.path", f"{path} holds a {type(model).__name__}, not a dual encoder (CLIP, SigLIP)"
        )
    return ClipReward(model, tokenizer, processor, config, cameras, height, width)
