"""MJX steps/s against batch size on whatever JAX device exists, next to the native backend on the same task.

Both go through the full VecEnv contract (task logic, auto-reset, episode statistics, torch tensors out,
random torch actions in), interleaved in one process. Batch sizes grow until the device runs out of
memory. Compile time is reported apart (a second run of the same batch size reads JAX's disk cache).

    policyforge bench mjx-scaling [--task quadruped-walk] [--batches 64 256 1024 4096] [--native-batches 64 256]

Prints a table; the last line is one JSON object {"device", "task", "best_batch", "mjx_sps", "native_sps",
"ratio", ...} with ratio = best MJX steps/s / best native steps/s.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import torch

from policyforge.sims import SimConfig, make_env


def steps_per_second(env, seconds: float, min_steps: int = 3) -> float:
    """Environment steps per second of `env` under random actions (after 2 warm-up steps)."""
    generator = torch.Generator(device=env.device).manual_seed(0)
    shape = (env.num_envs, env.action_dim)
    for _ in range(2):
        env.step(torch.rand(shape, generator=generator, device=env.device) * 2 - 1)
    steps, start = 0, time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
        env.step(torch.rand(shape, generator=generator, device=env.device) * 2 - 1)
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="quadruped-walk")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--native-batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per measurement")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    args = parser.parse_args()
    jax_device = str(jax.devices()[0])
    rows = []
    for n in args.native_batches:
        env = make_env(SimConfig(task=args.task, num_envs=n, backend="mujoco"), seed=0)
        rows.append(("mujoco", n, steps_per_second(env, args.seconds), 0.0))
        env.close()
    for n in args.batches:
        try:
            env = make_env(SimConfig(task=args.task, num_envs=n, backend="mjx", device=args.device), seed=0)
            rows.append(("mjx", n, steps_per_second(env, args.seconds), env.compile_seconds))
            env.close()
        except Exception as err:  # the device ran out of memory: larger batches will too
            if "RESOURCE_EXHAUSTED" not in str(err) and "out of memory" not in str(err).lower():
                raise
            print(f"mjx N={n}: out of device memory, stopping here")
            break
    print(f"task {args.task}; JAX device {jax_device}; torch device {args.device}")
    print(f"{'backend':>8} {'N':>6} {'steps/s':>12} {'compile s':>10}")
    for backend, n, sps, compile_s in rows:
        print(f"{backend:>8} {n:6d} {sps:12,.0f} {compile_s:10.1f}")
    best_mjx = max((r for r in rows if r[0] == "mjx"), key=lambda r: r[2])
    best_native = max((r for r in rows if r[0] == "mujoco"), key=lambda r: r[2])
    print(
        json.dumps(
            {
                "device": jax_device,
                "task": args.task,
                "best_batch": best_mjx[1],
                "mjx_sps": round(best_mjx[2]),
                "native_sps": round(best_native[2]),
                "native_batch": best_native[1],
                "ratio": round(best_mjx[2] / best_native[2], 3),
                "mjx_compile_s": round(best_mjx[3], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
