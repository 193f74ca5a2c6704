"""Small rollout datasets of arm-instructed's touch family (task camera, 32 px): noisy scripted episodes, some of
which fail, recorded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyforge.data.collect import collect

SIZE = 32
OPTIONS = {"families": ["touch"], "episode_seconds": 3.0}
"""Touch episodes of 75 steps: the scripted expert touches within ~40."""


def record(out: Path, episodes: int, seed: int, instructions: str = "train") -> Path:
    collect(
        "arm-instructed", episodes, out, num_envs=8, seed=seed, action_noise=0.6, hesitation=0.2, cameras=["task"],
        image_size=SIZE, task_options={**OPTIONS, "instructions": instructions}, progress=False,
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def rollouts(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("rollouts") / "train", 24, seed=0)


@pytest.fixture(scope="session")
def held_out_rollouts(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("rollouts") / "heldout", 8, seed=50, instructions="heldout_combination")


def word_tokenizer(texts: list[str]):
    """A real transformers fast tokenizer over the words of `texts` (a tiny vocabulary: hub tokenizers are not
    reachable here), with CLIP's start and end tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({word for text in texts for word in text.lower().replace(":", " ").split()})
    specials = ["<|startoftext|>", "<|endoftext|>", "[UNK]"]
    vocab = {token: i for i, token in enumerate([*specials, *words])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", special_tokens=[(t, vocab[t]) for t in specials[:2]]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=specials[0], eos_token=specials[1], pad_token=specials[1],
        unk_token=specials[2], model_max_length=32,
    )  # fmt: skip


def instruction_texts() -> list[str]:
    from policyforge.rewards.config import ClipRewardConfig
    from policyforge.sims.tasks.instructions import CUBE_COLOURS, PAD_COLOURS, TEMPLATES, ZONES

    words = " ".join([*CUBE_COLOURS, *PAD_COLOURS, *ZONES])
    config = ClipRewardConfig()
    return [*(t for family in TEMPLATES.values() for t in family), words, config.goal_template, config.baseline]


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A randomly initialised CLIP of the real architecture (2 layers, 32 wide), saved as a checkpoint directory
    (config, weights, tokenizer, image processor) as `hf download openai/clip-vit-base-patch32` leaves one."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    tokenizer = word_tokenizer(instruction_texts())
    layers = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    text = {**layers, "vocab_size": len(tokenizer), "max_position_embeddings": 32, "bos_token_id": 0,
            "eos_token_id": 1, "pad_token_id": 1}  # fmt: skip
    config = CLIPConfig(
        text_config=text, vision_config={**layers, "image_size": 32, "patch_size": 8}, projection_dim=16
    )
    out = tmp_path_factory.mktemp("checkpoints") / "tiny-clip"
    CLIPModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out)
    return out


QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>", "[UNK]"]  # fmt: skip
QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5-VL's chat layout (its checkpoints ship a longer template that writes the same for these messages)."""


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory) -> Path:
    """A randomly initialised Qwen2.5-VL of the real architecture (2 text and 2 vision layers, 32 wide) with a word
    tokenizer carrying its special tokens and chat layout, and its image processor, saved as a checkpoint
    directory as `hf download Qwen/Qwen2.5-VL-3B-Instruct` leaves one."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
    )  # fmt: skip

    from policyforge.rewards.config import VlmJudgeConfig

    torch.manual_seed(0)
    texts = [*instruction_texts(), VlmJudgeConfig().prompt, "user assistant 1 2 3 4 5"]
    words = {word for text in texts for word in text.lower().replace("(", " ").replace(")", " ").split()}
    vocab = {t: i for i, t in enumerate(dict.fromkeys([*QWEN_SPECIALS, *sorted(words), ":", ".", ",", "(", ")"]))}
    words_only = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    words_only.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words_only, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="[UNK]",
        additional_special_tokens=QWEN_SPECIALS[1:7], chat_template=QWEN_TEMPLATE,
    )  # fmt: skip
    text = {"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 1024,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}  # fmt: skip
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 32,
              "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56,
              "fullatt_block_indexes": [1]}  # fmt: skip
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"], vision_start_token_id=vocab["<|vision_start|>"],
    )  # fmt: skip
    out = tmp_path_factory.mktemp("checkpoints") / "tiny-qwen2.5-vl"
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    processor = Qwen2VLImageProcessorPil(min_pixels=4 * 28 * 28, max_pixels=16 * 28 * 28, patch_size=14, merge_size=2)
    processor.save_pretrained(out)
    return out
