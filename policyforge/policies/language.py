"""The VLA's frozen text encoder: all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT, 22.7M parameters) with its
pretrained weights, offline, built here in torch (no transformers / sentence-transformers: the weights are a
safetensors file of BERT's named tensors, loaded with every key matched).

    token ids int [B, L] (obs["instruction"], `sims.instruction_obs`) → token features [B, L, 384], mask [B, L] bool

`InstructionEncoder` caches the features of every distinct instruction it has seen (an instruction is fixed for a
whole episode and a task suite has a few hundred), so rollouts, PPO's rescoring and BC pay for MiniLM once per
instruction, and the cache is exact (the stored output of the same frozen network). The network is one per process
and outside every policy's state dict: checkpoints do not carry 90 MB of frozen weights that the package ships.
While a graph is being traced for export the cache is bypassed and the network runs inside the graph.
"""

from __future__ import annotations

import math
from functools import cache

import torch
from torch import nn
from torch.nn import functional as F

from policyforge.sims.instruction_obs import CLS_ID, INSTRUCTION_KEY, PAD_ID, VOCAB_SIZE, minilm_dir

WIDTH, LAYERS, HEADS, FFN, POSITIONS = 384, 6, 12, 1536, 512
"""all-MiniLM-L6-v2's shape (its config.json)."""
LN_EPS = 1e-12
MAX_CACHED = 4096
"""Distinct instructions kept in the cache (the arm suite has < 300); beyond it the cache starts over."""


class BertLayer(nn.Module):
    """Post-norm transformer layer with BERT's parameter names."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        for name in ("query", "key", "value"):
            setattr(self.attention.self, name, nn.Linear(WIDTH, WIDTH))
        self.attention.output = nn.Module()
        self.attention.output.dense = nn.Linear(WIDTH, WIDTH)
        self.attention.output.LayerNorm = nn.LayerNorm(WIDTH, eps=LN_EPS)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(WIDTH, FFN)
        self.output = nn.Module()
        self.output.dense = nn.Linear(FFN, WIDTH)
        self.output.LayerNorm = nn.LayerNorm(WIDTH, eps=LN_EPS)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        heads = [
            getattr(self.attention.self, name)(x).view(b, n, HEADS, WIDTH // HEADS).transpose(1, 2)
            for name in ("query", "key", "value")
        ]
        context = F.scaled_dot_product_attention(*heads, attn_mask=bias).transpose(1, 2).reshape(b, n, WIDTH)
        x = self.attention.output.LayerNorm(x + self.attention.output.dense(context))
        return self.output.LayerNorm(x + self.output.dense(F.gelu(self.intermediate.dense(x))))


class MiniLM(nn.Module):
    """BERT encoder: token ids [B, L] → last hidden states [B, L, 384] (keys as in the pretrained file)."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(VOCAB_SIZE, WIDTH)
        self.embeddings.position_embeddings = nn.Embedding(POSITIONS, WIDTH)
        self.embeddings.token_type_embeddings = nn.Embedding(2, WIDTH)
        self.embeddings.LayerNorm = nn.LayerNorm(WIDTH, eps=LN_EPS)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([BertLayer() for _ in range(LAYERS)])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        e = self.embeddings
        positions = e.position_embeddings.weight[: ids.shape[1]]
        x = e.LayerNorm(e.word_embeddings(ids) + positions + e.token_type_embeddings.weight[0])
        bias = torch.where(mask, 0.0, -math.inf)[:, None, None, :].to(x.dtype)  # padding is never attended
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x


@cache
def minilm() -> MiniLM:
    """The process's MiniLM with the pretrained weights, frozen and in eval mode; ValueError if a key differs."""
    from safetensors.torch import load_file

    network = MiniLM()
    weights = load_file(str(minilm_dir() / "model.safetensors"))
    weights.pop("embeddings.position_ids", None)  # a constant arange, not a weight
    for name in ("pooler.dense.weight", "pooler.dense.bias"):  # BERT's [CLS] head: sentence-transformers skips it too
        weights.pop(name)
    missing, unexpected = network.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ValueError(f"all-MiniLM-L6-v2 weights do not match: missing {missing[:4]}, unexpected {unexpected[:4]}")
    return network.eval().requires_grad_(False)


def check_instruction(ids: torch.Tensor, length: int) -> None:
    """ValueError naming obs.instruction unless `ids` are tokenized instructions int [B, length] (a row starting
    with [CLS], ids in the vocabulary)."""
    if ids.dim() != 2 or ids.shape[1] != length or ids.is_floating_point():
        raise ValueError(
            f"obs.{INSTRUCTION_KEY}: expected token ids int [B, {length}] (sims.instruction_obs tokenizes the "
            f"instruction text), got {ids.dtype} {list(ids.shape)}"
        )
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return
    bad = ((ids[:, 0] != CLS_ID) | (ids < 0).any(1) | (ids >= VOCAB_SIZE).any(1)).nonzero()[:, 0]
    if len(bad):
        raise ValueError(
            f"obs.{INSTRUCTION_KEY}: row {int(bad[0])} is not a tokenized instruction ({ids[bad[0]].tolist()[:8]}…): "
            f"rows start with [CLS]={CLS_ID} and hold ids < {VOCAB_SIZE}; a missing instruction (all [PAD]) is "
            "refused — the env or dataset must give every episode its instruction"
        )


class InstructionEncoder(nn.Module):
    """Token ids [B, L] → (MiniLM token features [B, L, 384], mask [B, L] bool), cached per distinct instruction.
    Holds no parameters of its own (the frozen network is the process's `minilm()`)."""

    out_dim = WIDTH

    def __init__(self, length: int):
        super().__init__()
        self.length = length
        self.cache: dict[bytes, torch.Tensor] = {}
        self.misses = 0
        """Instructions encoded so far (the cache's misses; tests and benches read it)."""
        minilm()  # loaded now, not while a graph is being traced

    @property
    def network(self) -> MiniLM:
        """The process's frozen MiniLM: not a submodule, so outside state dicts, and shared by copies (BC's EMA)."""
        return minilm()

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_instruction(ids, self.length)
        ids = ids.long()
        mask = ids != PAD_ID
        if torch.jit.is_tracing() or torch.compiler.is_compiling():  # exported graphs run the encoder inside
            return self.network(ids, mask), mask
        unique, inverse = torch.unique(ids, dim=0, return_inverse=True)
        keys = [row.numpy().tobytes() for row in unique.cpu()]
        new = [i for i, key in enumerate(keys) if key not in self.cache]
        if new:
            if len(self.cache) + len(new) > MAX_CACHED:
                self.cache.clear()
            rows = unique[new]
            features = self.network(rows.cpu(), rows.cpu() != PAD_ID)
            self.cache.update({keys[i]: f for i, f in zip(new, features, strict=True)})
            self.misses += len(new)
        table = torch.stack([self.cache[key] for key in keys]).to(ids.device)
        return table[inverse], mask
