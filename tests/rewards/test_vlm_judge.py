"""The generative judge (`rewards/vlm.py`) on a tiny random Qwen2.5-VL of the real architecture: RoboReward's
question as the chat template writes it, each image's vision tokens, the answer read from the digits' likelihood or
parsed from generated text, and checkpoints that are not one refused naming the field."""

from __future__ import annotations

import pytest
import torch

from policyforge.config import ConfigError
from policyforge.rewards.config import RewardModelConfig, VlmJudgeConfig
from policyforge.rewards.load import load_reward_model
from policyforge.rewards.vlm import parse_score
from policyforge.sims.config import ImageConfig

IMAGE = ImageConfig(cameras=["task"], width=40, height=24)


def judge(path, **settings):
    return load_reward_model(RewardModelConfig(path=str(path), kind="vlm", vlm=VlmJudgeConfig(**settings)), IMAGE)


@pytest.mark.parametrize(
    ("answer", "score"),
    [("4", 4), ("ANSWER: 5", 5), ("Progress: 2.", 2), ("I think 3, maybe 4", 3), ("score=1", 1), ("10", None),
     ("3.5", None), ("cannot tell", None), ("step 7 of 9: 2", 2)],
)  # fmt: skip
def test_an_answers_score_is_parsed_or_none(answer, score):
    assert parse_score(answer) == score


def test_the_question_names_the_task_and_shows_every_frame_as_its_vision_tokens(tiny_qwen):
    model = judge(tiny_qwen, frames=3, frame_stride=2)
    question = model.question("touch the red cube", 3)
    assert question.startswith("<|im_start|>user\n") and question.endswith("<|im_start|>assistant\n")
    assert question.count("<|vision_start|><|image_pad|><|vision_end|>") == 3
    assert "task: touch the red cube." in question and "These are 3 frames" in question
    frames = torch.randint(0, 256, (2, 3, 1, 24, 40, 3), dtype=torch.uint8)
    inputs = model._inputs(frames, ["touch the red cube", "lift the blue cube"])
    per_image = (inputs["image_grid_thw"].prod(-1) // 4).tolist()  # 14 px patches merged 2 × 2
    assert len(per_image) == 6
    image_id = model.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (inputs["input_ids"] == image_id).sum(1).tolist() == [sum(per_image[:3]), sum(per_image[3:])]
    assert (inputs["attention_mask"][:, -1] == 1).all(), "padded on the left: the answer follows the last token"


def test_likelihood_reads_the_expected_score_of_the_digits(tiny_qwen):
    model = judge(tiny_qwen)
    frames = torch.randint(0, 256, (2, 1, 1, 24, 40, 3), dtype=torch.uint8)
    instructions = ["touch the red cube", "lift the blue cube"]
    scores = model.score(frames, instructions)
    with torch.no_grad():
        logits = model.model(**model._inputs(frames, instructions)).logits[:, -1]
    digits = logits[:, model.digit_ids].softmax(-1)
    torch.testing.assert_close(scores.progress, (digits * torch.tensor([0, 0.25, 0.5, 0.75, 1])).sum(-1))
    torch.testing.assert_close(scores.success, digits[:, 4])


def test_a_generated_answer_is_parsed_into_progress(tiny_qwen):
    model = judge(tiny_qwen, answer="generate", max_new_tokens=1)
    frames = torch.randint(0, 256, (2, 1, 1, 24, 40, 3), dtype=torch.uint8)
    with torch.no_grad():
        hidden = model.model(**model._inputs(frames, ["go to the red cube"] * 2), output_hidden_states=True)
    direction = hidden.hidden_states[-1][:, -1].mean(0)
    head = model.model.lm_head.weight.data
    head[:] = 0  # every token's logit 0 but "4"'s, which points along the last hidden state: greedy answers "4"
    head[model.digit_ids[3]] = direction / direction.norm() * 100
    scores = model.score(frames, ["go to the red cube"] * 2)
    assert scores.progress.tolist() == [0.75, 0.75] and scores.success.tolist() == [0.0, 0.0]
    assert model.unparsed == 0


def test_a_directory_that_is_not_a_checkpoint_is_refused_naming_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"^sim.reward_model.path: .*\(no config.json\).*hf download"):
        judge(tmp_path)
