"""A generative vision-language judge as a reward model (`sim.reward_model.kind: vlm`): RoboReward's question — the
rollout's frames and the instruction, "rate the progress 1–5" — put to an image-text-to-text model of transformers
(Qwen2.5-VL, the family RoboReward fine-tunes), loaded offline from a checkpoint directory.

    question = chat template([frame images…, prompt(instruction, frames)]) + the assistant's turn
    likelihood: p(1…5) = softmax of the next-token logits of the digits → progress E[score - 1] / 4, success p(5)
    generate:   greedy answer text → `parse_score` → progress (score - 1) / 4, success score == 5

Each image placeholder of the chat template is expanded to the number of vision tokens its image becomes (the image
grid over the processor's merge size), as the model's own processor class does; the processor class is not used
because it also builds a video processor, which needs torchvision (it does not load next to the CPU torch here).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import torch

from policyforge.config import ConfigError
from policyforge.rewards.base import RewardInputs, RewardModel, RewardScores
from policyforge.rewards.config import VlmJudgeConfig

log = logging.getLogger(__name__)
SCORES = ("1", "2", "3", "4", "5")
_ANSWER = re.compile(r"(?:answer|score|progress)\s*[:=]?\s*([1-5])\b|(?<![\d.])([1-5])(?![\d.])", re.IGNORECASE)


def parse_score(text: str) -> int | None:
    """The 1–5 score of an answer: the digit after "answer/score/progress:", else the first lone digit 1–5; None
    when there is none ("I cannot tell", "10")."""
    match = _ANSWER.search(text)
    return int(match.group(1) or match.group(2)) if match else None


class VlmJudge(RewardModel):
    """RoboReward's 1–5 progress question to a vision-language model (module docstring)."""

    def __init__(
        self, model, tokenizer, image_processor, config: VlmJudgeConfig, cameras: list[str], height: int, width: int
    ):
        super().__init__()
        self.model, self.tokenizer, self.image_processor, self.config = model.eval(), tokenizer, image_processor, config
        self.inputs = RewardInputs(tuple(cameras), height, width, config.frames, config.frame_stride)
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.digit_ids = []
        for digit in SCORES:
            ids = tokenizer.encode(digit, add_special_tokens=False)
            if len(ids) != 1:
                raise ConfigError(
                    "sim.reward_model.vlm.answer", f"the tokenizer splits {digit!r} into {ids}: use answer=generate"
                )
            self.digit_ids.append(ids[0])
        self.unparsed = 0
        """Generated answers without a score so far (scored as progress 0)."""

    def question(self, instruction: str, images: int) -> str:
        """The chat-templated question about `images` frames, ending where the assistant's answer starts."""
        text = self.config.prompt.format(instruction=instruction, frames=images)
        content = [*({"type": "image"} for _ in range(images)), {"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def expand_images(self, question: str, tokens: list[int]) -> str:
        """`question` with its i-th image placeholder repeated `tokens[i]` times (the vision tokens of image i)."""
        parts = question.split(self.image_token)
        if len(parts) != len(tokens) + 1:
            raise ValueError(f"the chat template wrote {len(parts) - 1} image placeholders for {len(tokens)} images")
        return parts[0] + "".join(
            self.image_token * count + part for count, part in zip(tokens, parts[1:], strict=True)
        )

    def _inputs(self, frames: torch.Tensor, instructions: list[str]) -> dict[str, torch.Tensor]:
        window, views = frames.shape[1:3]
        images = list(frames.flatten(0, 2).cpu().numpy())
        vision = self.image_processor(images=images, return_tensors="pt")
        merge = getattr(self.image_processor, "merge_size", 1)
        tokens = (vision["image_grid_thw"].prod(-1) // merge**2).tolist()
        per_sample = window * views
        texts = [
            self.expand_images(
                self.question(instruction, per_sample), tokens[row * per_sample : (row + 1) * per_sample]
            )
            for row, instruction in enumerate(instructions)
        ]
        self.tokenizer.padding_side = "left"  # every question's last token is the last position
        encoded = self.tokenizer(texts, padding=True, return_tensors="pt")
        return {**encoded, **vision}

    def _score(self, frames: torch.Tensor, instructions: list[str]) -> RewardScores:
        inputs = {k: v.to(self.device) for k, v in self._inputs(frames, instructions).items()}
        if self.config.answer == "likelihood":
            logits = self.model(**inputs).logits[:, -1, self.digit_ids].float()
            probabilities = logits.softmax(-1)
            expected = (probabilities * torch.arange(5, device=logits.device)).sum(-1) / 4
            return RewardScores(expected, probabilities[:, 4])
        generated = self.model.generate(**inputs, max_new_tokens=self.config.max_new_tokens, do_sample=False)
        answers = self.tokenizer.batch_decode(generated[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        scores = [parse_score(answer) for answer in answers]
        for answer, score in zip(answers, scores, strict=True):
            if score is None:
                self.unparsed += 1
                log.warning("the judge's answer %r has no 1-5 score: progress 0", answer)
        values = torch.tensor([0.0 if s is None else (s - 1) / 4 for s in scores])
        return RewardScores(values, (values == 1.0).float())


def load_vlm(path: str | Path, config: VlmJudgeConfig, cameras: list[str], height: int, width: int) -> VlmJudge:
    """An image-text-to-text checkpoint directory as a `VlmJudge`; ConfigError naming sim.reward_model.path where it
    is not one."""
    from policyforge.rewards.load import transformers_checkpoint

    example = "Qwen/Qwen2.5-VL-3B-Instruct"
    model, tokenizer, processor = transformers_checkpoint(path, "AutoModelForImageTextToText", example, cameras)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("sim.reward_model.path", f"{path}'s tokenizer has no chat template: use an instruct model")
    return VlmJudge(model, tokenizer, processor, config, cameras, height, width)
