"""Action-chunk inference latency at batch 1 on this CPU, per policy class, eager PyTorch and exported ONNX
(onnxruntime), one thread each.

Policies have their default sizes for arm-lift-cube (state 32, action 5): Gaussian MLP 256-256; diffusion /
flow: MLP denoiser 3×256, 2 observations, chunks of 8. Each figure is the median and p99 over `--calls`
calls of `act` (the deterministic sampler with its fixed number of steps) after a warm-up.

    policyforge bench policy-latency [--calls 2000]

The last line is JSON {"latency_ms": {key: eager median}, "onnx_ms": {key: median}, "targets": ...}.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from rich.console import Console
from rich.table import Table

from policyforge.config import from_dict
from policyforge.policies.base import Policy
from policyforge.policies.diffusion import DiffusionConfig, DiffusionPolicy
from policyforge.policies.export import export, input_names
from policyforge.policies.flow import FlowConfig, FlowPolicy
from policyforge.policies.gaussian import GaussianConfig, GaussianPolicy

STATE_DIM, ACTION_DIM = 32, 5
CHUNK = {"n_obs_steps": 2, "horizon": 8, "act_steps": 4}
TARGETS_MS = {"meanflow_1": 0.5, "shortcut_1": 0.5, "diffusion_ddim10": 5.0}
"""The issue's targets: one-step flow ≤ 0.5 ms, 10-step diffusion ≤ 5 ms."""


def policies() -> dict[str, Policy]:
    def flow(variant: str, steps: int) -> FlowPolicy:
        config = from_dict(FlowConfig, {"chunk": CHUNK, "variant": variant, "steps": steps})
        return FlowPolicy(STATE_DIM, ACTION_DIM, config)

    return {
        "gaussian": GaussianPolicy(STATE_DIM, ACTION_DIM, GaussianConfig(hidden=[256, 256])),
        "diffusion_ddim10": DiffusionPolicy(
            STATE_DIM, ACTION_DIM, from_dict(DiffusionConfig, {"chunk": CHUNK, "inference_steps": 10})
        ),
        "flow_rf10": flow("rectified", 10),
        "shortcut_1": flow("shortcut", 1),
        "shortcut_4": flow("shortcut", 4),
        "meanflow_1": flow("meanflow", 1),
    }


def timings_ms(call, calls: int) -> tuple[float, float]:
    for _ in range(max(50, calls // 10)):
        call()
    samples = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        call()
        samples[i] = time.perf_counter() - start
    return float(np.median(samples) * 1e3), float(np.percentile(samples, 99) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, policy in policies().items():
            policy.eval()
            obs = policy.example_obs(1)
            with torch.no_grad():
                eager = timings_ms(lambda policy=policy, obs=obs: policy.act(obs), args.calls)
            path = export(policy, Path(tmp) / f"{key}.onnx", "onnx")
            session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            feed = {i.name: obs[k].numpy() for i, k in zip(session.get_inputs(), input_names(policy), strict=True)}
            onnx = timings_ms(lambda session=session, feed=feed: session.run(None, feed), args.calls)
            rows[key] = {"eager": eager, "onnx": onnx}
    table = Table(title=f"act() latency at batch 1, ms (median / p99 over {args.calls} calls, 1 thread)")
    for column in ("policy", "eager median", "eager p99", "onnxruntime median", "onnxruntime p99", "target"):
        table.add_column(column)
    for key, row in rows.items():
        target = TARGETS_MS.get(key)
        met = "" if target is None else f"≤ {target} ({'met' if row['eager'][0] <= target else 'MISSED'})"
        table.add_row(key, *(f"{v:.3f}" for v in (*row["eager"], *row["onnx"])), met)
    Console(width=160).print(table)
    print(
        json.dumps(
            {
                "latency_ms": {k: round(v["eager"][0], 4) for k, v in rows.items()},
                "onnx_ms": {k: round(v["onnx"][0], 4) for k, v in rows.items()},
                "p99_ms": {k: round(v["eager"][1], 4) for k, v in rows.items()},
                "targets_ms": TARGETS_MS,
            }
        )
    )


if __name__ == "__main__":
    main()
