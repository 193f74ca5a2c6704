"""One VLA decision (prefix + K denoising steps of the action expert) with and without the prefix cache, at batch 1
and 64, on this CPU; parameters, and the exported ONNX graph at batch 1.

The VLA has its default size for arm-instructed with two 64 × 64 cameras (state 22, action 5, chunks of 8, K = 10
Euler steps; EfficientNet-lite0 image tokens, MiniLM instruction tokens, width 128, 2 prefix + 2 expert layers).
Three ways to take the same K Euler steps (the same actions, checked):

    cached        `policy.act`: the prefix once per decision, K expert passes; instruction features from the cache
                  (`prefix`: the prefix alone; `minilm`: the text encoder alone, what a cache miss costs)
    no prefix     K × (prefix + expert): the prefix recomputed at every step (instruction features still cached)
    no caches     K × (MiniLM + prefix + expert): nothing reused, the "full model" run K times

    policyforge bench vla-latency [--calls 20] [--threads 1] [--skip-onnx]

The last line is JSON {"prefix_cache_speedup": no prefix / cached at batch 1, "full_speedup": no caches / cached
at batch 1, "ms": {...}, "params": {...}}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from policyforge.policies.base import EnvSpec
from policyforge.policies.chunked import ChunkConfig
from policyforge.policies.vla import VLAConfig, VLAPolicy
from policyforge.sims.instruction_obs import tokenizer
from policyforge.sims.tasks.instructions import texts

STATE_DIM, ACTION_DIM, IMAGE_SHAPE, STEPS = 22, 5, (2, 64, 64, 3), 10


def build() -> VLAPolicy:
    spec = EnvSpec({"policy": (STATE_DIM,), "image": IMAGE_SHAPE, "instruction": (24,)}, ACTION_DIM)
    config = VLAConfig(chunk=ChunkConfig(n_obs_steps=1, horizon=8, act_steps=4), steps=STEPS)
    return config.build(spec).eval()


def observations(batch: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    instructions = texts("train")
    picks = torch.randint(0, len(instructions), (batch,), generator=generator)
    return {
        "policy": torch.randn(batch, 1, STATE_DIM, generator=generator),
        "image": torch.randint(0, 256, (batch, 1, *IMAGE_SHAPE), generator=generator, dtype=torch.uint8),
        "instruction": tokenizer()([instructions[i] for i in picks]),
    }


@torch.no_grad()
def uncached_act(policy: VLAPolicy, obs: dict[str, torch.Tensor], text_cache: bool) -> torch.Tensor:
    """`policy.act`'s K Euler steps with the prefix (and, without `text_cache`, MiniLM) recomputed at each."""
    x = None
    for k in range(policy.steps):
        if not text_cache:
            policy.text.cache.clear()
        prefix = policy.encode(obs)
        x = policy.initial_latent(prefix, 0.0) if x is None else x
        t = torch.full_like(x[:, 0, 0], k / policy.steps)
        x = x + policy.velocity(x, t, prefix, policy.denoiser) / policy.steps
    return x.clamp(-1.0, 1.0)


def median_ms(call, calls: int) -> float:
    call()  # warm-up (fills the instruction cache where it is used)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples) * 1e3)


def decision_ms(policy: VLAPolicy, batch: int, calls: int) -> dict[str, float]:
    """Median ms of one decision at `batch` three ways (`cached`, `no_prefix_cache`, `no_caches`: module
    docstring; the same actions, checked) and of its parts (`prefix`, `minilm`)."""
    obs = observations(batch)
    with torch.no_grad():
        cached = policy.act(obs)
    for cache in (True, False):  # the baselines take the same steps
        error = float((uncached_act(policy, obs, cache) - cached).abs().max())
        assert error < 1e-4, f"the uncached sampler differs from act by {error}"
    ms = {
        "cached": median_ms(lambda: policy.act(obs), calls),
        "no_prefix_cache": median_ms(lambda: uncached_act(policy, obs, True), calls),
        "no_caches": median_ms(lambda: uncached_act(policy, obs, False), calls),
    }
    with torch.no_grad():
        ms["prefix"] = median_ms(lambda: policy.encode(obs), calls)
        ids = obs["instruction"].long()
        ms["minilm"] = median_ms(lambda: policy.text.network(ids, ids != 0), calls)
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-onnx", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = build()
    ms: dict[str, float] = {}
    for batch in (1, 64):
        calls = args.calls if batch == 1 else max(3, args.calls // 4)
        ms |= {f"{key}_b{batch}": value for key, value in decision_ms(policy, batch, calls).items()}
    if not args.skip_onnx:
        import onnxruntime

        from policyforge.policies.export import export, input_names

        with tempfile.TemporaryDirectory() as tmp:
            path = export(policy, Path(tmp) / "vla.onnx", "onnx")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            obs = observations(1)
            feed = {i.name: obs[k].numpy() for i, k in zip(session.get_inputs(), input_names(policy), strict=True)}
            ms["onnx_b1"] = median_ms(lambda: session.run(None, feed), args.calls)
            ms["onnx_mb"] = path.stat().st_size / 1e6
    params = {
        "trainable": sum(p.numel() for p in policy.parameters() if p.requires_grad),
        "frozen_in_policy": sum(p.numel() for p in policy.parameters() if not p.requires_grad),
        "minilm_frozen_outside": sum(p.numel() for p in policy.text.network.parameters()),
    }
    print(f"VLA decision, K={STEPS}, {args.threads} thread(s), median ms over {args.calls} calls (batch 64: fewer)")
    for batch in (1, 64):
        row = {k: ms[f"{k}_b{batch}"] for k in ("minilm", "prefix", "cached", "no_prefix_cache", "no_caches")}
        print(f"  batch {batch:>2}: " + "  ".join(f"{k} {v:8.2f}" for k, v in row.items()))
    if "onnx_b1" in ms:
        print(f"  onnxruntime, batch 1 (MiniLM inside the graph): {ms['onnx_b1']:.2f} ms, {ms['onnx_mb']:.0f} MB")
    print(f"  parameters: {params}")
    result = {
        "prefix_cache_speedup": round(ms["no_prefix_cache_b1"] / ms["cached_b1"], 2),
        "full_speedup": round(ms["no_caches_b1"] / ms["cached_b1"], 2),
        "prefix_cache_speedup_b64": round(ms["no_prefix_cache_b64"] / ms["cached_b64"], 2),
        "ms": {k: round(v, 3) for k, v in ms.items()},
        "params": params,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
